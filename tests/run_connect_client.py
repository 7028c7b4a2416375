"""A Spark Connect client of a Connect server that runs Sluice: a shuffle query with a known
answer, then Sluice's metrics and backpressure tables through the Connect session. Prints nothing;
writes what it saw as JSON. Run in its own process (see test_connect_history.py), because a
Connect session changes how PySpark builds later sessions in the same process:
``python tests/run_connect_client.py --url sc://127.0.0.1:PORT --out result.json [--connect-only]``.

With ``--connect-only`` the client runs as with the ``pyspark-client`` distribution: PySpark's
classic core (``pyspark.core``) and py4j cannot be imported, so there is no way to a JVM.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import sys
from typing import Any, Dict, Optional, Sequence

N = 200_000
KEYS = 97
PARTITIONS = 8


class _ConnectOnly(importlib.abc.MetaPathFinder):
    """Refuses what ``pyspark-client`` does not ship: PySpark's classic core and py4j."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Any = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname in ("py4j", "pyspark.core") or fullname.startswith(("py4j.", "pyspark.core.")):
            raise ModuleNotFoundError(f"{fullname} is not available to a Spark Connect-only client", name=fullname)
        return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--connect-only", action="store_true")
    args = parser.parse_args()
    if args.connect_only:
        sys.meta_path.insert(0, _ConnectOnly())

    import sluice
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.util import is_remote_only

    result: Dict[str, Any] = {"remote_only": is_remote_only()}
    spark = SparkSession.builder.remote(args.url).getOrCreate()
    try:
        result["session_class"] = f"{type(spark).__module__}.{type(spark).__qualname__}"
        if not args.connect_only:
            rows = (
                spark.range(0, N, 1, PARTITIONS)
                .withColumn("k", F.col("id") % KEYS)
                .groupBy("k")
                .agg(F.count("*").alias("n"), F.sum("id").alias("total"))
                .collect()
            )
            expected: Dict[int, list] = {k: [0, 0] for k in range(KEYS)}
            for i in range(N):
                expected[i % KEYS][0] += 1
                expected[i % KEYS][1] += i
            result["answer"] = {str(r["k"]): [r["n"], r["total"]] for r in rows}
            result["expected"] = {str(k): v for k, v in expected.items()}
        metrics = sluice.metrics(spark)
        result["metrics_rows"] = metrics.num_rows
        result["metrics_columns"] = metrics.column_names
        result["records_out"] = sum(v or 0 for v in metrics.column("numRecordsOut").to_pylist())
        result["records_in"] = sum(v or 0 for v in metrics.column("numRecordsIn").to_pylist())
        result["backpressure"] = sluice.backpressure(spark).to_pylist()
        result["modules_loaded"] = sorted(m for m in sys.modules if m == "py4j" or m.startswith("pyspark.core"))
    finally:
        spark.stop()
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
