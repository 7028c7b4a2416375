"""The one-line summary at the end of a real application: in the driver's log and, as Sluice's
listener event, in its event log. The application is submitted with `spark-submit $(sluice conf)`
spliced unquoted into a shell, with Sluice's jar at a path that holds a space: the printed
arguments reach Spark whole."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import sluice
from sessions import app_env
from sluice import eventlog

APP = """
from pyspark.sql import SparkSession, functions as F

spark = SparkSession.builder.appName("summary-app").getOrCreate()
spark.conf.set("spark.sql.shuffle.partitions", "6")
rows = spark.range(300000).select((F.col("id") % 5000).alias("k"), F.col("id").alias("v"))
print("groups", rows.groupBy("k").agg(F.sum("v")).count())
spark.stop()
"""

SPLICED = """
import sys
import sluice.config
jar = sys.argv[1]
sluice.config.jar_path = lambda: jar  # as if Sluice were installed at a path with a space
from sluice.cli import main
sys.exit(main(["conf", "--buffer-timeout", "10ms"]))
"""

SUMMARY_EVENT = "org.apache.spark.shuffle.sluice.SparkListenerSluiceApplicationSummary"


def spark_submit() -> str:
    import pyspark

    return str(Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit")


def test_a_real_application_ends_with_its_summary(tmp_path: Path) -> None:
    jar = tmp_path / "sluice install" / "sluice.jar"
    jar.parent.mkdir()
    shutil.copy(sluice.jar_path(), jar)
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "conf.py").write_text(SPLICED)
    events = tmp_path / "events"
    events.mkdir()
    script = (
        f'"{spark_submit()}" $("{sys.executable}" conf.py "$1") --master "local-cluster[2,1,1024]" '
        f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir={events.as_uri()} "
        "--conf spark.eventLog.compress=false --conf spark.ui.enabled=false app.py"
    )
    env = app_env(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(
        ["bash", "-c", script, "bash", str(jar)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "groups 5000" in done.stdout
    # The driver's log: one line, at the end.
    lines = [line for line in done.stderr.splitlines() if "Sluice summary: " in line]
    assert len(lines) == 1, done.stderr[-4000:]
    line = lines[0][lines[0].index("Sluice summary: ") :]
    assert " shuffled (" in line and " across the network) in " in line and "reduce tasks waited " in line, line
    assert "; slowest stage " in line, line
    # The event log: the same summary, as Sluice's listener event, after every stage's figures.
    log = eventlog.find(events)  # Spark 4 rolls event logs by default: a directory of files
    text = "\n".join(part.read_text() for part in sorted(log.iterdir()) if part.name.startswith("events_"))
    logged: List[Dict[str, Any]] = [json.loads(x) for x in text.splitlines() if x.strip()]
    summaries = [e for e in logged if e["Event"] == SUMMARY_EVENT]
    assert len(summaries) == 1, [e["Event"] for e in logged if "Sluice" in e["Event"]]
    summary = summaries[0]
    assert summary["stages"] >= 2 and summary["bytesShuffled"] > 0 and summary["slowestStageId"] >= 0
    # Two executors: part of the shuffle crossed between them, so the jar reached both through its URI.
    assert summary["bytesRemote"] > 0
    assert f"slowest stage {summary['slowestStageId']} (" in line and summary["slowestStageCause"] in line
    # Bytes and stages from Spark's task ends: complete at application end even when the executors'
    # last Sluice reports (every reportInterval) had not come in when the application ended.
    read: Dict[int, int] = {}
    shuffled = set()
    for e in logged:
        if e["Event"] == "SparkListenerTaskEnd" and e["Task End Reason"]["Reason"] == "Success":
            metrics = e["Task Metrics"]
            got = (
                metrics["Shuffle Read Metrics"]["Remote Bytes Read"]
                + metrics["Shuffle Read Metrics"]["Local Bytes Read"]
            )
            read[e["Stage ID"]] = read.get(e["Stage ID"], 0) + got
            if got > 0 or metrics["Shuffle Write Metrics"]["Shuffle Bytes Written"] > 0:
                shuffled.add(e["Stage ID"])
    assert summary["bytesShuffled"] == sum(read.values())
    assert summary["stages"] == len(shuffled) and summary["slowestStageId"] in shuffled
    stage_events = [e for e in logged if e["Event"].endswith("SparkListenerSluiceStageMetrics")]
    assert stage_events and logged.index(summary) > max(logged.index(e) for e in stage_events)
