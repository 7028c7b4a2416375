"""Pipelined shuffles through Sluice: Structured Streaming's Real-Time Mode on a two-executor
cluster, whose answers must equal the same input processed in micro-batch mode (regular,
blocking shuffles, also through Sluice)."""

from __future__ import annotations

from typing import Any, List

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streaming import latest_counts, run_to_completion

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

    real_time, micro_batch = _both_modes(spark, "counts", query,
                                         lambda rows: sum(latest_counts(rows).values()) == N)
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
