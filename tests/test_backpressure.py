"""sluice.backpressure: the stack-sampling monitor classifies real running stages.

A stage whose tasks wait for something else than buffers (here: Python code sleeping) must stay
OK. A HIGH stage needs a producer that really blocks on buffer requests: the producer stage of a
Real-Time Mode query whose consumer is slow (a pipelined Sluice shuffle, see SlowConsumerQuery).
"""

from __future__ import annotations

import time
from typing import Any, Iterator

import pytest
import sluice
from sluice.monitoring import BACKPRESSURE_SCHEMA, LEVELS
from sparkjobs import Background, SlowConsumerQuery, sample_until_all_tasks_seen, stages_of_group


def test_an_idle_stage_stays_ok(spark: Any) -> None:
    sc = spark.sparkContext

    def sleepy(rows: Iterator[Any]) -> Iterator[int]:  # nested: pickled by value for the workers
        time.sleep(6)
        yield sum(1 for _ in rows)

    job = Background(
        spark,
        "sluice-idle",
        lambda: sc.parallelize(range(1000), 2).map(lambda x: (x % 7, x)).partitionBy(2).mapPartitions(sleepy).sum(),
    )
    stage = job.running_stage()
    row = sample_until_all_tasks_seen(spark, stage, tasks=2)
    assert row["stage_id"] == stage
    assert row["sampled_tasks"] == 2  # both running tasks were really sampled...
    assert row["backpressure_ratio"] <= 0.10 and row["backpressure_level"] == "OK"  # ...and neither waited for a buffer
    assert row["cause"]
    assert job.join() == 1000  # every row reached the sleeping tasks
    # The whole job: every stage of it the monitor knows is OK, the sampled one among them.
    everything = {r["stage_id"]: r for r in sluice.backpressure(spark).to_pylist()}
    known = [s for s in stages_of_group(spark, "sluice-idle") if s in everything]
    assert stage in known, f"the sampled stage {stage} is missing from sluice.backpressure: {sorted(everything)}"
    for s in known:
        assert everything[s]["backpressure_level"] == "OK", everything[s]


def test_a_stage_blocked_by_a_slow_consumer_is_high(spark: Any) -> None:
    slow = SlowConsumerQuery(spark, "bp_slow_consumer")
    try:
        producer, consumer, row, tasks = slow.backpressured_stages()
    finally:
        slow.stop()
    assert row["backpressure_level"] == "HIGH", row
    assert row["backpressure_ratio"] > 0.5 and row["sampled_tasks"] == 2
    assert "backpressured" in row["cause"], row["cause"]
    assert all(r["numRecordsOut"] > 0 for r in tasks)
    assert all(r["backPressuredTimeMsPerSecond"] > 0 for r in tasks)
    # A finished stage keeps its last sample.
    [again] = sluice.backpressure(spark, stage_id=producer).to_pylist()
    assert again["backpressure_level"] == "HIGH" and again["backpressure_ratio"] == row["backpressure_ratio"]
    # Without waiting: the last sample the driver holds, without sampling again.
    [kept] = sluice.backpressure(spark, stage_id=producer, wait=False).to_pylist()
    assert kept == again


def test_levels_and_arguments(spark: Any) -> None:
    table = sluice.backpressure(spark)
    assert table.schema == BACKPRESSURE_SCHEMA
    assert set(table["backpressure_level"].to_pylist()) <= set(LEVELS)
    assert table["stage_id"].to_pylist() == sorted(table["stage_id"].to_pylist())
    with pytest.raises(ValueError):
        sluice.backpressure(spark, stage_id=-1)
    with pytest.raises(TypeError):
        sluice.backpressure(spark, stage_id=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        sluice.backpressure(spark, 3)  # type: ignore[misc]
    # A stage the driver never heard of: nothing to sample, reported OK with no samples.
    [unknown] = sluice.backpressure(spark, stage_id=99999).to_pylist()
    assert unknown == {
        "stage_id": 99999,
        "backpressure_ratio": 0.0,
        "backpressure_level": "OK",
        "cause": "No Sluice network metrics for this stage yet.",
        "suggested_buffer_timeout_ms": None,
        "sampled_tasks": 0,
    }
