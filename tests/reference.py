"""The sort shuffle's answers to the tests' workloads, stored as digests in ``reference_answers.json``.

The tests compare every answer Sluice gives with Spark's sort shuffle's. Computing those answers
again in every run cost three Spark applications per run of the suite; they depend only on the
workloads (their data, queries and settings), on Spark and on the TPC-H generator, so they are
computed once and stored with a fingerprint of exactly those inputs. When one of them changes, the
stored answers are stale and every test that reads them fails, saying so, until they are computed
again::

    dev/gen-references        # or: python tests/reference.py

which runs the sort shuffle (Spark's default shuffle manager, ``local[2]``) over every workload:
``workloads.py``'s (and the TPC-H subset at ``TPCH_SCALE``) through ``run_workloads.py``, and the
real shapes of ``run_real_shapes.py`` (narrow: the same answers over fewer tasks).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
STORED = HERE / "reference_answers.json"
REGENERATE = "dev/gen-references"
# The files that define the workloads' data, queries and settings: a change to one may change an answer.
INPUTS = ("workloads.py", "run_real_shapes.py")
# The TPC-H tables the cluster test's queries read (tpchgen-cli's scale factor).
TPCH_SCALE = 0.05
# What each group of stored answers holds, and the runner that computes them.
GROUPS = ("workloads", "real_shapes")


def answer_digest(answer: Any) -> str:
    """The digest of an answer as it came through JSON (how every runner reports): canonical text."""
    text = json.dumps(answer, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def fingerprint() -> Dict[str, str]:
    """What the stored answers were computed from: the workload files' digests and the versions of
    pyspark (the Spark that ran them) and tpchgen-cli (the TPC-H data)."""
    found = {name: hashlib.sha256((HERE / name).read_bytes()).hexdigest() for name in INPUTS}
    for dist in ("pyspark", "tpchgen-cli"):
        found[dist] = metadata.version(dist)
    found["tpch_scale"] = f"{TPCH_SCALE:g}"
    return found


def stale_inputs() -> List[str]:
    """The inputs that changed since the answers were stored (all of them when nothing is stored)."""
    if not STORED.is_file():
        return ["(no stored answers)"]
    stored = json.loads(STORED.read_text())["fingerprint"]
    current = fingerprint()
    return sorted(k for k in set(stored) | set(current) if stored.get(k) != current.get(k))


def answers(group: str) -> Dict[str, str]:
    """The sort shuffle's answer digests of ``group`` (one of GROUPS), name -> digest; fails naming
    the changed inputs when the stored answers are stale."""
    stale = stale_inputs()
    if stale:
        raise AssertionError(
            f"the sort shuffle's stored answers ({STORED.name}) are stale: {', '.join(stale)} changed since "
            f"they were computed; run {REGENERATE} and commit {STORED.name}"
        )
    digests: Dict[str, str] = json.loads(STORED.read_text())["answers"][group]
    return digests


def mismatches(got: Dict[str, Any], group: str, names: List[str]) -> List[str]:
    """The workloads among ``names`` whose answer in ``got`` (name -> answer) is not the sort
    shuffle's, each with both digests; a missing answer is a mismatch too."""
    want = answers(group)
    found = []
    for name in names:
        if name not in got:
            found.append(f"{name}: no answer")
        elif answer_digest(got[name]) != want[name]:
            found.append(f"{name}: answer {answer_digest(got[name])[:16]} != the sort shuffle's {want[name][:16]}")
    return found


def tpch_data(out: Path, scale: float = TPCH_SCALE) -> Path:
    """TPC-H's tables at ``scale``, written by tpchgen-cli as parquet, four files a table (so
    several map tasks read each), into ``out``."""
    import workloads

    tool = Path(sys.executable).parent / "tpchgen-cli"
    if not tool.is_file():
        raise FileNotFoundError(f"tpchgen-cli is missing beside {sys.executable}: dev/build installs it")
    for table in workloads.TPCH_TABLES:
        done = subprocess.run(
            [str(tool), "parquet", "-s", f"{scale:g}", "--tables", table, "--parts", "4", "--output-dir", str(out)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise RuntimeError(f"tpchgen-cli failed for {table}: {done.stderr[-3000:]}")
    return out


def _run(cmd: List[str], work: str, timeout: float) -> Dict[str, Any]:
    out = os.path.join(work, "out.json")
    env = dict(
        os.environ,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_DIRS=work,
        SLUICE_TEST_MASTER="local[2]",
        SLUICE_REAL_MASTER="local[2]",
    )
    env.pop("SPARK_HOME", None)
    done = subprocess.run(cmd + ["--out", out], env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-6000:]}")
    result: Dict[str, Any] = json.loads(Path(out).read_text())
    return result


def compute() -> Dict[str, Dict[str, str]]:
    """Runs the sort shuffle over every workload and returns the digests of its answers."""
    import run_real_shapes
    import workloads

    with tempfile.TemporaryDirectory(prefix="sluice-reference-") as work:
        tpch = tpch_data(Path(work) / "tpch")
        names = [*workloads.WORKLOADS, "marked_records", *workloads.TPCH_QUERIES]
        report = _run(
            [sys.executable, str(HERE / "run_workloads.py"), "--shuffle", "sort"]
            + ["--workloads", ",".join(names), "--tpch-data", str(tpch)],
            work,
            timeout=1200,
        )
        if report["errors"]:
            raise RuntimeError(f"the sort shuffle failed: {report['errors']}")
        if not report["files"]["sort"]:
            raise RuntimeError("the sort shuffle wrote no shuffle_*.data file: was it the sort shuffle?")
        shapes = _run(
            [sys.executable, str(HERE / "run_real_shapes.py"), "--shuffle", "sort", "--narrow"]
            + ["--workloads", ",".join(run_real_shapes.WORKLOADS)],
            work,
            timeout=1200,
        )
    errors = {k: v["error"] for k, v in shapes["runs"].items() if "error" in v}
    if errors:
        raise RuntimeError(f"the sort shuffle failed: {errors}")
    return {
        "workloads": {name: answer_digest(answer) for name, answer in report["answers"].items()},
        "real_shapes": {name: answer_digest(run["answer"]) for name, run in shapes["runs"].items()},
    }


def main() -> int:
    sys.path.insert(0, str(HERE))
    computed = compute()
    STORED.write_text(json.dumps({"fingerprint": fingerprint(), "answers": computed}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {STORED} ({sum(len(v) for v in computed.values())} answers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
