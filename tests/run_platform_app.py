"""A user's application on a cluster whose defaults bring Sluice: run with spark-submit, it takes every
setting from the command line and the properties file, runs a shuffle and writes what it found:

    spark-submit --properties-file defaults.conf [user flags] tests/run_platform_app.py --out result.json

The result holds the answer's check, Spark's effective plugin list and executor class path (the
settings' values after Spark's own defaults are put in front), the shuffle manager, and what
Sluice's tables read (or the error they raised when Sluice's plugin is not loaded).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def effective(spark: SparkSession, entry: str) -> Any:
    """The value Spark itself reads for one of its ConfigEntries, with the defaults it puts in
    front: ``PLUGINS`` (a sequence) as a list, ``EXECUTOR_CLASS_PATH`` (optional) as a string or None."""
    config = getattr(spark.sparkContext._jvm.org.apache.spark.internal.config, "package$")
    value = spark.sparkContext._jsc.sc().conf().get(getattr(getattr(config, "MODULE$"), entry)())
    if entry == "PLUGINS":
        return [str(v) for v in str(value.mkString("\n")).split("\n") if v]
    return str(value.get()) if value.isDefined() else None


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    spark = SparkSession.builder.appName("platform-defaults").getOrCreate()
    result: Dict[str, Any] = {}
    try:
        rows = spark.range(0, 50_000, numPartitions=6).groupBy((F.col("id") % 31).alias("k")).count().collect()
        result["answer_ok"] = sorted((r["k"], r["count"]) for r in rows) == sorted(
            (k, len(range(k, 50_000, 31))) for k in range(31)
        )
        conf = spark.sparkContext.getConf()
        result["shuffle_manager"] = conf.get("spark.shuffle.manager", "sort")
        result["jars"] = conf.get("spark.jars", "")
        result["plugins"] = effective(spark, "PLUGINS")
        result["executor_class_path"] = effective(spark, "EXECUTOR_CLASS_PATH")
        try:
            import sluice

            metrics = sluice.metrics(spark)
            result["sluice_bytes_out"] = sum(v or 0 for v in metrics.column("numBytesOut").to_pylist())
            result["sluice_stages"] = sluice.stages(spark).num_rows
        except RuntimeError as e:
            result["sluice_error"] = str(e)
    finally:
        spark.stop()
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
