"""The stored sort-shuffle answers (``reference.py``): current for these workloads and this Spark,
and stale, naming what changed and how to compute them again, when either changes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import reference


def test_the_stored_answers_are_current() -> None:
    stale = reference.stale_inputs()
    assert not stale, f"{', '.join(stale)} changed since the sort shuffle's answers were stored: run dev/gen-references"
    for group in reference.GROUPS:
        assert reference.answers(group), group


def test_a_changed_workload_or_spark_makes_them_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*reference.INPUTS, reference.STORED.name):
        shutil.copy(reference.HERE / name, tmp_path / name)
    monkeypatch.setattr(reference, "HERE", tmp_path)
    monkeypatch.setattr(reference, "STORED", tmp_path / reference.STORED.name)
    assert reference.stale_inputs() == []
    with open(tmp_path / "workloads.py", "a") as f:
        f.write("\n# a changed workload\n")
    assert reference.stale_inputs() == ["workloads.py"]
    with pytest.raises(AssertionError, match=r"workloads\.py changed .* run dev/gen-references"):
        reference.answers("workloads")
    real_version = reference.metadata.version
    monkeypatch.setattr(reference.metadata, "version", lambda d: "9.9.9" if d == "pyspark" else real_version(d))
    assert reference.stale_inputs() == ["pyspark", "workloads.py"]


def test_answers_compare_by_canonical_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert reference.answer_digest({"a": [1, 2.5], "b": None}) == reference.answer_digest({"b": None, "a": [1, 2.5]})
    assert reference.answer_digest([[1, 2]]) != reference.answer_digest([[2, 1]])
    monkeypatch.setattr(reference, "stale_inputs", lambda: [])
    monkeypatch.setattr(reference, "STORED", tmp_path / "stored.json")
    digests = {"q1": reference.answer_digest([[1, "x"]]), "q2": reference.answer_digest([])}
    (tmp_path / "stored.json").write_text(reference.json.dumps({"fingerprint": {}, "answers": {"workloads": digests}}))
    assert reference.mismatches({"q1": [[1, "x"]], "q2": []}, "workloads", ["q1", "q2"]) == []
    wrong = reference.mismatches({"q1": [[1, "y"]]}, "workloads", ["q1", "q2"])
    assert [w.split(":")[0] for w in wrong] == ["q1", "q2"] and "no answer" in wrong[1], wrong
