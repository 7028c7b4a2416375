"""Spark SQL hands Sluice's writer its rows without copying them, as it does the sort shuffle's.

Spark SQL copies every row before a shuffle (a new row and a tuple per record) unless the
shuffle manager is a SortShuffleManager (``ShuffleExchangeExec.needToCopyObjectsBeforeShuffle``).
Sluice's writer serialises each record as it gets it, so it needs no copy; its manager is a
SortShuffleManager for that check alone.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def test_sql_rows_reach_the_writer_without_a_copy(spark: Any) -> None:
    probe = spark.sparkContext._jvm.org.apache.spark.shuffle.sluice.TestingRowCopyProbe
    assert probe.blockingShuffleManagerClass().endswith("SluiceShuffleManager")
    previous = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        df = spark.range(0, 20_000, 1, 4).select((F.col("id") % 97).alias("k"), F.col("id").alias("v"))
        shuffled: DataFrame = df.repartition(16, "k")
        classes, objects, records = probe.recordsBeforeShuffle(shuffled._jdf).split("|")
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", previous)
    assert int(records) == 20_000
    # One reused pair per map partition, not a copied row and a tuple per record.
    assert classes == "org.apache.spark.util.MutablePair", classes
    assert int(objects) == 4, f"{objects} distinct objects carried {records} records: the rows were copied"
    # And the answer is the sort shuffle's: every row arrives once.
    assert shuffled.groupBy("k").count().agg(F.sum("count")).first()[0] == 20_000
