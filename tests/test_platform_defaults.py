"""docs/deploying.md's platform defaults against a user's own flags, on a local cluster.

A cluster's properties file brings Sluice; the user adds ``--jars``, ``--conf spark.plugins=`` and
``--conf spark.executor.extraClassPath=`` of their own. With the recipe (Sluice's jar in
``spark.{driver,executor}.defaultExtraClassPath``, its plugin in ``spark.plugins.defaultList``)
Sluice still carries the shuffle with its plugin, beside the user's; with the old one
(``spark.jars``, ``spark.plugins``) the same flags remove Sluice's jar or its plugin, with the
messages docs/troubleshooting.md lists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pyspark
import pytest
import sluice
from sessions import APP_MASTER, app_env

RUNNER = Path(__file__).resolve().parent / "run_platform_app.py"
SUBMIT = Path(pyspark.__file__).parent / "bin" / "spark-submit"
# A plugin of Spark's own, standing for the user's: it does nothing unless spark.driver.timeout is set.
USER_PLUGIN = "org.apache.spark.deploy.DriverTimeoutPlugin"
SLUICE_PLUGIN = "org.apache.spark.shuffle.sluice.SluicePlugin"
MANAGERS = {
    "spark.shuffle.manager": "org.apache.spark.shuffle.sluice.SluiceShuffleManager",
    "spark.shuffle.manager.incremental": "org.apache.spark.shuffle.sluice.SluicePipelinedShuffleManager",
}


def user_files(work: Path) -> Tuple[Path, Path]:
    """The user's own jar (an empty one will do) and class-path directory."""
    jar = work / "user-lib.jar"
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    classes = work / "user-classes"
    classes.mkdir()
    return jar, classes


def submit(work: Path, defaults: Dict[str, str], user_flags: List[str]) -> Tuple[int, Dict[str, Any], str]:
    """spark-submit of the runner with ``defaults`` as its properties file and ``user_flags``: its exit
    status, the runner's result, and its output."""
    conf = work / "defaults.conf"
    conf.write_text("".join(f"{k} {v}\n" for k, v in {"spark.master": APP_MASTER, **defaults}.items()))
    local = work / "local"
    local.mkdir(exist_ok=True)
    out = work / "result.json"
    env = app_env(SPARK_LOCAL_DIRS=str(local), PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    command = [str(SUBMIT), "--properties-file", str(conf), *user_flags, str(RUNNER), "--out", str(out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=800)
    result = json.loads(out.read_text()) if out.exists() else {}
    # The application's own Python output (a traceback, say) reaches spark-submit's stdout.
    return done.returncode, result, done.stdout + done.stderr


@pytest.mark.timeout(1800)
def test_the_recipe_keeps_sluice_beside_the_users_jars_plugins_and_class_path(tmp_path: Path) -> None:
    jar, classes = user_files(tmp_path)
    defaults = {
        "spark.driver.defaultExtraClassPath": sluice.jar_path(),
        "spark.executor.defaultExtraClassPath": sluice.jar_path(),
        "spark.plugins.defaultList": SLUICE_PLUGIN,
        **MANAGERS,
    }
    flags = [
        "--jars",
        str(jar),
        "--conf",
        f"spark.plugins={USER_PLUGIN}",
        "--conf",
        f"spark.executor.extraClassPath={classes}",
    ]
    code, result, stderr = submit(tmp_path, defaults, flags)
    assert code == 0, stderr[-6000:]
    assert result["answer_ok"] and result["shuffle_manager"] == MANAGERS["spark.shuffle.manager"]
    # Both plugins load, Sluice's first; both class-path entries are there, Sluice's first; the user's jar too.
    assert result["plugins"] == [SLUICE_PLUGIN, USER_PLUGIN], result["plugins"]
    assert result["executor_class_path"] == f"{sluice.jar_path()}{os.pathsep}{classes}", result
    assert str(jar) in result["jars"]
    # Sluice carried the shuffle, and its plugin answers (its tables need it).
    assert result.get("sluice_bytes_out", 0) > 0 and result.get("sluice_stages", 0) > 0, result


@pytest.mark.timeout(1800)
def test_the_old_recipe_loses_sluice_to_the_users_flags(tmp_path: Path) -> None:
    jar, _ = user_files(tmp_path)
    old = {"spark.jars": sluice.jar_path(), "spark.plugins": SLUICE_PLUGIN, **MANAGERS}
    # The user's --jars replaces spark.jars: Sluice's classes (its plugin, loaded first) are gone at start.
    (tmp_path / "jars").mkdir()
    code, _, output = submit(tmp_path / "jars", old, ["--jars", str(jar)])
    assert code != 0
    assert "java.lang.ClassNotFoundException: org.apache.spark.shuffle.sluice.SluicePlugin" in output, output[-4000:]
    # The user's spark.plugins replaces Sluice's: the job runs, Sluice's plugin (tab, metrics) is gone.
    (tmp_path / "plugins").mkdir()
    code, result, stderr = submit(tmp_path / "plugins", old, ["--conf", f"spark.plugins={USER_PLUGIN}"])
    assert code == 0, stderr[-6000:]
    assert result["answer_ok"] and result["plugins"] == [USER_PLUGIN], result
    assert result["sluice_error"].startswith("Sluice's plugin is not running in this driver"), result
