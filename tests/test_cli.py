"""The `sluice` command: jar, conf, and the spark-submit command line that submit runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Dict, List

import pytest
import sluice
from sluice import compare
from sluice._submit import properties, split, submit_command, submit_environment, submit_master
from sluice.cli import conf_parser, connect_server_command, main, sluice_conf, submit_command_line
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
    for instance in ("driver", "executor"):
        assert f"spark.metrics.conf.{instance}.sink.prometheusServlet.path=/metrics/prometheus" in confs


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
    for command in ("jar", "conf", "submit", "doctor", "compare", "connect-server", "demo", "bench"):
        assert f"\n  {command} " in done.stdout, command
    unknown = subprocess.run([sys.executable, "-m", "sluice.cli", "sumbit"], capture_output=True, text=True)
    assert unknown.returncode == 2 and "unknown command 'sumbit'" in unknown.stderr


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
    for option in ("--keep-ui", "--compare", "--rounds", "--rows", "--partitions", "--master"):
        assert option in done.stdout


def test_demo_compare_hands_its_job_to_sluice_compare() -> None:
    from sluice import compare, demo

    args = demo.compare_arguments(20_000, 4, "local[2]", 2)
    parsed = compare.parser().parse_args(args[: args.index("--")])
    assert parsed.rounds == 2
    user_args = args[args.index("--") + 1 :]
    options, application = split(user_args)
    assert application == [demo.__file__, "--rows", "20000", "--partitions", "4"]
    assert ("--master", "local[2]") in [(o.name, o.value) for o in options]
    assert ("spark.sql.autoBroadcastJoinThreshold", "-1") in [o.conf() for o in options]


def test_demo_rejects_a_bad_keep_ui() -> None:
    with pytest.raises(SystemExit, match="--keep-ui"):
        main(["demo", "--keep-ui", "0"])


def test_demo_shows_its_ui_while_it_runs_and_keeps_it_open() -> None:
    """A tiny demo on local[2]: the UI address comes first, progress follows step by step, and the
    Sluice tab answers while --keep-ui holds the session."""
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
    assert any(line.startswith("network metrics (sluice.metrics") for line in lines), lines


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
    assert "spark.metrics.conf.driver.sink.prometheusServlet.path=/metrics/prometheus" in command
    # Sluice's options are not passed on; the application's own arguments are untouched.
    assert command[-5:] == ["--master", "local[2]", "app.py", "--buffer-timeout", "x"]
    assert command.count("--buffer-timeout") == 1
    with pytest.raises(SystemExit, match="spark.sluice.memory.segmentSize"):
        submit_command_line("spark-submit", ["--segment-size", "3k", "app.py"])
    with pytest.raises(SystemExit, match="sluice submit: no application: give app.py"):
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


def test_submit_help_is_real_help() -> None:
    """`sluice submit --help` explains itself and lists Sluice's options with the unit rule, exit 0;
    no arguments at all print the same help as a usage error."""
    done = subprocess.run([sys.executable, "-m", "sluice.cli", "submit", "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("usage: sluice submit [Sluice options] [spark-submit options] app.py [app arguments]")
    for expected in ("--buffer-timeout DURATION", "--sluice-port N", "--segment-size SIZE", "--prometheus", "--yarn"):
        assert expected in text, expected
    assert "A bare number is refused" in " ".join(text.split())
    assert "--spark-help" in text and "merged with Sluice's" in " ".join(text.split())
    bare = subprocess.run([sys.executable, "-m", "sluice.cli", "submit"], capture_output=True, text=True)
    assert bare.returncode == 2 and bare.stdout.startswith("usage: sluice submit")
    # --spark-help hands over to spark-submit's own help.
    assert submit_command_line("spark-submit", ["--spark-help"]) == ["spark-submit", "--help"]
    for command in ("conf", "doctor", "compare", "connect-server", "jar", "demo"):
        helped = subprocess.run([sys.executable, "-m", "sluice.cli", command, "--help"], capture_output=True, text=True)
        assert helped.returncode == 0 and helped.stdout.startswith(f"usage: sluice {command}"), (command, helped)


def test_sluice_options_after_the_application_are_warned_about(capsys: pytest.CaptureFixture[str]) -> None:
    command = submit_command_line(
        "spark-submit", ["--master", "local[2]", "app.py", "--buffer-timeout", "10ms", "--sluice-port=7070", "--x"]
    )
    # The application still gets them: they may be its own.
    assert command[-5:] == ["app.py", "--buffer-timeout", "10ms", "--sluice-port=7070", "--x"]
    err = capsys.readouterr().err
    assert "sluice submit: warning: --buffer-timeout comes after app.py, so it goes to the application" in err
    assert "sluice submit: warning: --sluice-port=7070 comes after app.py" in err
    assert "--x" not in err
    submit_command_line("spark-submit", ["--buffer-timeout", "10ms", "app.py", "--day", "1"])
    assert capsys.readouterr().err == ""


def test_a_mistyped_port_gets_the_sluice_port_hint_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    hint = "--port is ambiguous here; use --sluice-port (Sluice's executor port, spark.sluice.network.port)"
    with pytest.raises(SystemExit) as conf:
        main(["conf", "--port", "7070"])
    assert conf.value.code == 2 and hint in capsys.readouterr().err
    for command in (["submit"], ["connect-server"], ["doctor", "--submit"], ["compare"]):
        args = ["--port=7070"] + (["--", "app.py"] if command == ["compare"] else ["app.py"])
        with pytest.raises(SystemExit, match=re.escape(hint)):
            if command[0] == "submit":
                submit_command_line("spark-submit", args)
            elif command[0] == "connect-server":
                connect_server_command("spark-submit", ["--port", "7070"], {})
            elif command[0] == "doctor":
                main(command + args)
            else:
                compare.main(args, "spark-submit", {})


def test_a_larger_segment_raises_the_frame_length_it_needs() -> None:
    """`--segment-size 1m` alone is accepted: the frame length the user never set rises with it, in
    Python's check as in the JVM's (SluiceConfSuite); one the user set too small is refused, named."""
    conf = sluice_conf(conf_parser().parse_args(["--segment-size", "1m"]), "conf")
    assert conf["spark.sluice.memory.segmentSize"] == "1m"
    assert "spark.sluice.network.maxFrameLength" not in conf
    with pytest.raises(SystemExit, match=r"maxFrameLength: must be at least spark\.sluice\.memory\.segmentSize"):
        main(["conf", "--segment-size", "1m", "--max-frame-length", "1m"])


def test_sizes_and_durations_need_a_unit_on_the_command_line() -> None:
    bare = ((["--buffer-timeout", "10"], "10ms or 10s"), (["--segment-size", "65536"], "65536b or 65536k"))
    for args, example in bare:
        with pytest.raises(SystemExit, match=f"a bare number; give its unit, e.g. {example}"):
            main(["conf", *args])
    # A negative value is a value, not an option.
    command = submit_command_line("spark-submit", ["--buffer-timeout", "-1ms", "--segment-size", "64k", "app.py"])
    assert "spark.sluice.bufferTimeout=-1ms" in command and "spark.sluice.memory.segmentSize=64k" in command
    # Whole numbers of other kinds need none.
    port = sluice_conf(conf_parser().parse_args(["--sluice-port", "7070"]), "conf")
    assert port["spark.sluice.network.port"] == "7070"


def test_conf_prints_properties_and_the_yarn_pair(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conf", "--format", "properties", "--yarn", "--buffer-timeout", "10ms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # What spark-submit --properties-file reads back.
    props = tmp_properties(lines)
    assert props["spark.jars"] == sluice.jar_path()
    assert props["spark.shuffle.manager"] == SHUFFLE_MANAGER
    assert props["spark.sluice.bufferTimeout"] == "10ms"
    assert props["spark.shuffle.service.enabled"] == "false"
    assert props["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"
    assert main(["conf", "--yarn"]) == 0
    args = capsys.readouterr().out.splitlines()
    assert "--conf spark.shuffle.service.enabled=false" in args
    assert "--conf spark.dynamicAllocation.shuffleTracking.enabled=true" in args
    # With the node service Spark's shuffle tracking would keep the executors the service frees.
    assert main(["conf", "--yarn", "--service-enabled", "true"]) == 0
    args = capsys.readouterr().out.splitlines()
    assert "--conf spark.shuffle.service.enabled=false" in args
    assert "--conf spark.dynamicAllocation.shuffleTracking.enabled=false" in args
    assert "--conf spark.dynamicAllocation.shuffleTracking.enabled=true" not in args


def tmp_properties(lines: List[str]) -> Dict[str, str]:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    try:
        return properties(f.name)
    finally:
        os.unlink(f.name)


SPLICE = """
import sys
import sluice.config
jar = sys.argv[1]
sluice.config.jar_path = lambda: jar  # as if Sluice were installed there
from sluice.cli import main
sys.exit(main(["conf", "--prometheus"]))
"""


def test_conf_output_splices_into_a_shell_unquoted(tmp_path: Path) -> None:
    """`spark-submit $(sluice conf)` with a jar path holding a space and glob characters, in a
    directory full of files a glob would match: the shell gets exactly the arguments printed."""
    jar = tmp_path / "my venv [py3]" / "site*packages" / "sluice.jar"
    for name in ("spark.metrics.conf.x.sink.prometheusServlet.class=y", "--conf", "a"):
        (tmp_path / name).write_text("")
    script = tmp_path / "splice.py"
    script.write_text(SPLICE)
    printed = subprocess.run(
        [sys.executable, str(script), str(jar)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    expected = [word for line in printed for word in line.split(" ")]
    assert not [w for w in expected if any(c in w for c in "*?[] ")], expected
    spliced = subprocess.run(
        ["bash", "-c", f'printf "%s\\n" $({sys.executable} {script} "$1")', "bash", str(jar)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.splitlines()
    assert spliced == expected
    assert expected[1] == jar.as_uri()
    assert urllib.parse.unquote(urllib.parse.urlparse(expected[1]).path) == str(jar)
