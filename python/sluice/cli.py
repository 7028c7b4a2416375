"""The ``sluice`` command: the jar's path, spark-submit settings, spark-submit itself, the demo.

sluice --version                    the installed Sluice version
sluice jar                          path of the plugin jar
sluice conf [--buffer-timeout 10ms ...] [--prometheus]
                                    --jars/--conf arguments for spark-submit
sluice submit [--buffer-timeout 10ms ...] [spark-submit args] app.py [app args]
                                    pyspark's spark-submit with Sluice switched on (on
                                    loopback for local masters; SPARK_LOCAL_IP and
                                    SPARK_HOME left as they are for a cluster)
sluice connect-server [--connect-port 15002] [--connect-host ADDR] [--sluice-port N]
                      [--buffer-timeout 10ms ...]
                      [spark-submit options]
                                    a Spark Connect server (pyspark's SparkConnectServer,
                                    what start-connect-server.sh runs) with Sluice switched
                                    on, in the foreground; clients connect with
                                    SparkSession.builder.remote("sc://HOST:PORT")
sluice demo [--keep-ui [SECONDS]] [--compare]
                                    a shuffle-heavy job on a local two-executor cluster
sluice bench NAME [--rounds N] [--quick] [--out DIR]
                                    benchmarks against Spark's shuffles (batch, transport,
                                    latency, memory, scale, cluster, allocation); handed over to the
                                    sluice-bench distribution (sluice-bench NAME ...), installed
                                    apart
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from sluice import _options
from sluice._submit import (
    SWITCHES,
    is_cluster_master,
    split,
    submit_arguments,
    submit_command,
    submit_environment,
    submit_master,
)
from sluice._version import __version__
from sluice.config import spark_conf


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
    if args[:1] == ["shuffle-service"] and not set(args[1:]) & {"-h", "--help"}:
        # Everything after `shuffle-service` belongs to the service's JVM entry point.
        return _shuffle_service(args[1:])
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
        help="run pyspark's spark-submit with Sluice (Sluice's options as for conf; all others go to spark-submit)",
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

    service = commands.add_parser(
        "shuffle-service",
        help="run Sluice's node shuffle service on this host (one per host; spark.sluice.service.enabled)",
        description="Runs Sluice's node shuffle service in the foreground until stopped (SIGTERM): it serves the "
        "map outputs of every executor on this host that registers with it, so executors may go without their "
        "outputs. Options: --properties-file FILE and --conf KEY=VALUE (spark.sluice.service.port, "
        "spark.sluice.service.applicationTimeout, spark.authenticate, ...), --host ADDRESS to bind (default "
        "SPARK_LOCAL_IP, else every address); --status HOST:PORT prints a running service's metrics as JSON. "
        "SLUICE_SERVICE_JAVA_OPTS sets its JVM options (default -Xmx512m). See docs/deploying.md.",
    )
    service.add_argument("--properties-file", metavar="FILE", help="a properties file of settings")
    service.add_argument("--conf", metavar="KEY=VALUE", action="append", help="one setting (repeatable)")
    service.add_argument("--host", metavar="ADDRESS", help="the address to bind")
    service.add_argument("--status", metavar="HOST:PORT", help="print the metrics of the service at HOST:PORT")

    commands.add_parser(
        "bench",
        help="benchmarks against Spark's own shuffles (batch, transport, latency, memory, scale, cluster, "
        "allocation); "
        "needs the sluice-bench distribution, and all further arguments go to it",
        add_help=False,
    )
    return parser


# Options whose flag is not their Python name in kebab case: next to spark-submit's and Spark
# Connect's own options, a bare --port would be ambiguous (it is Sluice's executor port).
_FLAGS = {"port": "--sluice-port"}
_AMBIGUOUS = {"--port": "--sluice-port (Sluice's executor port, spark.sluice.network.port)"}


def _flag(python: str) -> str:
    return _FLAGS.get(python, "--" + python.replace("_", "-"))


def _add_sluice_options(parser: argparse.ArgumentParser) -> None:
    """Every Sluice option as ``--kebab-case`` (and ``--snake_case``), and ``--prometheus``."""
    for option in _options.options().values():
        spellings = [_flag(option.python)]
        if "_" in option.python and option.python not in _FLAGS:
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


def sluice_arguments(
    parser: argparse.ArgumentParser, args: Sequence[str], command: str
) -> Tuple[argparse.Namespace, List[str]]:
    """Sluice's options (``parser``'s) read from the options before the application in ``args``, and
    what is left for spark-submit: its own options, then the application and the application's
    arguments, untouched. ``--port`` is refused as ambiguous."""
    switches = set(SWITCHES) | {"--prometheus"}
    options, application = split(args, switches)
    for option in options:
        if option.name in _AMBIGUOUS:
            raise SystemExit(f"sluice {command}: {option.name} is ambiguous here; use {_AMBIGUOUS[option.name]}")
    given = [arg for option in options for arg in option.given]
    parsed, rest = parser.parse_known_args(given)
    return parsed, rest + application


def sluice_conf(parsed: argparse.Namespace, command: str) -> Dict[str, str]:
    """The Spark settings of the Sluice options in ``parsed``; a bad one ends the command naming it."""
    try:
        return spark_conf(prometheus=parsed.prometheus, **_chosen_options(parsed))
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"sluice {command}: {e}") from None


def submit_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice submit",
        allow_abbrev=False,
        add_help=False,  # --help belongs to spark-submit
        description="Runs pyspark's spark-submit with Sluice switched on; Sluice's options (as for "
        "`sluice conf`) go before the application, every other argument goes to spark-submit.",
    )
    _add_sluice_options(parser)
    return parser


def submit_command_line(spark_submit: str, args: Sequence[str]) -> List[str]:
    """The spark-submit command line of ``sluice submit ARGS``."""
    parsed, rest = sluice_arguments(submit_parser(), args, "submit")
    if not split(rest)[1]:
        raise SystemExit("usage: sluice submit [Sluice options] [spark-submit options] app.py [app arguments]")
    return submit_command(spark_submit, sluice_conf(parsed, "submit"), rest)


def connect_server_command(spark_submit: str, args: Sequence[str], environ: Mapping[str, str]) -> List[str]:
    """The spark-submit command line of ``sluice connect-server ARGS``."""
    parsed, rest = sluice_arguments(connect_server_parser(), args, "connect-server")
    if not 0 < parsed.connect_port < 65536:
        raise SystemExit(
            f"sluice connect-server: --connect-port must be a TCP port (1-65535), got {parsed.connect_port}"
        )
    conf = sluice_conf(parsed, "connect-server")
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
    command = connect_server_command(spark_submit, args, os.environ)
    env = submit_environment(os.environ, command[1:])
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


def _shuffle_service(args: List[str]) -> int:
    """Replaces this process with the node shuffle service's JVM (or its --status query)."""
    from sluice._service import service_command

    try:
        command = service_command(args)
    except FileNotFoundError as e:
        raise SystemExit(f"sluice shuffle-service: {e}") from None
    sys.stdout.flush()
    os.execv(command[0], command)
    return 1  # not reached: execv replaces this process


def _jar() -> str:
    try:
        from sluice._jars import jar_path

        return jar_path()
    except FileNotFoundError as e:
        raise SystemExit(f"sluice: {e}") from None


def _submit(user_args: List[str]) -> int:
    spark_submit = _spark_submit("submit")
    command = submit_command_line(spark_submit, user_args)
    env = submit_environment(os.environ, command[1:])
    sys.stdout.flush()
    os.execve(command[0], command, env)
    return 1  # not reached: execve replaces this process


if __name__ == "__main__":
    sys.exit(main())
