"""The ``sluice`` command: the jar's path, spark-submit settings, spark-submit itself, the demo.

sluice --version                    the installed Sluice version
sluice jar                          path of the plugin jar
sluice conf [--buffer-timeout 10ms ...] [--prometheus]
                                    --jars/--conf arguments for spark-submit
sluice submit [spark-submit args] app.py [app args]
                                    pyspark's spark-submit with Sluice switched on (on
                                    loopback for local masters; SPARK_LOCAL_IP and
                                    SPARK_HOME left as they are for a cluster)
sluice connect-server [--connect-port 15002] [--connect-host ADDR] [--buffer-timeout 10ms ...]
                      [spark-submit options]
                                    a Spark Connect server (pyspark's SparkConnectServer,
                                    what start-connect-server.sh runs) with Sluice switched
                                    on, in the foreground; clients connect with
                                    SparkSession.builder.remote("sc://HOST:PORT")
sluice demo [--keep-ui [SECONDS]] [--compare]
                                    a shuffle-heavy job on a local two-executor cluster
sluice bench NAME [--rounds N] [--quick] [--out DIR]
                                    benchmarks against Spark's shuffles (batch, transport,
                                    latency, memory, scale, cluster); handed over to the
                                    sluice-bench distribution (sluice-bench NAME ...), installed
                                    apart
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from sluice import _options
from sluice._version import __version__
from sluice.config import APPENDED_KEYS, append_to_list, spark_conf

# spark-submit's options that take no value (SparkSubmitOptionParser's switches); every other
# option takes one, as the next argument or after `=`.
_SUBMIT_SWITCHES = frozenset(
    ["--verbose", "-v", "--help", "-h", "--version", "--supervise", "--usage-error", "--load-spark-defaults"]
)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["submit"]:
        # Everything after `submit` belongs to spark-submit, untouched by argparse.
        return _submit(args[1:])
    if args[:1] == ["connect-server"]:
        # Sluice's options are parsed here; everything else belongs to spark-submit.
        return _connect_server(args[1:])
    if args[:1] == ["bench"]:
        # Everything after `bench` belongs to sluice-bench.
        return _bench(args[1:])
    parsed = _parser().parse_args(args)
    if parsed.command == "jar":
        print(_jar())
    elif parsed.command == "conf":
        try:
            conf = spark_conf(prometheus=parsed.prometheus, **_chosen_options(parsed))
        except ValueError as e:
            raise SystemExit(f"sluice conf: {e}") from None
        arguments = submit_arguments(conf)
        for flag, value in zip(arguments[::2], arguments[1::2]):
            print(flag, value)
    elif parsed.command == "demo":
        from sluice import demo

        if parsed.rows < 1 or parsed.partitions < 1:
            raise SystemExit("sluice demo: --rows and --partitions must be at least 1")
        if parsed.keep_ui is not None and parsed.keep_ui <= 0:
            raise SystemExit("sluice demo: --keep-ui takes a positive number of seconds")
        demo.main(
            rows=parsed.rows,
            partitions=parsed.partitions,
            master=parsed.master,
            keep_ui_seconds=parsed.keep_ui,
            compare=parsed.compare,
        )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice", description="Sluice: Flink's network stack as a Spark shuffle.")
    parser.add_argument("--version", action="version", version=f"sluice {__version__} (spark-sluice)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("jar", help="print the path of the Sluice plugin jar")

    conf = commands.add_parser(
        "conf",
        help="print spark-submit arguments (--jars, --conf) that switch a job to Sluice",
        description="Prints one spark-submit argument per line (--jars <jar>, then --conf key=value); "
        "use as `spark-submit $(sluice conf) app.py`.",
    )
    _add_sluice_options(conf)

    commands.add_parser(
        "connect-server",
        help="run a Spark Connect server with Sluice (Sluice's options as for conf; all others go to spark-submit)",
    )

    commands.add_parser(
        "submit",
        help="run pyspark's spark-submit with Sluice (all further arguments go to spark-submit)",
    )

    from sluice import demo

    run_demo = commands.add_parser(
        "demo", help="run a shuffle-heavy job on a local two-executor cluster through Sluice"
    )
    run_demo.add_argument("--rows", type=int, default=demo.ROWS, help="rows of each input (default %(default)s)")
    run_demo.add_argument(
        "--partitions", type=int, default=demo.PARTITIONS, help="shuffle partitions (default %(default)s)"
    )
    run_demo.add_argument("--master", default=demo.MASTER, help="Spark master (default %(default)s)")
    run_demo.add_argument(
        "--keep-ui",
        type=float,
        nargs="?",
        const=demo.KEEP_UI_SECONDS,
        metavar="SECONDS",
        help="keep the session open afterwards so you can look at the Sluice tab of its UI, until Ctrl-C "
        f"or SECONDS (default {demo.KEEP_UI_SECONDS:.0f})",
    )
    run_demo.add_argument(
        "--compare", action="store_true", help="then run the same job through Spark's sort shuffle and print both times"
    )

    commands.add_parser(
        "bench",
        help="benchmarks against Spark's own shuffles (batch, transport, latency, memory, scale, cluster); "
        "needs the sluice-bench distribution, and all further arguments go to it",
        add_help=False,
    )
    return parser


def _add_sluice_options(parser: argparse.ArgumentParser) -> None:
    """Every Sluice option as ``--kebab-case`` (and ``--snake_case``), and ``--prometheus``."""
    for option in _options.options().values():
        spellings = ["--" + option.python.replace("_", "-")]
        if "_" in option.python:
            spellings.append("--" + option.python)
        parser.add_argument(
            *spellings,
            dest=option.python,
            metavar=option.type.upper(),
            help=f"{option.key} (default {option.default})",
        )
    parser.add_argument("--prometheus", action="store_true", help="switch on Spark's Prometheus servlet")


def _chosen_options(parsed: argparse.Namespace) -> Dict[str, object]:
    known = _options.options()
    return {name: value for name, value in vars(parsed).items() if name in known and value is not None}


# The Connect server's main class, as pyspark's sbin/start-connect-server.sh runs it.
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
CONNECT_DEFAULT_PORT = 15002


def connect_server_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice connect-server",
        allow_abbrev=False,
        description="Runs a Spark Connect server with Sluice switched on (pyspark's spark-submit running "
        f"{CONNECT_SERVER_CLASS}, as start-connect-server.sh does, in the foreground). Shuffle settings are "
        "static and Connect clients cannot set them (SPARK-44981): Sluice's options go here. Every other "
        "argument (--master, --conf, ...) goes to spark-submit.",
    )
    parser.add_argument(
        "--connect-port",
        type=int,
        default=CONNECT_DEFAULT_PORT,
        help="the gRPC port clients connect to (spark.connect.grpc.binding.port; default %(default)s)",
    )
    parser.add_argument(
        "--connect-host",
        help="the address the gRPC server binds (spark.connect.grpc.binding.address; default 127.0.0.1 for "
        "local masters, every address otherwise)",
    )
    _add_sluice_options(parser)
    return parser


def connect_server_command(spark_submit: str, args: Sequence[str], environ: Mapping[str, str]) -> List[str]:
    """The spark-submit command line of ``sluice connect-server ARGS``."""
    parsed, rest = connect_server_parser().parse_known_args(list(args))
    if not 0 < parsed.connect_port < 65536:
        raise SystemExit(
            f"sluice connect-server: --connect-port must be a TCP port (1-65535), got {parsed.connect_port}"
        )
    try:
        conf = spark_conf(prometheus=parsed.prometheus, **_chosen_options(parsed))
    except ValueError as e:
        raise SystemExit(f"sluice connect-server: {e}") from None
    stray = [arg for arg in rest if arg in ("--class",) or arg.endswith((".py", ".jar"))]
    if stray:
        raise SystemExit(f"sluice connect-server: runs {CONNECT_SERVER_CLASS} itself; remove {' '.join(stray)}")
    host = parsed.connect_host
    if host is None and not is_cluster_master(submit_master(rest, environ)):
        host = "127.0.0.1"
    server = ["--class", CONNECT_SERVER_CLASS, "--name", "Spark Connect server"]
    server += ["--conf", f"spark.connect.grpc.binding.port={parsed.connect_port}"]
    if host:
        server += ["--conf", f"spark.connect.grpc.binding.address={host}"]
    # SparkSubmit's name for "no application file: the main class is Spark's own".
    return submit_command(spark_submit, conf, server + list(rest) + ["spark-internal"])


def _connect_server(args: List[str]) -> int:
    spark_submit = _spark_submit("connect-server")
    env = submit_environment(os.environ, args)
    command = connect_server_command(spark_submit, args, os.environ)
    sys.stdout.flush()
    os.execve(command[0], command, env)
    return 1  # not reached: execve replaces this process


def _spark_submit(command: str) -> str:
    import pyspark

    spark_submit = Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"
    if not spark_submit.is_file():
        raise SystemExit(
            f"sluice {command}: pyspark at {spark_submit.parent.parent} has no bin/spark-submit "
            "(pyspark-client is a client only: install pyspark where Spark runs)"
        )
    return str(spark_submit)


def _bench(args: List[str]) -> int:
    """Hands ``sluice bench ARGS`` over to the sluice-bench distribution's command."""
    import importlib

    try:
        bench = importlib.import_module("sluice_bench.cli")
    except ModuleNotFoundError as e:
        if e.name not in ("sluice_bench", "sluice_bench.cli"):
            raise  # sluice-bench is there but one of its own imports is missing
        raise SystemExit(
            "sluice bench: the benchmarks are a separate distribution, sluice-bench, which is not "
            "installed. From a Sluice source checkout: pip install ./bench (dev/build installs it "
            "into .venv); see docs/benchmarks.md."
        ) from None
    code: int = bench.main(args, prog="sluice bench")
    return code


def _jar() -> str:
    try:
        from sluice._jars import jar_path

        return jar_path()
    except FileNotFoundError as e:
        raise SystemExit(f"sluice: {e}") from None


def submit_arguments(conf: Dict[str, str]) -> List[str]:
    """``conf`` as spark-submit arguments: ``--jars <jar>``, then ``--conf key=value`` pairs."""
    args = ["--jars", conf["spark.jars"]]
    for key, value in conf.items():
        if key != "spark.jars":
            args += ["--conf", f"{key}={value}"]
    return args


def submit_command(spark_submit: str, conf: Dict[str, str], user_args: Sequence[str]) -> List[str]:
    """The spark-submit command line running ``user_args`` with Sluice.

    Sluice's arguments come first; the user's own ``--jars``, ``--conf spark.jars=`` and
    ``--conf spark.plugins=`` (which would otherwise replace Sluice's) are merged into them.
    """
    merged = dict(conf)
    user_jars: List[str] = []
    kept: List[str] = []
    i = 0
    while i < len(user_args):
        arg = user_args[i]
        if not arg.startswith("-"):
            kept += user_args[i:]  # the application and its own arguments
            break
        name, has_inline, inline = arg.partition("=")
        takes_value = name not in _SUBMIT_SWITCHES and not has_inline
        value = inline if has_inline else (user_args[i + 1] if takes_value and i + 1 < len(user_args) else "")
        step = 2 if takes_value else 1
        if name == "--jars":
            user_jars.append(value)
        elif name in ("--conf", "-c") and value.partition("=")[0] in APPENDED_KEYS:
            key, _, listed = value.partition("=")
            if key == "spark.jars":
                user_jars.append(listed)
            else:
                merged[key] = append_to_list(listed, [merged[key]])
        else:
            kept += user_args[i : i + step]
        i += step
    merged["spark.jars"] = append_to_list(",".join(user_jars), [conf["spark.jars"]])
    return [spark_submit] + submit_arguments(merged) + kept


def submit_master(user_args: Sequence[str], environ: Mapping[str, str]) -> str:
    """The master spark-submit will use, found the way spark-submit finds it.

    ``--master`` (or ``--conf spark.master=``) before the application, else ``spark.master`` in
    ``--properties-file`` or in the ``spark-defaults.conf`` of ``SPARK_CONF_DIR`` / ``SPARK_HOME``,
    else the ``MASTER`` environment variable, else ``local[*]``.
    """
    master: Optional[str] = None
    properties_file: Optional[str] = None
    i = 0
    while i < len(user_args) and user_args[i].startswith("-"):
        name, has_inline, inline = user_args[i].partition("=")
        takes_value = name not in _SUBMIT_SWITCHES and not has_inline
        value = inline if has_inline else (user_args[i + 1] if takes_value and i + 1 < len(user_args) else "")
        if name == "--master":
            master = value
        elif name in ("--conf", "-c") and value.partition("=")[0] == "spark.master" and master is None:
            master = value.partition("=")[2]
        elif name == "--properties-file":
            properties_file = value
        i += 2 if takes_value else 1
    if master:
        return master
    conf_dir = environ.get("SPARK_CONF_DIR") or (
        os.path.join(environ["SPARK_HOME"], "conf") if environ.get("SPARK_HOME") else None
    )
    defaults = properties_file or (os.path.join(conf_dir, "spark-defaults.conf") if conf_dir else None)
    if defaults:
        master = _properties(defaults).get("spark.master")
    return master or environ.get("MASTER") or "local[*]"


def _properties(path: str) -> Dict[str, str]:
    """The ``key value`` / ``key=value`` lines of a Spark properties file (none if it is missing)."""
    found: Dict[str, str] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        cut = min(
            (i for i in (line.find("="), line.find(":"), line.find(" "), line.find("\t")) if i >= 0), default=len(line)
        )
        value = line[cut:].lstrip(" \t")
        if value[:1] in ("=", ":"):
            value = value[1:]
        found[line[:cut]] = value.strip()
    return found


def is_cluster_master(master: str) -> bool:
    """True for a real cluster (spark://, yarn, k8s://, ...); False for local and local-cluster."""
    return not master.startswith("local")


def submit_environment(environ: Mapping[str, str], user_args: Sequence[str]) -> Dict[str, str]:
    """The environment ``sluice submit`` runs spark-submit in.

    On a local master (``local``, ``local-cluster``) Spark is pinned to loopback and to pyspark's
    own Spark, the one the jar was built for (``SPARK_HOME`` is dropped). On a cluster both are
    the user's: the driver must bind an address the executors can reach, and ``SPARK_HOME`` (with
    its ``conf/``) is how the user's cluster installation is found. Either way the driver and
    executors run Python with this interpreter, which has pyspark and Sluice.
    """
    env = dict(environ)
    if not is_cluster_master(submit_master(user_args, environ)):
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        env.pop("SPARK_HOME", None)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", env["PYSPARK_PYTHON"])
    return env


def _submit(user_args: List[str]) -> int:
    spark_submit = _spark_submit("submit")
    if not user_args:
        raise SystemExit("usage: sluice submit [spark-submit options] app.py [app arguments]")
    env = submit_environment(os.environ, user_args)
    try:
        conf = spark_conf()
    except FileNotFoundError as e:
        raise SystemExit(f"sluice submit: {e}") from None
    command = submit_command(spark_submit, conf, user_args)
    sys.stdout.flush()
    os.execve(command[0], command, env)
    return 1  # not reached: execve replaces this process


if __name__ == "__main__":
    sys.exit(main())
