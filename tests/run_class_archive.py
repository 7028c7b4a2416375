"""Writes the class-data archive the tests' JVMs share (``plugins/jvm_options.py``): one Sluice
application in ``local[2]`` (its driver runs the tasks too, so the driver's and the executors'
classes are both loaded) whose driver JVM dumps every class it loaded when it exits
(``-XX:ArchiveClassesAtExit``). Run in its own process:
``python tests/run_class_archive.py --archive PATH``; PATH exists when it returns 0.
"""

from __future__ import annotations

import argparse
import os

from pyspark import SparkContext
from pyspark.sql import functions as F
from sessions import build_session

# The driver JVM writes the archive after it was told to stop (its standard input closed); writing
# ~170 MB takes seconds, minutes on a loaded machine.
EXIT_TIMEOUT_S = 600


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--archive", required=True)
    args = parser.parse_args()
    spark = build_session(
        "sluice-class-archive",
        "sluice",
        "local[2]",
        conf={
            "spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={args.archive}",
            "spark.sql.shuffle.partitions": "4",
        },
    )
    # What most tests' applications do: SQL aggregations and joins (code generation included) and
    # an RDD shuffle of Python objects.
    rows = spark.range(0, 200_000).withColumn("k", F.col("id") % 97)
    rows.groupBy("k").agg(F.count("*"), F.sum("id")).collect()
    rows.join(rows.select("k").distinct(), "k").count()
    spark.sparkContext.parallelize(range(10_000), 4).map(lambda x: (x % 7, x)).groupByKey().mapValues(len).collect()
    gateway = SparkContext._gateway
    spark.stop()
    proc = getattr(gateway, "proc", None)
    if proc is None:
        raise SystemExit("pyspark started no driver JVM of its own: no archive can be written")
    proc.stdin.close()  # the driver JVM exits when its standard input closes
    proc.wait(timeout=EXIT_TIMEOUT_S)
    if not os.path.exists(args.archive):
        raise SystemExit(f"the driver JVM exited ({proc.returncode}) without writing {args.archive}")


if __name__ == "__main__":
    main()
