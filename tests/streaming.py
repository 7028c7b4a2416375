"""Driving Structured Streaming queries from tests: Real-Time Mode (pipelined shuffles) fed by
Spark's LowLatencyMemoryStream, and the same query in micro-batch mode fed by MemoryStream, both
into a memory sink that the test reads back. No Kafka needed.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any, Callable, Iterable, List, Optional

from pyspark.sql import DataFrame, SparkSession

Query = Callable[[DataFrame], DataFrame]


class StreamingRun:
    """One streaming query over an in-memory source of integers (column ``value``)."""

    def __init__(self, spark: SparkSession, query: Query, name: str, real_time: bool, partitions: int = 2) -> None:
        self.spark = spark
        self.name = name
        jvm = spark._jvm
        assert jvm is not None
        jss = spark._jsparkSession
        encoder = jvm.org.apache.spark.sql.Encoders.INT()
        if real_time:
            self.stream = jvm.org.apache.spark.sql.execution.streaming.sources.LowLatencyMemoryStream.apply(
                jss, partitions, encoder
            )
        else:
            self.stream = jvm.org.apache.spark.sql.execution.streaming.runtime.MemoryStream.apply(
                jss, partitions, encoder
            )
        df = DataFrame(self.stream.toDF(), spark)
        writer = (
            query(df)
            .writeStream.format("memory")
            .queryName(name)
            .outputMode("update")
            .option("checkpointLocation", tempfile.mkdtemp(prefix=f"{name}-ck-"))
        )
        writer = writer.trigger(realTime="5 seconds") if real_time else writer.trigger(processingTime="0 seconds")
        self.query = writer.start()

    def add(self, values: Iterable[int]) -> None:
        jvm = self.spark._jvm
        assert jvm is not None
        items = jvm.java.util.ArrayList()
        for v in values:
            items.add(int(v))
        self.stream.addData(jvm.scala.jdk.javaapi.CollectionConverters.asScala(items))

    def rows(self) -> List[List[Any]]:
        return [list(r) for r in self.spark.sql(f"select * from {self.name}").collect()]

    def wait_until(self, done: Callable[[List[List[Any]]], bool], timeout: float = 90.0) -> List[List[Any]]:
        """Polls the sink until ``done(rows)`` holds; fails with the query's error or a timeout."""
        deadline = time.monotonic() + timeout
        rows: List[List[Any]] = []
        while time.monotonic() < deadline:
            error = self.query.exception()
            if error is not None:
                raise AssertionError(f"query {self.name} failed: {error}")
            rows = self.rows()
            if done(rows):
                return rows
            time.sleep(0.2)
        raise AssertionError(f"query {self.name} did not finish within {timeout}s; last rows: {rows[:20]}")

    def stop(self) -> None:
        try:
            self.query.stop()
        finally:
            self.spark.catalog.dropTempView(self.name)


def latest_counts(rows: List[List[Any]]) -> dict:
    """For an update-mode groupBy().count() sink: each key's latest (largest) count."""
    latest: dict = {}
    for key, count in rows:
        latest[key] = max(latest.get(key, 0), count)
    return latest


def run_to_completion(
    spark: SparkSession,
    query: Query,
    name: str,
    real_time: bool,
    batches: List[List[int]],
    done: Callable[[List[List[Any]]], bool],
    pause: Optional[float] = None,
) -> List[List[Any]]:
    run = StreamingRun(spark, query, name, real_time)
    try:
        for batch in batches:
            run.add(batch)
            if pause:
                time.sleep(pause)
        return run.wait_until(done)
    finally:
        run.stop()
