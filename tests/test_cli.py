"""The `sluice` command: jar, conf, and the spark-submit command line that submit runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import sluice
from sluice.cli import main, submit_command, submit_environment, submit_master
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


USER_ENV = {"SPARK_HOME": "/opt/spark", "SPARK_LOCAL_IP": "10.1.2.3", "PATH": "/usr/bin"}


@pytest.mark.parametrize(
    "args",
    [
        ["--master", "spark://10.1.2.1:7077", "app.py"],
        ["--master=yarn", "--deploy-mode", "cluster", "app.py"],
        ["--conf", "spark.master=k8s://https://kube:6443", "app.py"],
    ],
)
def test_submit_to_a_cluster_keeps_the_users_address_and_spark_home(args: list[str]) -> None:
    env = submit_environment(USER_ENV, args)
    assert env["SPARK_HOME"] == "/opt/spark"
    assert env["SPARK_LOCAL_IP"] == "10.1.2.3"
    assert env["PYSPARK_PYTHON"] == sys.executable
    without_ip = submit_environment({"PATH": "/usr/bin"}, args)
    assert "SPARK_LOCAL_IP" not in without_ip  # Spark picks the host's address itself


@pytest.mark.parametrize("args", [["--master", "local[2]", "app.py"], ["--master", "local-cluster[2,1,1024]", "app.py"]])
def test_submit_on_a_local_master_pins_loopback_and_pysparks_spark(args: list[str]) -> None:
    env = submit_environment({"SPARK_HOME": "/opt/spark", "PATH": "/usr/bin"}, args)
    assert "SPARK_HOME" not in env
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    # A user's own choice of address is kept.
    assert submit_environment(USER_ENV, args)["SPARK_LOCAL_IP"] == "10.1.2.3"


def test_submit_finds_the_master_where_spark_submit_does(tmp_path: Path) -> None:
    # Not from the application's own arguments.
    assert submit_master(["app.py", "--master", "yarn"], {}) == "local[*]"
    assert submit_master(["--verbose", "--master", "yarn", "app.py"], {"MASTER": "spark://m:7077"}) == "yarn"
    assert submit_master(["app.py"], {"MASTER": "spark://m:7077"}) == "spark://m:7077"
    props = tmp_path / "job.conf"
    props.write_text("# a comment\nspark.executor.cores  2\nspark.master   spark://10.77.0.2:7077\n")
    assert submit_master(["--properties-file", str(props), "app.py"], {}) == "spark://10.77.0.2:7077"
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.master=yarn\n")
    assert submit_master(["app.py"], {"SPARK_HOME": str(tmp_path)}) == "yarn"
    assert submit_master(["app.py"], {"SPARK_CONF_DIR": str(conf_dir)}) == "yarn"
    env = submit_environment({"SPARK_HOME": str(tmp_path)}, ["app.py"])
    assert env["SPARK_HOME"] == str(tmp_path) and "SPARK_LOCAL_IP" not in env
