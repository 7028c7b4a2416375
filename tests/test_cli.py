"""The `sluice` command: jar, conf, and the spark-submit command line that submit runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sluice
from sluice.cli import main, submit_command
from sluice.config import PLUGIN, SHUFFLE_MANAGER, spark_conf


def test_jar_prints_the_jar(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jar"]) == 0
    assert capsys.readouterr().out.strip() == sluice.jar_path()


def test_conf_prints_spark_submit_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conf", "--buffer-timeout", "10ms", "--buffers_per_channel", "4", "--prometheus"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"--jars {sluice.jar_path()}"
    assert all(line.startswith("--conf ") for line in lines[1:])
    confs = {line.removeprefix("--conf ") for line in lines[1:]}
    assert f"spark.shuffle.manager={SHUFFLE_MANAGER}" in confs
    assert "spark.sluice.bufferTimeout=10ms" in confs
    assert "spark.sluice.network.buffersPerChannel=4" in confs
    assert "spark.metrics.conf.*.sink.prometheusServlet.path=/metrics/prometheus" in confs


def test_conf_rejects_a_bad_value() -> None:
    with pytest.raises(SystemExit, match="spark.sluice.memory.segmentSize"):
        main(["conf", "--segment-size", "3k"])


def test_submit_puts_sluice_first_and_keeps_the_users_arguments() -> None:
    conf = spark_conf()
    user_args = ["--master", "local[2]", "--verbose", "app.py", "--jars", "x"]
    command = submit_command("spark-submit", conf, user_args)
    assert command[:3] == ["spark-submit", "--jars", sluice.jar_path()]
    assert f"spark.shuffle.manager={SHUFFLE_MANAGER}" in command
    # Everything from the application on is the application's, even what looks like an option.
    assert command[-6:] == user_args


def test_submit_merges_the_users_jars_and_plugins() -> None:
    conf = spark_conf()
    command = submit_command(
        "spark-submit",
        conf,
        ["--jars", "/a.jar", "--conf", "spark.plugins=com.example.P", "--conf=spark.jars=/b.jar", "app.py"],
    )
    assert command[1:3] == ["--jars", f"/a.jar,/b.jar,{sluice.jar_path()}"]
    assert f"spark.plugins=com.example.P,{PLUGIN}" in command
    assert command.count("--jars") == 1
    assert command[-1] == "app.py"
    assert not [arg for arg in command if arg.startswith("spark.jars=") or arg.startswith("--conf=")]


def test_help_lists_the_commands() -> None:
    done = subprocess.run([sys.executable, "-m", "sluice.cli", "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for command in ("jar", "conf", "submit", "demo"):
        assert command in done.stdout


def test_version_prints_the_installed_version() -> None:
    done = subprocess.run([sys.executable, "-m", "sluice.cli", "--version"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"sluice {sluice.__version__} (spark-sluice)"


def test_bench_without_sluice_bench_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmarks are a distribution of their own: without it, `sluice bench` says where it
    comes from instead of failing with an import error."""
    monkeypatch.setitem(sys.modules, "sluice_bench", None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "sluice_bench.cli", raising=False)
    with pytest.raises(SystemExit, match=r"sluice-bench, which is not installed.*pip install \./bench"):
        main(["bench", "batch", "--quick"])
