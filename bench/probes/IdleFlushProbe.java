/*
 * The deferred idle flush at the JVM level (docs/benchmarks-history.md, "The tail at low load"): a pipelined
 * partition with a 5 ms buffer timeout and a 1 ms idle-flush interval, flushed by an OutputFlusher,
 * and one local reader thread woken by its availability listener. The producer writes bursts of
 * -Dburst records (default 2) -DgapUs apart (default 300) every 10 ms, as a Real-Time Mode source
 * polled every 10 ms hands them over; the reader takes write-to-read latency per record. "none"
 * builds the partition without the flusher (no deferred idle flush: a record inside the interval
 * waits for the flusher's tick), "deferred" with it; the two alternate, after a discarded warm-up.
 * A single-file Java program (no build step), run against the plugin jar and Spark's jars:
 *
 *   java -cp "build/libs/sluice-0.1.0.jar:.venv/lib/python3.11/site-packages/pyspark/jars/*" \
 *       bench/probes/IdleFlushProbe.java SECONDS ROUNDS
 */

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

import io.netty.buffer.ByteBuf;
import io.sluice.memory.NetworkBufferPool;
import io.sluice.partition.BufferAndBacklog;
import io.sluice.partition.PipelinedResultPartition;
import io.sluice.partition.ResultPartitionID;
import io.sluice.partition.ResultSubpartitionView;
import io.sluice.writer.OutputFlusher;
import org.apache.spark.unsafe.Platform;
import scala.runtime.BoxedUnit;

public class IdleFlushProbe {
    static final int BURST = Integer.getInteger("burst", 2);
    static final long GAP_NS = Long.getLong("gapUs", 300L) * 1000L;

    public static void main(String[] args) throws Exception {
        int seconds = Integer.parseInt(args[0]);
        int rounds = Integer.parseInt(args[1]);
        OutputFlusher flusher = new OutputFlusher("probe-flusher");
        NetworkBufferPool global = new NetworkBufferPool(64, 32768, 60000L);
        run(global, flusher, "none", 2, -1, false);
        run(global, flusher, "deferred", 2, -1, false);
        for (int r = 0; r < rounds; r++) {
            for (String mode : (r % 2 == 0) ? new String[]{"none", "deferred"} : new String[]{"deferred", "none"}) {
                run(global, flusher, mode, seconds, r, true);
            }
        }
        flusher.shutdown();
    }

    static void run(NetworkBufferPool global, OutputFlusher flusher, String mode, int seconds, int round, boolean print)
            throws Exception {
        scala.Option<OutputFlusher> f = mode.equals("deferred") ? scala.Option.apply(flusher) : scala.Option.empty();
        PipelinedResultPartition p = new PipelinedResultPartition(new ResultPartitionID(round + 1, mode.hashCode()), 1,
            global.createBufferPool(2, 16, "probe"), 1024, 60000L, x -> BoxedUnit.UNIT, 5L, 1L, f);
        OutputFlusher.Registration registration = flusher.register(p, 5L);
        Semaphore available = new Semaphore(0);
        ResultSubpartitionView view = p.createSubpartitionView(0, 1, available::release);
        int capacity = seconds * 100 * BURST + 1000;
        long[] all = new long[capacity];
        long[][] byPosition = new long[BURST][capacity];
        int[] n = new int[1 + BURST];
        Thread reader = new Thread(() -> {
            try {
                while (true) {
                    available.tryAcquire(100, TimeUnit.MILLISECONDS);
                    for (BufferAndBacklog next = view.getNextBuffer(); next != null; next = view.getNextBuffer()) {
                        if (next.isEndOfPartition()) return;
                        ByteBuf b = next.buffer();
                        long now = System.nanoTime();
                        while (b.readableBytes() >= 16) { // a 4-byte frame header, then the 12-byte record
                            b.skipBytes(4);
                            long latency = now - b.readLong();
                            int position = b.readInt();
                            if (n[0] < capacity) all[n[0]++] = latency;
                            if (n[1 + position] < capacity) byPosition[position][n[1 + position]++] = latency;
                        }
                        b.release();
                    }
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "probe-reader");
        reader.start();
        byte[] record = new byte[12];
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        while (System.nanoTime() < end) {
            for (int i = 0; i < BURST; i++) {
                ByteBuffer.wrap(record).putLong(System.nanoTime()).putInt(i);
                p.emitRecord(0, record, Platform.BYTE_ARRAY_OFFSET, 12);
                if (i + 1 < BURST) LockSupport.parkNanos(GAP_NS);
            }
            LockSupport.parkNanos(10_000_000L - (BURST - 1) * GAP_NS);
        }
        p.finish();
        registration.cancel();
        reader.join(60000);
        if (print) {
            long[] l = sorted(all, n[0]);
            System.out.printf("round %d %-8s records %d  p50 %.2f  p90 %.2f  p95 %.2f  p99 %.2f  max %.2f ms%n", round,
                mode, l.length, q(l, .5), q(l, .9), q(l, .95), q(l, .99), q(l, 1.0));
            for (int k = 0; k < BURST; k++) {
                long[] x = sorted(byPosition[k], n[1 + k]);
                System.out.printf("    record %d of a burst: p50 %.2f  p90 %.2f  p99 %.2f ms%n", k + 1, q(x, .5), q(x, .9),
                    q(x, .99));
            }
        }
    }

    static long[] sorted(long[] values, int count) {
        long[] copy = Arrays.copyOf(values, count);
        Arrays.sort(copy);
        return copy;
    }

    static double q(long[] sorted, double q) {
        return sorted.length == 0 ? -1 : sorted[Math.min(sorted.length - 1, (int) Math.ceil(q * sorted.length) - 1)] / 1e6;
    }
}
