"""Shuffle-heavy workloads whose answers Sluice must reproduce exactly.

Each workload takes a SparkSession and returns a plain, JSON-able, canonical answer (sorted where
the query's order is not part of the answer), so the answers of two runs with different shuffle
managers can be compared with ``==``. Data is generated deterministically on the cluster.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import os
from typing import Any, Callable, Dict, List

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

Answer = Any
Workload = Callable[[SparkSession], Answer]


def _rows(df: DataFrame) -> List[List[Any]]:
    return [list(r) for r in df.collect()]


def _sorted_rows(df: DataFrame) -> List[List[Any]]:
    return sorted(_rows(df), key=repr)


def _keyed(spark: SparkSession, rows: int, keys: int, seed: int, partitions: int = 8) -> DataFrame:
    return spark.range(0, rows, 1, partitions).select(
        F.pmod(F.xxhash64("id", F.lit(seed)), F.lit(keys)).alias("k"),
        F.pmod(F.xxhash64("id", F.lit(seed + 1)), F.lit(1_000_000)).alias("v"),
        F.col("id"),
    )


def df_group_by(spark: SparkSession) -> Answer:
    df = _keyed(spark, 300_000, 5_000, seed=1)
    out = df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"), F.min("v"), F.max("v"))
    return _sorted_rows(out)


def df_join(spark: SparkSession) -> Answer:
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    left = _keyed(spark, 200_000, 20_000, seed=3).withColumnRenamed("v", "lv")
    right = _keyed(spark, 150_000, 20_000, seed=5).withColumnRenamed("v", "rv").drop("id")
    joined = left.join(right, "k")
    plan = joined._jdf.queryExecution().executedPlan().toString()
    assert "BroadcastHashJoin" not in plan, plan
    out = joined.groupBy(F.pmod("k", F.lit(97)).alias("b")).agg(
        F.count("*").alias("n"), F.sum("lv").alias("sl"), F.sum("rv").alias("sr")
    )
    return _sorted_rows(out)


def df_distinct(spark: SparkSession) -> Answer:
    df = _keyed(spark, 250_000, 40_000, seed=7).select("k")
    d = df.distinct()
    return _rows(d.agg(F.count("*"), F.sum("k"), F.min("k"), F.max("k")))


def df_order_by(spark: SparkSession) -> Answer:
    df = _keyed(spark, 60_000, 1_000_000, seed=9)
    return _rows(df.orderBy("v", "id").select("v", "id"))


def df_window(spark: SparkSession) -> Answer:
    df = _keyed(spark, 120_000, 300, seed=11)
    w = Window.partitionBy("k").orderBy("v", "id")
    ranked = df.select("k", F.row_number().over(w).alias("rn"), F.sum("v").over(w).alias("running"))
    return _sorted_rows(ranked.groupBy("k").agg(F.max("rn"), F.sum("running"), F.max("running")))


def large_records(spark: SparkSession) -> Answer:
    """Records of 100 KB to 300 KB: each spans several 32 KiB network buffers."""
    df = spark.range(0, 240, 1, 6).select(
        (F.col("id") % 7).alias("k"),
        F.expr("repeat(sha2(cast(id as string), 256), 1600 + 3200 * cast(id % 3 as int))").alias("blob"),
    )
    out = (
        df.repartition(5, "k")
        .groupBy("k")
        .agg(
            F.count("*").alias("n"),
            F.sum(F.length("blob")).alias("bytes"),
            F.sort_array(F.collect_list(F.sha2("blob", 256))).alias("hashes"),
        )
    )
    return _sorted_rows(out)


def _python_pairs(spark: SparkSession, n: int, keys: int, seed: int) -> Any:
    def make(i: int) -> Any:
        h = (i * 2654435761 + seed) % 2**32
        return (h % keys, {"id": i, "tags": [h % 5, h % 7], "name": f"n{h % 1000}"})

    return spark.sparkContext.parallelize(range(n), 6).map(make)


def rdd_reduce_by_key(spark: SparkSession) -> Answer:
    pairs = _python_pairs(spark, 80_000, 700, seed=13)
    out = pairs.mapValues(lambda d: (1, d["id"], sum(d["tags"]))).reduceByKey(
        lambda a, b: (a[0] + b[0], a[1] + b[1], a[2] + b[2]), numPartitions=9
    )
    return sorted([k, list(v)] for k, v in out.collect())


def rdd_group_by_key(spark: SparkSession) -> Answer:
    pairs = _python_pairs(spark, 40_000, 300, seed=17)
    out = pairs.mapValues(lambda d: d["name"]).groupByKey(numPartitions=7)
    return sorted([k, sorted(v)] for k, v in out.collect())


def rdd_sort_by_key(spark: SparkSession) -> Answer:
    pairs = _python_pairs(spark, 30_000, 1_000_000, seed=19).map(lambda kv: (kv[0], kv[1]["id"]))
    return [list(kv) for kv in pairs.sortByKey(numPartitions=5).collect()]


def rdd_cogroup(spark: SparkSession) -> Answer:
    a = _python_pairs(spark, 20_000, 500, seed=23).mapValues(lambda d: d["id"])
    b = _python_pairs(spark, 15_000, 500, seed=29).mapValues(lambda d: d["name"])
    out = a.cogroup(b, numPartitions=6)
    return sorted([k, sorted(x), sorted(y)] for k, (x, y) in out.collect())


def key_skew(spark: SparkSession) -> Answer:
    """Nine records in ten have the same key: one reduce partition gets nearly everything."""
    df = spark.range(0, 400_000, 1, 8).select(
        F.when(F.col("id") % 10 != 0, F.lit(0)).otherwise(F.col("id") % 1000).alias("k"), F.col("id")
    )
    return _sorted_rows(df.groupBy("k").agg(F.count("*"), F.sum("id")))


def mostly_empty(spark: SparkSession) -> Answer:
    """200 reduce partitions, three keys: almost every subpartition is empty."""
    spark.conf.set("spark.sql.shuffle.partitions", "200")
    df = spark.range(0, 50_000, 1, 8).select((F.col("id") % 3).alias("k"), "id")
    return _sorted_rows(df.groupBy("k").agg(F.count("*"), F.sum("id")))


def many_partitions(spark: SparkSession) -> Answer:
    """60 map tasks by 60 reduce partitions."""
    spark.conf.set("spark.sql.shuffle.partitions", "60")
    df = _keyed(spark, 120_000, 9_000, seed=31, partitions=60)
    return _sorted_rows(df.groupBy("k").agg(F.count("*"), F.sum("v")))


def _aqe(spark: SparkSession) -> None:
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "true")


def aqe_coalesce(spark: SparkSession) -> Answer:
    """AQE merges small reduce partitions: readers ask for partition ranges."""
    _aqe(spark)
    spark.conf.set("spark.sql.shuffle.partitions", "100")
    spark.conf.set("spark.sql.adaptive.advisoryPartitionSizeInBytes", "256k")
    df = _keyed(spark, 100_000, 2_000, seed=37)
    out = df.groupBy("k").agg(F.count("*"), F.sum("v"))
    answer = _sorted_rows(out)
    plan = out._jdf.queryExecution().executedPlan().toString()
    assert "coalesced" in plan, plan
    return answer


def aqe_skew_join(spark: SparkSession) -> Answer:
    """AQE splits a skewed partition by map ranges: readers ask for map-index ranges."""
    _aqe(spark)
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    spark.conf.set("spark.sql.shuffle.partitions", "20")
    spark.conf.set("spark.sql.adaptive.skewJoin.enabled", "true")
    spark.conf.set("spark.sql.adaptive.skewJoin.skewedPartitionFactor", "2")
    spark.conf.set("spark.sql.adaptive.skewJoin.skewedPartitionThresholdInBytes", "64k")
    spark.conf.set("spark.sql.adaptive.advisoryPartitionSizeInBytes", "64k")
    spark.conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")
    left = spark.range(0, 200_000, 1, 10).select(
        F.when(F.col("id") % 4 != 0, F.lit(7)).otherwise(F.col("id") % 500).alias("k"), F.col("id").alias("a")
    )
    right = spark.range(0, 5_000, 1, 4).select((F.col("id") % 500).alias("k"), F.col("id").alias("b"))
    joined = left.join(right, "k")
    # Grouping by another key keeps the join's output distribution free to be split.
    out = joined.groupBy(F.pmod("a", F.lit(13)).alias("g")).agg(F.count("*"), F.sum("a"), F.sum("b"))
    answer = _sorted_rows(out)
    plan = out._jdf.queryExecution().executedPlan().toString()
    assert "skew=true" in plan, plan
    return answer


def aqe_local_shuffle_reader(spark: SparkSession) -> Answer:
    """A join AQE turns into a broadcast join at run time reads its shuffle map-side (local reader)."""
    _aqe(spark)
    # Both sides are estimated above the threshold; the filtered one is tiny at run time.
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "512k")
    spark.conf.set("spark.sql.adaptive.localShuffleReader.enabled", "true")
    spark.conf.set("spark.sql.shuffle.partitions", "12")
    big = _keyed(spark, 150_000, 3_000, seed=41)
    small = _keyed(spark, 150_000, 3_000, seed=43).where(F.pmod(F.xxhash64("id", F.lit(3)), F.lit(1000)) < 2)
    joined = big.join(small.select("k", F.col("v").alias("w")), "k")
    out = joined.groupBy(F.pmod("id", F.lit(50)).alias("b")).agg(F.count("*"), F.sum("v"), F.sum("w"))
    answer = _sorted_rows(out)
    plan = out._jdf.queryExecution().executedPlan().toString()
    assert "BroadcastHashJoin" in plan and "local" in plan.lower(), plan
    return answer


# Carried in the records of ``marked_records``: Sluice's partition files must not show it when
# Spark's I/O encryption is on (with shuffle compression off, they show it when it is off).
MARKER = "SLUICE-PLAINTEXT-MARKER-5f3c9a"


def marked_records(spark: SparkSession) -> Answer:
    """Strings carrying MARKER, grouped by the string: the map side's partial aggregates shuffle them."""
    df = spark.range(0, 60_000, 1, 6).select(
        F.concat(F.lit(MARKER + ":"), (F.col("id") % 5_000).cast("string")).alias("tag"), "id"
    )
    return _sorted_rows(df.groupBy("tag").agg(F.count("*").alias("n"), F.sum("id").alias("s")))


SPILL_ROWS = 1_500_000
SPILL_KEYS = 50_000


def spill_heavy(spark: SparkSession) -> Answer:
    """A shuffle far larger than a small network memory (every row carries a 64-byte hash): the
    blocking partitions must spill. The answer is known without Spark."""
    df = spark.range(0, SPILL_ROWS, 1, 6).select(
        (F.col("id") % SPILL_KEYS).alias("k"), "id", F.sha2(F.col("id").cast("string"), 256).alias("h")
    )
    per_key = (
        df.repartition(12, "k").groupBy("k").agg(F.count("*").alias("n"), F.sum("id").alias("s"), F.max("h").alias("h"))
    )
    return _rows(per_key.agg(F.count("*"), F.sum("n"), F.sum("s"), F.sum(F.length("h"))))


def spill_heavy_expected() -> Answer:
    return [[SPILL_KEYS, SPILL_ROWS, SPILL_ROWS * (SPILL_ROWS - 1) // 2, SPILL_KEYS * 64]]


# A subset of TPC-H: shuffle-heavy queries written from the TPC-H specification with its
# validation parameters, over tables tpchgen-cli generated (see test_cluster.py). Q3 keeps every
# group (no LIMIT, whose cut could fall between equal values), so the whole answer is compared.
TPCH_QUERIES: Dict[str, str] = {
    # Three tables joined, a group-by over the join.
    "tpch_q3": """
select l_orderkey, sum(l_extendedprice * (1 - l_discount)) as revenue, o_orderdate, o_shippriority
from customer, orders, lineitem
where c_mktsegment = 'BUILDING'
  and c_custkey = o_custkey
  and l_orderkey = o_orderkey
  and o_orderdate < date '1995-03-15'
  and l_shipdate > date '1995-03-15'
group by l_orderkey, o_orderdate, o_shippriority
""",
    # Six tables joined (every join a shuffle with broadcasts off).
    "tpch_q5": """
select n_name, sum(l_extendedprice * (1 - l_discount)) as revenue
from customer, orders, lineitem, supplier, nation, region
where c_custkey = o_custkey
  and l_orderkey = o_orderkey
  and l_suppkey = s_suppkey
  and c_nationkey = s_nationkey
  and s_nationkey = n_nationkey
  and n_regionkey = r_regionkey
  and r_name = 'ASIA'
  and o_orderdate >= date '1994-01-01'
  and o_orderdate < date '1994-01-01' + interval '1' year
group by n_name
""",
}
# The tables those queries read.
TPCH_TABLES = ("nation", "region", "supplier", "customer", "orders", "lineitem")


def _canonical(value: Any) -> Any:
    """A JSON-able value two runs agree on: decimals and dates as text, doubles to 12 significant digits
    (a sum of doubles depends on the order it was added in)."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, (decimal.Decimal, datetime.date)):
        return str(value)
    return value


def tpch_workloads(data_dir: str) -> Dict[str, Workload]:
    """The TPC-H subset over the tables in ``data_dir`` (``<table>/`` or ``<table>.parquet`` each)."""

    def query(name: str) -> Workload:
        def run(spark: SparkSession) -> Answer:
            for table in TPCH_TABLES:
                path = os.path.join(data_dir, table)
                path = path if os.path.isdir(path) else path + ".parquet"
                spark.read.parquet(path).createOrReplaceTempView(table)
            rows = [[_canonical(v) for v in row] for row in spark.sql(TPCH_QUERIES[name]).collect()]
            return sorted(rows, key=repr)

        return run

    return {name: query(name) for name in TPCH_QUERIES}


# The workloads every configuration runs (spill_heavy and marked_records run alone: see their tests).
WORKLOADS: Dict[str, Workload] = {
    "df_group_by": df_group_by,
    "df_join": df_join,
    "df_distinct": df_distinct,
    "df_order_by": df_order_by,
    "df_window": df_window,
    "large_records": large_records,
    "rdd_reduce_by_key": rdd_reduce_by_key,
    "rdd_group_by_key": rdd_group_by_key,
    "rdd_sort_by_key": rdd_sort_by_key,
    "rdd_cogroup": rdd_cogroup,
    "key_skew": key_skew,
    "mostly_empty": mostly_empty,
    "many_partitions": many_partitions,
    "aqe_coalesce": aqe_coalesce,
    "aqe_skew_join": aqe_skew_join,
    "aqe_local_shuffle_reader": aqe_local_shuffle_reader,
}

EXTRA_WORKLOADS: Dict[str, Workload] = {
    "spill_heavy": spill_heavy,
    "marked_records": marked_records,
}

# Settings every workload starts from (each may change its own on top).
BASE_SQL_CONF = {
    "spark.sql.shuffle.partitions": "16",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
}


def digest(answer: Answer) -> str:
    """A short fingerprint of an answer, for messages."""
    return hashlib.sha256(repr(answer).encode()).hexdigest()[:16]
