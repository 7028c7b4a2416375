"""The `sluice` command: jar, conf, and the spark-submit command line that submit runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import List

import pytest
import sluice
from sluice._submit import split, submit_command, submit_environment, submit_master
from sluice.cli import connect_server_command, main, submit_command_line
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


def test_demo_help_lists_keep_ui_and_compare() -> None:
    done = subprocess.run([sys.executable, "-m", "sluice.cli", "demo", "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for option in ("--keep-ui", "--compare", "--rows", "--partitions", "--master"):
        assert option in done.stdout


def test_demo_rejects_a_bad_keep_ui() -> None:
    with pytest.raises(SystemExit, match="--keep-ui"):
        main(["demo", "--keep-ui", "0"])


def test_demo_shows_its_ui_while_it_runs_keeps_it_open_and_compares_with_the_sort_shuffle() -> None:
    """A tiny demo on local[2]: the UI address comes first, progress follows step by step, the
    Sluice tab answers while --keep-ui holds the session, and --compare prints both times."""
    command = [
        sys.executable,
        "-m",
        "sluice.cli",
        "demo",
        "--rows",
        "20000",
        "--partitions",
        "4",
        "--master",
        "local[2]",
        "--keep-ui",
        "5",
        "--compare",
    ]
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    lines: List[str] = []
    tab_page = ""
    deadline = time.monotonic() + 600  # about 40 s on an idle machine
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("Keeping the session open"):
                tab_page = http_get(line.rsplit(" at ", 1)[1].split(";", 1)[0])
            assert time.monotonic() < deadline, lines
        assert process.wait(timeout=60) == 0, lines
    finally:
        process.kill()
        process.wait()
    ui = [i for i, line in enumerate(lines) if line.startswith("Spark UI: http")]
    steps = [i for i, line in enumerate(lines) if " done in " in line]
    assert ui and steps and ui[0] < steps[0], lines  # the address comes before the job's first step ends
    assert "(Sluice tab: http" in lines[ui[0]] and lines[ui[0]].endswith("/sluice/)")
    assert [line for line in lines if line.startswith("join on key (sort-merge) ...")], lines
    assert 'id="sluice-stages"' in tab_page  # the tab answered while --keep-ui held the session
    assert any(line.startswith("time with Sluice: ") for line in lines), lines
    assert any(line.startswith("time with Spark's sort shuffle: ") for line in lines), lines
    assert "same results: yes" in lines, lines


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        body: bytes = response.read()
        return body.decode("utf-8")


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
    without_ip = submit_environment({"PATH": "/usr/bin"}, args)
    assert "SPARK_LOCAL_IP" not in without_ip  # Spark picks the host's address itself


@pytest.mark.parametrize(
    "args", [["--master", "local[2]", "app.py"], ["--master", "local-cluster[2,1,1024]", "app.py"]]
)
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


def test_submit_gives_this_interpreter_only_to_what_runs_on_this_machine() -> None:
    # Standalone: the hosts share this environment's layout (as dev/cluster's do).
    standalone = submit_environment({}, ["--master", "spark://m:7077", "app.py"])
    assert standalone["PYSPARK_PYTHON"] == standalone["PYSPARK_DRIVER_PYTHON"] == sys.executable
    # YARN and Kubernetes: executors run their hosts' or images' Python; a client-mode driver runs here.
    for master in ("yarn", "k8s://https://kube:6443"):
        client = submit_environment({}, ["--master", master, "app.py"])
        assert "PYSPARK_PYTHON" not in client and client["PYSPARK_DRIVER_PYTHON"] == sys.executable
        cluster = submit_environment({}, ["--master", master, "--deploy-mode", "cluster", "app.py"])
        assert "PYSPARK_PYTHON" not in cluster and "PYSPARK_DRIVER_PYTHON" not in cluster
        by_conf = submit_environment({}, ["--master", master, "--conf", "spark.submit.deployMode=cluster", "app.py"])
        assert "PYSPARK_DRIVER_PYTHON" not in by_conf
    # The user's own choice is kept.
    assert (
        submit_environment({"PYSPARK_PYTHON": "/opt/py"}, ["--master", "yarn", "app.py"])["PYSPARK_PYTHON"] == "/opt/py"
    )


def test_one_walker_reads_spark_submits_options() -> None:
    options, application = split(["--master", "yarn", "--verbose", "--conf=a.b=c", "-c", "d=e", "app.py", "--x", "y"])
    assert [(o.name, o.value) for o in options] == [
        ("--master", "yarn"),
        ("--verbose", ""),
        ("--conf", "a.b=c"),
        ("-c", "d=e"),
    ]
    assert [o.conf() for o in options] == [None, None, ("a.b", "c"), ("d", "e")]
    assert application == ["app.py", "--x", "y"]
    assert split(["--master", "yarn"]) == (split(["--master", "yarn"])[0], [])


def test_submit_takes_sluices_options_before_the_application() -> None:
    command = submit_command_line(
        "spark-submit",
        ["--buffer-timeout", "10ms", "--prometheus", "--master", "local[2]", "app.py", "--buffer-timeout", "x"],
    )
    assert "spark.sluice.bufferTimeout=10ms" in command
    assert "spark.metrics.conf.*.sink.prometheusServlet.path=/metrics/prometheus" in command
    # Sluice's options are not passed on; the application's own arguments are untouched.
    assert command[-5:] == ["--master", "local[2]", "app.py", "--buffer-timeout", "x"]
    assert command.count("--buffer-timeout") == 1
    with pytest.raises(SystemExit, match="spark.sluice.memory.segmentSize"):
        submit_command_line("spark-submit", ["--segment-size", "3k", "app.py"])
    with pytest.raises(SystemExit, match="usage: sluice submit"):
        submit_command_line("spark-submit", ["--buffer-timeout", "10ms"])
    port = submit_command_line("spark-submit", ["--sluice-port", "7070", "app.py"])
    assert "spark.sluice.network.port=7070" in port


def test_connect_server_flags_name_which_port_they_set() -> None:
    command = connect_server_command("spark-submit", ["--connect-port", "15010", "--sluice-port", "7070"], {})
    assert "spark.connect.grpc.binding.port=15010" in command
    assert "spark.sluice.network.port=7070" in command
    for ambiguous in (["--port", "7070"], ["--port=7070"]):
        with pytest.raises(SystemExit, match="--port is ambiguous here; use --sluice-port"):
            connect_server_command("spark-submit", ambiguous, {})
    with pytest.raises(SystemExit, match="--port is ambiguous"):
        submit_command_line("spark-submit", ["--port", "7070", "app.py"])
