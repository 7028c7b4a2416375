"""Pipelined shuffles through Sluice: Structured Streaming's Real-Time Mode on a two-executor
cluster, whose answers must equal the same input processed in micro-batch mode (regular,
blocking shuffles, also through Sluice)."""

from __future__ import annotations

import glob
import time
from typing import Any, Dict, List, Tuple

import sluice
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sessions import http_json, own_executor_pids, ui_url
from sparkjobs import SlowConsumerQuery
from streaming import StreamingRun, latest_counts, run_to_completion

N = 6_000
BATCHES = [list(range(i, i + 1_000)) for i in range(0, N, 1_000)]


def _both_modes(spark: SparkSession, name: str, query: Any, done: Any) -> List[List[List[Any]]]:
    # Two map and two reduce tasks run at once: they fit the session's four slots.
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    real_time = run_to_completion(spark, query, f"{name}_rtm", True, BATCHES, done, pause=0.3)
    micro_batch = run_to_completion(spark, query, f"{name}_mb", False, BATCHES, done)
    return [real_time, micro_batch]


def test_group_by_count_matches_micro_batch(spark: SparkSession) -> None:
    def query(df: DataFrame) -> DataFrame:
        return df.withColumn("k", F.col("value") % 11).groupBy("k").count()

    real_time, micro_batch = _both_modes(spark, "counts", query, lambda rows: sum(latest_counts(rows).values()) == N)
    assert latest_counts(real_time) == latest_counts(micro_batch)
    assert latest_counts(real_time) == {k: len([v for v in range(N) if v % 11 == k]) for k in range(11)}


def test_drop_duplicates_matches_micro_batch(spark: SparkSession) -> None:
    def query(df: DataFrame) -> DataFrame:
        return df.withColumn("d", F.col("value") % 1_500).dropDuplicates(["d"]).select("d")

    real_time, micro_batch = _both_modes(spark, "dedup", query, lambda rows: len(rows) >= 1_500)
    assert sorted(r[0] for r in real_time) == sorted(r[0] for r in micro_batch) == list(range(1_500))


def test_repartition_matches_micro_batch(spark: SparkSession) -> None:
    def query(df: DataFrame) -> DataFrame:
        return df.repartition(2, "value").select((F.col("value") * 3).alias("x"))

    real_time, micro_batch = _both_modes(spark, "repart", query, lambda rows: len(rows) >= N)
    assert sorted(r[0] for r in real_time) == sorted(r[0] for r in micro_batch) == [3 * v for v in range(N)]


def _executor_segments(spark: SparkSession) -> List[Dict[str, Any]]:
    executors = http_json(ui_url(spark).rstrip("/") + "/sluice/json")["executors"]
    return [e for e in executors if e["executor_id"] != "driver"]


def test_slow_consumer_backpressures_its_producer_and_a_stopped_query_leaves_nothing(spark: SparkSession) -> None:
    """A consumer that pauses on every record: its producers block on buffer requests (HIGH,
    outPoolUsage near 1.0) instead of queueing without bound; stopping the query mid-batch returns
    every network buffer and leaves no extra threads."""
    slow = SlowConsumerQuery(spark)
    try:
        producer, consumer, row, tasks = slow.backpressured_stages()
        assert row["backpressure_ratio"] > 0.5
        [consumer_row] = sluice.backpressure(spark, stage_id=consumer).to_pylist()
        assert consumer_row["backpressure_level"] != "HIGH", consumer_row
        assert all(r["backPressuredTimeMsPerSecond"] > 0 for r in tasks)
        # Pipelined producers report the buffer timeout in effect (the session's 5 ms).
        assert all(r["output_type"] == "pipelined" and r["buffer_timeout_ms"] == 5 for r in tasks), tasks
        # Bounded: a producer holds at most its pool (2 subpartitions x 2 + 8 floating = 12
        # buffers), and no executor uses more than its network memory.
        assert all(r["outputQueueLength"] <= 12 for r in tasks), [r["outputQueueLength"] for r in tasks]
        for e in _executor_segments(spark):
            assert e["UsedMemorySegments"] <= e["TotalMemorySegments"]
    finally:
        slow.stop()  # mid-batch: the producer and consumer tasks are killed
    deadline = time.monotonic() + 60
    used: List[int] = []
    while time.monotonic() < deadline:
        used = [e["UsedMemorySegments"] for e in _executor_segments(spark)]
        if used and all(u == 0 for u in used):
            break
        time.sleep(0.5)
    assert used and all(u == 0 for u in used), f"network buffers still in use after the query stopped: {used}"
    # No thread per query, task or channel: what is left is each executor's fixed set.
    _assert_bounded_threads(_sluice_threads(spark))


def _sluice_threads(spark: SparkSession) -> List[str]:
    """Names (as the kernel keeps them: 15 characters) of the threads named sluice-* in this
    application's executor processes, and only theirs: other applications on the machine (another
    Sluice test, a benchmark) have threads of the same names."""
    pids = own_executor_pids(spark)
    assert len(pids) == 2, f"expected this application's two executor processes, found {pids}"
    names = []
    for pid in pids:
        for comm in glob.glob(f"/proc/{pid}/task/*/comm"):
            try:
                with open(comm) as f:
                    name = f.read().strip()
            except FileNotFoundError:  # the thread ended meanwhile
                continue
            if "sluice" in name.lower():
                names.append(name)
    return sorted(names)


def _assert_bounded_threads(names: List[str], executors: int = 2, cores: int = 2) -> None:
    """Per executor: one of each service thread (boss, output flusher, metrics reporter,
    backpressure sampler; the sampler starts with the first sample), at most ``cores`` Netty
    event loops for the server and for the client (they start with the first connection they get)
    and at most ``cores`` partition read threads (spark.sluice.network.readThreads at its default)."""
    loops = [n for n in names if n.startswith(("sluice-server", "sluice-client"))]
    assert len(loops) <= executors * 2 * cores, f"{len(loops)} Netty event-loop threads: {names}"
    reads = [n for n in names if n.startswith("sluice-partitio")]  # sluice-partition-read-<port>-N, cut to 15
    assert len(reads) <= executors * cores, f"{len(reads)} partition read threads: {names}"
    services = [n for n in names if n not in loops and n not in reads]
    for kind in set(n[:12] for n in services):
        assert sum(1 for n in services if n.startswith(kind)) <= executors, (
            f"more than one {kind}* per executor: {names}"
        )


def _sluice_connections() -> Dict[Tuple[int, int], int]:
    """Established TCP connections between Sluice servers' ports and their clients, from the kernel:
    {(server port, client port): count}."""
    connections: Dict[Tuple[int, int], int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):  # the JVM's sockets are often IPv6 (mapped IPv4)
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local, remote, state = fields[1], fields[2], fields[3]
                if state != "01":  # ESTABLISHED
                    continue
                key = (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16))
                connections[key] = connections.get(key, 0) + 1
    return connections


def test_batches_reuse_the_executors_connections(spark: SparkSession) -> None:
    """Every Real-Time Mode batch is a new job with a new shuffle: the second and third batch run
    over the same executor-pair connections as the first."""
    spark.conf.set("spark.sql.shuffle.partitions", "2")

    def sluice_links() -> set:
        # (server port, client port) pairs whose server side is a Sluice server; the servers
        # start with the executors' first Sluice task, so they are known after the first batch.
        ports = {e["server_port"] for e in _executor_segments(spark) if e.get("server_port")}
        assert len(ports) == 2, f"expected two executors' Sluice servers, got {ports}"
        return {k for k in _sluice_connections() if k[0] in ports}

    def query(df: DataFrame) -> DataFrame:
        return df.withColumn("k", F.col("value") % 5).groupBy("k").count()

    run = StreamingRun(spark, query, "reuse", real_time=True)
    seen: List[set] = []
    try:
        for batch in range(3):
            run.add(range(batch * 100, batch * 100 + 100))
            run.wait_until(lambda rows: sum(latest_counts(rows).values()) == (batch + 1) * 100)  # noqa: B023 (called at once, in the loop)
            seen.append(sluice_links())
            time.sleep(5.5)  # the next 5 s batch: a new job and a new shuffle id
    finally:
        run.stop()
    assert seen[0], "no Sluice connection between the executors"
    assert seen[0] == seen[1] == seen[2], seen
    # One connection per executor pair and direction: at most one client connection per server.
    assert len(seen[0]) <= 2, seen[0]
