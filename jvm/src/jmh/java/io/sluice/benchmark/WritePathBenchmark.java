package io.sluice.benchmark;

import java.util.concurrent.TimeUnit;

import io.sluice.memory.LocalBufferPool;
import io.sluice.memory.NetworkBufferPool;
import io.sluice.partition.BufferAndBacklog;
import io.sluice.partition.PipelinedResultPartition;
import io.sluice.partition.ResultPartitionID;
import io.sluice.partition.ResultSubpartitionView;
import io.sluice.writer.ChannelSelector;
import io.sluice.writer.RecordSerializer;
import io.sluice.writer.RecordWriter;
import io.sluice.writer.SerializedRecord;
import org.apache.spark.unsafe.Platform;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OperationsPerInvocation;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.infra.Blackhole;
import scala.runtime.BoxedUnit;

/**
 * The write path of the engine core: records per second serialised through a RecordWriter into the
 * 32 KiB network buffers of a PipelinedResultPartition with four subpartitions (round robin), with
 * no flushing but full buffers (buffer timeout -1, the throughput setting).
 *
 * <p>The benchmark thread also plays the consumer: after every {@value #RECORDS_PER_INVOCATION}
 * records it takes every finished buffer out of the subpartition views and releases it, so the
 * buffers go back to the partition's pool and the producer never waits (no backpressure is
 * measured). {@code serializer=point} copies each record once, straight into the network buffer
 * (Spark's UnsafeRow path); {@code serializer=scratch} first writes it into the on-heap scratch
 * array, as an object serialiser does, then copies it.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.Throughput)
@OutputTimeUnit(TimeUnit.SECONDS)
@Fork(1)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
public class WritePathBenchmark {

    static final int RECORDS_PER_INVOCATION = 100;
    static final int SUBPARTITIONS = 4;
    static final int SEGMENT_SIZE = 32 * 1024;

    @Param({"8", "100", "10240"})
    public int recordSize;

    @Param({"point", "scratch"})
    public String serializer;

    private NetworkBufferPool global;
    private PipelinedResultPartition partition;
    private ResultSubpartitionView[] views;
    private RecordWriter<byte[]> writer;
    private byte[] record;

    /** Round robin over the subpartitions, as a hash partitioner spreads keys. */
    private static final class RoundRobin implements ChannelSelector<byte[]> {
        private int next;

        @Override
        public int numberOfChannels() {
            return SUBPARTITIONS;
        }

        @Override
        public int selectChannel(byte[] record) {
            next = next + 1 == SUBPARTITIONS ? 0 : next + 1;
            return next;
        }
    }

    private static final class Pointing implements RecordSerializer<byte[]> {
        @Override
        public void serialize(byte[] record, int subpartition, SerializedRecord target) {
            target.point(record, Platform.BYTE_ARRAY_OFFSET, record.length);
        }
    }

    private static final class Scratch implements RecordSerializer<byte[]> {
        @Override
        public void serialize(byte[] record, int subpartition, SerializedRecord target) {
            target.scratch().write(record, 0, record.length);
            target.useScratch();
        }
    }

    @Setup(Level.Trial)
    public void setUp() {
        global = new NetworkBufferPool(1024, SEGMENT_SIZE);
        LocalBufferPool pool = global.createBufferPool(SUBPARTITIONS + 1, 512, "benchmark producer");
        partition = new PipelinedResultPartition(new ResultPartitionID(0, 0L), SUBPARTITIONS, pool, 1024, 60000L,
            p -> BoxedUnit.UNIT, -1L, -1L, scala.Option.empty());
        views = new ResultSubpartitionView[SUBPARTITIONS];
        for (int i = 0; i < SUBPARTITIONS; i++) {
            views[i] = partition.createSubpartitionView(i, i + 1, () -> { });
        }
        RecordSerializer<byte[]> s = serializer.equals("point") ? new Pointing() : new Scratch();
        writer = new RecordWriter<>(partition, new RoundRobin(), s, false);
        record = new byte[recordSize];
        for (int i = 0; i < recordSize; i++) {
            record[i] = (byte) (i * 31);
        }
    }

    @Benchmark
    @OperationsPerInvocation(RECORDS_PER_INVOCATION)
    public void emit(Blackhole bh) {
        for (int i = 0; i < RECORDS_PER_INVOCATION; i++) {
            writer.emit(record);
        }
        bh.consume(drain());
    }

    /** Takes every readable buffer out of the views and releases it; returns the bytes taken. */
    private long drain() {
        long bytes = 0;
        for (ResultSubpartitionView view : views) {
            BufferAndBacklog b = view.getNextBuffer();
            while (b != null) {
                bytes += b.size();
                b.recycle();
                b = view.getNextBuffer();
            }
        }
        return bytes;
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        partition.finish();
        drain();
        if (!partition.isReleased()) {
            throw new IllegalStateException("every subpartition was read to its end, yet " + partition + " is not released");
        }
        if (global.numberOfAvailableSegments() != global.totalSegments()) {
            throw new IllegalStateException("buffers leaked: " + global);
        }
        global.destroy();
    }
}
