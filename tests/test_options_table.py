"""The generated option table (_options.json) that sluice.configure validates against."""

from __future__ import annotations

import json
import re
from pathlib import Path

import sluice

TABLE = Path(sluice.__file__).resolve().parent / "_options.json"
SNAKE_CASE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
TYPES = {"int", "double", "boolean", "bytes", "duration", "enum", "string"}


def rows() -> list[dict[str, object]]:
    loaded = json.loads(TABLE.read_text(encoding="utf-8"))
    assert isinstance(loaded, list) and loaded
    return loaded


def test_python_names_are_unique_snake_case() -> None:
    names = [row["python"] for row in rows()]
    assert len(names) == len(set(names)), "duplicate python names"
    for name in names:
        assert isinstance(name, str) and SNAKE_CASE.match(name), f"{name!r} is not snake_case"


def test_keys_are_unique_sluice_keys() -> None:
    keys = [row["key"] for row in rows()]
    assert len(keys) == len(set(keys))
    assert all(isinstance(key, str) and key.startswith("spark.sluice.") for key in keys)


def test_every_entry_has_a_known_type_and_enums_list_values() -> None:
    for row in rows():
        assert row["type"] in TYPES, row
        assert (row["type"] == "enum") == (row["values"] is not None), row


def test_defaults_are_valid_values() -> None:
    # The JVM's defaults must pass Python's validation, so Python's rules match the JVM's.
    for row in rows():
        conf = sluice.config.spark_conf(**{str(row["python"]): row["default"]})
        assert conf[str(row["key"])] == row["default"]
