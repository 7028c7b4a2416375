"""sluice.metrics on a known job: exact counters against the job and against Spark's own
shuffle metrics (REST API), Flink's column names, and the demo's network table."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import sluice
from sessions import SESSION_MASTER, http_json, ui_url
from sluice.demo import network_metrics_by_stage, print_network_metrics
from sluice.monitoring import FLINK_METRICS, ID_COLUMNS, OUTPUT_COLUMNS, STAGE_COLUMNS
from sparkjobs import run_in_group, shuffle_rows

ROWS = 100_000


@pytest.fixture(scope="module")
def known_job(spark: Any) -> Tuple[List[int], Any]:
    """100 000 rows through one shuffle; its stage ids and the metrics table read afterwards."""
    stages = run_in_group(spark, "sluice-known-job", lambda: shuffle_rows(spark, ROWS))
    return stages, sluice.metrics(spark)


def rows_of(table: Any, stages: List[int]) -> Any:
    return table.filter(pc.is_in(table["stage_id"], value_set=pa.array(stages, pa.int32())))


def total(table: Any, column: str) -> int:
    return int(pc.sum(table[column]).as_py() or 0)


def test_columns_are_the_ids_and_flinks_metric_names(known_job: Tuple[List[int], Any]) -> None:
    stages, table = known_job
    expected = [name for name, _ in ID_COLUMNS + STAGE_COLUMNS + OUTPUT_COLUMNS + FLINK_METRICS]
    assert table.schema.names[: len(expected)] == expected
    # Latency columns follow only if some job of the session tracked latency; this one did not.
    extra = table.schema.names[len(expected) :]
    assert all(name.startswith("latency_") for name in extra)
    if extra:
        assert all(row["latency_count"] is None for row in rows_of(table, stages).to_pylist())
    assert table.schema.field("numRecordsOut").type == pa.int64()
    assert table.schema.field("outPoolUsage").type == pa.float64()
    assert table.schema.field("executor_id").type == pa.string()
    assert table.num_rows > 0
    # A regular shuffle: blocking outputs, no buffer timeout (that is for pipelined producers).
    ours = rows_of(table, stages).to_pylist()
    assert {r["output_type"] for r in ours} <= {"blocking", ""} and "blocking" in {r["output_type"] for r in ours}
    assert all(r["buffer_timeout_ms"] is None for r in ours)


def test_records_out_and_in_are_exact(known_job: Tuple[List[int], Any]) -> None:
    stages, table = known_job
    ours = rows_of(table, stages)
    assert total(ours, "numRecordsOut") == ROWS
    assert total(ours, "numRecordsIn") == ROWS
    writers = ours.filter(pc.greater(ours["numRecordsOut"], 0))
    readers = ours.filter(pc.greater(ours["numRecordsIn"], 0))
    assert writers.num_rows == 4  # the four input partitions
    assert 1 <= readers.num_rows <= 3
    assert set(writers["stage_id"].to_pylist()).isdisjoint(readers["stage_id"].to_pylist())


def test_spark_reports_the_same_shuffle_records(spark: Any, known_job: Tuple[List[int], Any]) -> None:
    stages, _ = known_job
    app = spark.sparkContext.applicationId
    data: List[Dict[str, Any]] = http_json(f"{ui_url(spark)}/api/v1/applications/{app}/stages")
    ours = [s for s in data if s["stageId"] in stages and s["status"] == "COMPLETE"]
    assert sum(s["shuffleWriteRecords"] for s in ours) == ROWS
    assert sum(s["shuffleReadRecords"] for s in ours) == ROWS
    assert sum(s["shuffleWriteBytes"] for s in ours) > 0


def test_bytes_and_buffers(known_job: Tuple[List[int], Any]) -> None:
    stages, table = known_job
    ours = rows_of(table, stages)
    assert total(ours, "numBytesOut") >= ROWS * 4  # every record frame has a 4-byte header
    assert total(ours, "numBuffersOut") > 0
    assert total(ours, "numBytesInLocal") > 0
    assert total(ours, "numBuffersInLocal") > 0
    if SESSION_MASTER.startswith("local-cluster"):
        assert total(ours, "numBytesInRemote") > 0 and total(ours, "numBuffersInRemote") > 0
    else:  # one executor: every channel is local
        assert total(ours, "numBytesInRemote") == 0 and total(ours, "numBuffersInRemote") == 0
    for row in ours.to_pylist():
        if row["numRecordsOut"]:
            assert row["numBuffersOut"] >= 1 and row["numBytesOut"] >= 4 * row["numRecordsOut"]
        if row["numRecordsIn"]:
            assert row["numBuffersInLocal"] + row["numBuffersInRemote"] >= 1


def test_rates_and_time_shares_of_finished_tasks(known_job: Tuple[List[int], Any]) -> None:
    stages, table = known_job
    for row in rows_of(table, stages).to_pylist():
        if row["numRecordsOut"]:
            assert row["numRecordsOutPerSecond"] > 0 and row["numBytesOutPerSecond"] > 0
        if row["numRecordsIn"]:
            assert row["numRecordsInPerSecond"] > 0
        for name in ("backPressuredTimeMsPerSecond", "busyTimeMsPerSecond", "idleTimeMsPerSecond"):
            assert 0.0 <= row[name] <= 1000.0
        assert 0.0 <= row["outPoolUsage"] <= 1.0 and 0.0 <= row["inPoolUsage"] <= 1.0
        assert 0.0 <= row["exclusiveBuffersUsage"] <= 1.0 and 0.0 <= row["floatingBuffersUsage"] <= 1.0
        assert row["inputQueueLength"] >= 0 and row["outputQueueLength"] >= 0
        if not row["numBytesInRemote"]:  # no remote channel: no exclusive buffers, nothing queued
            assert row["exclusiveBuffersUsage"] == 0.0 and row["inputQueueLength"] == 0


def test_executor_memory_segments(spark: Any, known_job: Tuple[List[int], Any]) -> None:
    executors = http_json(f"{ui_url(spark)}/sluice/json")["executors"]
    assert executors
    for e in executors:
        assert e["TotalMemorySegments"] == (64 << 20) // (32 << 10)  # network memory / segment size
        assert e["AvailableMemorySegments"] + e["UsedMemorySegments"] == e["TotalMemorySegments"]
        # The server's read memory is an eighth of it, and its reads are reported beside it.
        assert e["TotalReadMemorySegments"] == e["TotalMemorySegments"] // 8
        assert 0 <= e["UsedReadMemorySegments"] <= e["TotalReadMemorySegments"]
        assert e["readQueueLength"] >= 0 and e["readWaitTimeMs"] >= 0 and e["partitionFileDescriptors"] >= 0
    table = sluice.executors(spark)
    assert table.num_rows == len(executors)
    assert set(sluice.monitoring.SERVER_METRICS) <= set(table.column_names)
    assert table.column("TotalReadMemorySegments").to_pylist() == [(64 << 20) // (32 << 10) // 8] * table.num_rows


def test_demo_prints_the_jobs_network_table(
    spark: Any, known_job: Tuple[List[int], Any], capsys: pytest.CaptureFixture[str]
) -> None:
    stages, _ = known_job
    by_stage = {row["stage_id"]: row for row in network_metrics_by_stage(spark)}
    assert sum(by_stage[s]["numRecordsOut"] for s in stages if s in by_stage) == ROWS
    assert sum(by_stage[s]["numRecordsIn"] for s in stages if s in by_stage) == ROWS
    print_network_metrics(spark)
    out = capsys.readouterr().out
    assert "records out" in out and "bytes in local" in out and "buffers in remote" in out
    assert f"{ROWS:,}" in out


def test_metrics_needs_a_spark_session() -> None:
    with pytest.raises(TypeError):
        sluice.metrics("not a session")  # type: ignore[arg-type]
