"""One vocabulary: the naming rule of docs/metrics.md checked over every Python table's columns,
the tab's JSON keys and the tab's column headers; no Spark is started."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Set

import pytest
from sluice import monitoring

REPO = Path(__file__).resolve().parent.parent
SCALA = REPO / "jvm" / "src" / "main" / "scala" / "org" / "apache" / "spark" / "shuffle" / "sluice"
METRICS_DOC = REPO / "docs" / "metrics.md"

SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
# Names that say nothing of what they measure: a column must say whose ratio, level, name.
GENERIC = {"ratio", "level", "name", "value", "type", "root_cause"}


def flink_names() -> Set[str]:
    table = json.loads((Path(monitoring.__file__).parent / "_metrics.json").read_text(encoding="utf-8"))
    return {m["name"] for m in table["metrics"]}


def tables() -> Dict[str, List[str]]:
    return {
        "metrics": list(monitoring.metrics_schema(with_latency=True).names),
        "stages": list(monitoring.STAGES_SCHEMA.names),
        "executors": list(monitoring.EXECUTORS_SCHEMA.names),
        "backpressure": list(monitoring.BACKPRESSURE_SCHEMA.names),
    }


def breaks_rule(column: str) -> bool:
    return column not in flink_names() and (not SNAKE.match(column) or column in GENERIC)


@pytest.mark.parametrize("table", sorted(tables()))
def test_every_column_follows_the_rule(table: str) -> None:
    """Flink's exact name where the column carries Flink's metric; snake_case, not generic, elsewhere."""
    columns = tables()[table]
    assert [c for c in columns if breaks_rule(c)] == [], table
    assert len(set(columns)) == len(columns)


def test_the_check_catches_each_kind_of_break() -> None:
    assert breaks_rule("numBytesInRemote") is False and breaks_rule("TotalMemorySegments") is False
    assert breaks_rule("numBytesRemote")  # camelCase that is not Flink's
    assert breaks_rule("ratio") and breaks_rule("level") and breaks_rule("Stage_id")
    assert not breaks_rule("backpressure_ratio")


def test_the_shared_columns_are_the_same_in_every_table() -> None:
    """Every table starts with its ids, in the same order, and a stage's one cause has one column."""
    t = tables()
    assert t["metrics"][:4] == ["executor_id", "stage_id", "stage_attempt_id", "partition_id"]
    assert t["stages"][:2] == ["stage_id", "stage_attempt_id"] and t["backpressure"][0] == "stage_id"
    assert t["executors"][0] == "executor_id"
    for table in ("stages", "backpressure"):
        assert [c for c in t[table] if "cause" in c] == ["cause"], table
        assert {"backpressure_ratio", "backpressure_level"} <= set(t[table]), table


def json_keys() -> Set[str]:
    source = (SCALA / "metrics" / "SluiceJson.scala").read_text(encoding="utf-8")
    return set(re.findall(r'"([A-Za-z_]+)" ->', source))


def test_the_tabs_json_follows_the_rule_and_uses_the_tables_words() -> None:
    keys = json_keys()
    assert keys and [k for k in keys if breaks_rule(k)] == []
    # Every stage column Python reads from the JSON has the JSON's word (two are computed in Python).
    computed = {"fetch_wait_share", "skew_ratio"}
    stage_columns = set(tables()["stages"]) - flink_names() - computed
    assert stage_columns - keys == set()
    assert set(tables()["backpressure"]) - keys == set()
    assert set(tables()["executors"]) - flink_names() - keys == set()


ENGINE = REPO / "jvm" / "src" / "main" / "scala" / "io" / "sluice"


def service_metrics() -> List[str]:
    """The names of a node shuffle service's metrics, in ServiceMetrics.Metrics' order."""
    source = (ENGINE / "service" / "ServiceMetrics.scala").read_text(encoding="utf-8")
    body = source[source.index("val Metrics") :]
    names_source = (ENGINE / "metrics" / "MetricNames.scala").read_text(encoding="utf-8")
    constants = dict(re.findall(r'val (\w+) = "([^"]+)"', names_source))
    found = re.findall(r'(?:gauge|Metric)\((?:"([^"]+)"|MetricNames\.(\w+))', body)
    return [literal or constants[constant] for literal, constant in found]


def test_the_node_services_metrics_use_the_words_of_the_tab_and_are_documented() -> None:
    """A service's own figures have node_services' words, its server's reads the executor's names,
    and both docs name every one."""
    names = service_metrics()
    assert len(names) == len(set(names)) and "bytes_sent" in names and "readWaitTimeMs" in names
    assert [n for n in names if breaks_rule(n)] == []
    assert {n for n in names if n not in flink_names()} <= json_keys()
    for doc in ("node-shuffle-service.md", "metrics.md"):
        text = (REPO / "docs" / doc).read_text(encoding="utf-8")
        assert [n for n in names if f"`{n}`" not in text] == [], doc


def headers(table_id: str) -> List[str]:
    """The column headers of one of the tab's tables (``id="sluice-<table_id>"``) in SluicePage."""
    source = (SCALA / "ui" / "SluicePage.scala").read_text(encoding="utf-8")
    start = source.index(f'id="sluice-{table_id}"')
    head = source[start : source.index("</tr></thead>", start)]
    return [re.sub(r"<[^>]+>|\{[^}]*\}", "", h).strip() for h in re.findall(r"<th[^>]*>(.*?)</th>", head, re.DOTALL)]


def test_the_tabs_batch_table_uses_the_tables_words() -> None:
    """Each header of the batch table, in snake_case, is (part of) a column of sluice.stages, e.g.
    "Slow peer" is ``slow_peer``."""
    columns = tables()["stages"]
    found = headers("batch")
    assert "Slow peer" in found and "Cause" in found
    for header in found:
        words = header.lower().replace(" ", "_")
        assert any(words in column for column in columns), header


def test_the_rule_is_stated_once_in_the_docs() -> None:
    doc = METRICS_DOC.read_text(encoding="utf-8")
    assert doc.count("## Names") == 1
    section = doc[doc.index("## Names") :]
    section = section[: section.index("\n## ", 3)]
    for word in ("Flink's exact name", "snake_case", "`cause`", "backpressure_level", "slow_peer"):
        assert word in section, word
    # The old words are gone from the docs.
    for old in ("batch_cause", "root_cause", "slow_producer"):
        assert old not in doc, old


def test_executors_sort_by_number() -> None:
    ids = ["10", "2", "driver", "1", "x"]
    assert sorted(ids, key=monitoring.executor_order) == ["driver", "1", "2", "10", "x"]


def test_configure_is_typed_from_the_option_table() -> None:
    from sluice import _options
    from sluice._typed_options import SluiceOptions

    hints: Dict[str, Any] = SluiceOptions.__annotations__
    assert list(hints) == list(_options.options())
