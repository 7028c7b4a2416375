"""A Sluice application whose map outputs are served by the node shuffle service
(``spark.sluice.service.enabled``) on ``local-cluster[2,1,1024]``: after a shuffle, what the Sluice
tab and ``/sluice/json`` show of the service. Waits (bounded) until the service's status counts the
bytes it sent the reducers, then records the JSON block ``node_services``, whether the page shows
the service's table, and the executors Spark's REST API lists.

    python tests/run_node_service_ui.py --service-port PORT --out result.json
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Dict, List, Optional

import nodeservice
import realapps
import sessions
from pyspark.sql import functions as F

ROWS = 30_000
KEYS = 17


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--service-port", type=int, required=True)
    args = parser.parse_args()
    spark = nodeservice.session("sluice-node-service-ui", args.service_port, {"spark.sql.adaptive.enabled": "false"})
    sc = spark.sparkContext
    result: Dict[str, Any] = {"app_id": sc.applicationId}
    try:
        realapps.wait_for(lambda: len(executors(spark)) >= 2 or None, 240, interval=0.5)
        rows = spark.range(0, ROWS, numPartitions=6).select((F.col("id") % KEYS).alias("k"), "id")
        # `query` stays referenced until the application stops, so Spark keeps its shuffle registered.
        query = rows.repartition(4, "k").groupBy("k").agg(F.count("id").alias("n"))
        counted = query.collect()
        result["answer_ok"] = sorted((int(r["k"]), int(r["n"])) for r in counted) == [
            (k, sum(1 for i in range(ROWS) if i % KEYS == k)) for k in range(KEYS)
        ]
        url = sessions.ui_url(spark)

        def served() -> Optional[Dict[str, Any]]:
            """The node_services block once it shows the service's bytes sent and every executor."""
            block: Dict[str, Any] = sessions.http_json(f"{url}/sluice/json")["node_services"]
            services = block["services"]
            live = {e["executor_id"] for e in block["executors"] if e["live"]}
            if len(services) == 1 and (services[0]["bytes_sent"] or 0) > 0 and live >= set(executors(spark)):
                return block
            return None

        block = realapps.wait_for(served, 180, interval=1.0)
        result["node_services"] = (
            block if block is not None else sessions.http_json(f"{url}/sluice/json")["node_services"]
        )
        result["executors"] = executors(spark)
        page = sessions.http_get(f"{url}/sluice/")
        result["page_has_table"] = 'id="sluice-node-services"' in page
        result["page_rows"] = [
            [attribute(tag, "data-service"), attribute(tag, "data-executors"), attribute(tag, "data-map-outputs")]
            for tag in re.findall(r'<tr[^>]*class="sluice-node-service"[^>]*>', page)
        ]
    finally:
        spark.stop()
    sessions.write_json(args.out, result)


def attribute(tag: str, name: str) -> Optional[str]:
    found = re.search(f'{name}="([^"]*)"', tag)
    return found.group(1) if found else None


def executors(spark: Any) -> List[str]:
    """The ids of the live executors (Spark's REST API)."""
    return sorted(e["id"] for e in sessions.rest(spark, "executors") if e["id"] != "driver")


if __name__ == "__main__":
    main()
