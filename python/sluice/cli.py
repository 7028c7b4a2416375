"""The ``sluice`` command: the jar's path, spark-submit settings, spark-submit itself, checks and
comparisons of a user's own configuration and application, the demo.

sluice --version                    the installed Sluice version
sluice jar                          path of the plugin jar
sluice conf [--buffer-timeout 10ms ...] [--prometheus] [--yarn] [--format args|properties]
                                    spark-submit arguments (or spark-defaults.conf lines) that
                                    switch a job to Sluice
sluice submit [Sluice options] [spark-submit args] app.py [app args]
                                    pyspark's spark-submit with Sluice switched on (on
                                    loopback for local masters; SPARK_LOCAL_IP and
                                    SPARK_HOME left as they are for a cluster)
sluice doctor [--submit] [--executors-per-node N] [--json] [spark-submit args] [app.py]
                                    checks a Spark configuration, as spark-submit would read
                                    it, for what Sluice refuses or what will hurt
sluice compare [--rounds N] [Sluice options] -- [spark-submit args] app.py [app args]
                                    runs the application alternately with Spark's sort
                                    shuffle and with Sluice and compares them
sluice connect-server [--connect-port 15002] [--connect-host ADDR] [--sluice-port N]
                      [--buffer-timeout 10ms ...] [spark-submit options]
                                    a Spark Connect server (pyspark's SparkConnectServer,
                                    what start-connect-server.sh runs) with Sluice switched
                                    on, in the foreground; clients connect with
                                    SparkSession.builder.remote("sc://HOST:PORT")
sluice demo [--keep-ui [SECONDS]] [--compare [--rounds N]]
                                    a shuffle-heavy job on a local two-executor cluster
sluice bench NAME [--rounds N] [--quick] [--out DIR]
                                    benchmarks against Spark's shuffles, handed over to the
                                    sluice-bench distribution (installed apart)

Each command is one entry of :data:`COMMANDS`: a name, a one-line help and a function of its own
arguments, so a new command is one more entry.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from sluice import _options
from sluice._submit import (
    SWITCHES,
    is_cluster_master,
    split,
    submit_command,
    submit_environment,
    submit_master,
)
from sluice._version import __version__
from sluice.config import settings_conf

# ---- the Sluice options every command that starts Spark takes --------------------------------

# Options whose flag is not their Python name in kebab case: next to spark-submit's and Spark
# Connect's own options, a bare --port would be ambiguous (it is Sluice's executor port).
_FLAGS = {"port": "--sluice-port"}
PORT_HINT = "--port is ambiguous here; use --sluice-port (Sluice's executor port, spark.sluice.network.port)"

# The settings every YARN user of Sluice adds: the NodeManagers' spark_shuffle service stays for
# other applications, while this one tracks its shuffles itself (SparkSettingRules' shuffle-service).
YARN_PAIR = {
    "spark.shuffle.service.enabled": "false",
    "spark.dynamicAllocation.shuffleTracking.enabled": "true",
}

# The flags of the commands' own parsers that take no value (besides spark-submit's SWITCHES).
SLUICE_SWITCHES = frozenset(["--prometheus", "--yarn", "--spark-help"])

_METAVARS = {"bytes": "SIZE", "duration": "DURATION", "int": "N", "double": "X", "boolean": "true|false"}


def _flag(python: str) -> str:
    return _FLAGS.get(python, "--" + python.replace("_", "-"))


def sluice_flags() -> Tuple[str, ...]:
    """Every flag of Sluice's options (both spellings), ``--prometheus`` and ``--yarn``."""
    flags = ["--prometheus", "--yarn"]
    for option in _options.options().values():
        flags.append(_flag(option.python))
        if "_" in option.python and option.python not in _FLAGS:
            flags.append("--" + option.python)
    return tuple(flags)


def with_negative_values(args: Sequence[str]) -> List[str]:
    """``args`` with each Sluice option followed by a negative value (``--buffer-timeout -1ms``)
    written as one argument (``--buffer-timeout=-1ms``), which argparse would otherwise read as an
    option of its own."""
    flags = set(sluice_flags()) - SLUICE_SWITCHES
    out: List[str] = []
    i = 0
    while i < len(args):
        if args[i] in flags and i + 1 < len(args) and re.match(r"-\d", args[i + 1]):
            out.append(f"{args[i]}={args[i + 1]}")
            i += 2
        else:
            out.append(args[i])
            i += 1
    return out


class _AmbiguousPort(argparse.Action):
    """``--port``: refused with the hint to use ``--sluice-port``."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        parser.error(PORT_HINT)


def _add_sluice_options(parser: argparse.ArgumentParser) -> None:
    """Every Sluice option as ``--kebab-case`` (and ``--snake_case``), ``--prometheus`` and ``--yarn``."""
    group = parser.add_argument_group("Sluice's options", _options.UNIT_RULE)
    for option in _options.options().values():
        spellings = [_flag(option.python)]
        if "_" in option.python and option.python not in _FLAGS:
            spellings.append("--" + option.python)
        values = f" (one of {', '.join(option.values)})" if option.values else ""
        group.add_argument(
            *spellings,
            dest=option.python,
            metavar=_METAVARS.get(option.type, option.type.upper()),
            help=f"{option.key}{values}, default {option.default}",
        )
    group.add_argument("--port", nargs="?", action=_AmbiguousPort, help=argparse.SUPPRESS)
    group.add_argument("--prometheus", action="store_true", help="switch on Spark's Prometheus servlet")
    group.add_argument(
        "--yarn",
        action="store_true",
        help="add the pair a YARN application with Sluice needs: "
        + ", ".join(f"{k}={v}" for k, v in YARN_PAIR.items()),
    )


def _chosen_options(parsed: argparse.Namespace) -> Dict[str, object]:
    known = _options.options()
    return {name: value for name, value in vars(parsed).items() if name in known and value is not None}


def sluice_conf(parsed: argparse.Namespace, command: str) -> Dict[str, str]:
    """The Spark settings of the Sluice options in ``parsed``; a bad one ends the command naming it."""
    try:
        conf = settings_conf(_chosen_options(parsed), prometheus=parsed.prometheus, require_unit=True)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"sluice {command}: {e}") from None
    if getattr(parsed, "yarn", False):
        for key, value in YARN_PAIR.items():
            conf.setdefault(key, value)  # with the node service, shuffle tracking stays off
    return conf


def sluice_arguments(
    parser: argparse.ArgumentParser, args: Sequence[str], command: str, switches: AbstractSet[str] = frozenset()
) -> Tuple[argparse.Namespace, List[str]]:
    """Sluice's options (``parser``'s) read from the options before the application in ``args``, and
    what is left for spark-submit: its own options, then the application and the application's
    arguments, untouched. ``switches`` are the command's own options that take no value. ``--port``
    is refused as ambiguous; a Sluice option after the application is left to it, with a warning
    on stderr."""
    options, application = split(with_negative_values(args), set(SWITCHES) | SLUICE_SWITCHES | set(switches))
    for option in options:
        if option.name == "--port":
            raise SystemExit(f"sluice {command}: {PORT_HINT}")
    given = [arg for option in options for arg in option.given]
    parsed, rest = parser.parse_known_args(given)
    for arg in stray_sluice_options(application):
        print(
            f"sluice {command}: warning: {arg} comes after {application[0]}, so it goes to the application, not "
            f"to Sluice; put Sluice's options before {application[0]}",
            file=sys.stderr,
        )
    return parsed, rest + application


def stray_sluice_options(application: Sequence[str]) -> List[str]:
    """The Sluice options among the application's own arguments (after ``app.py``)."""
    flags = set(sluice_flags()) | {"--port"}
    return [arg for arg in application[1:] if arg.partition("=")[0] in flags]


# ---- sluice conf --------------------------------------------------------------------------------


def conf_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice conf",
        allow_abbrev=False,
        description="Prints the Spark settings that switch a job to Sluice. --format args (the default) "
        "prints one spark-submit argument per line (--jars <jar>, then --conf key=value), safe to splice "
        "into a shell unquoted: `spark-submit $(sluice conf) app.py` (a jar path with spaces or glob "
        "characters is printed as a file: URI). --format properties prints `key value` lines for "
        "spark-defaults.conf or spark-submit --properties-file (which then replaces spark-defaults.conf).",
    )
    parser.add_argument("--format", choices=("args", "properties"), default="args", help="default %(default)s")
    _add_sluice_options(parser)
    return parser


def splice_safe(path: str) -> str:
    """``path`` as a word an unquoted ``$(...)`` keeps whole: itself, or a ``file:`` URI with the
    characters that shells split on or expand as globs percent-encoded (Spark reads both)."""
    if not any(c.isspace() or c in "*?[]" for c in path):
        return path
    return Path(path).absolute().as_uri()


def conf_lines(conf: Mapping[str, str], form: str) -> List[str]:
    """``conf`` as ``sluice conf`` prints it in ``form`` (``args`` or ``properties``)."""
    if form == "properties":
        width = max(len(key) for key in conf)
        return [f"{key:<{width}} {value}" for key, value in conf.items()]
    lines = [f"--jars {splice_safe(conf['spark.jars'])}"]
    lines += [f"--conf {key}={value}" for key, value in conf.items() if key != "spark.jars"]
    return lines


def _conf(args: List[str]) -> int:
    parsed = conf_parser().parse_args(with_negative_values(args))
    for line in conf_lines(sluice_conf(parsed, "conf"), parsed.format):
        print(line)
    return 0


# ---- sluice submit ------------------------------------------------------------------------------


def submit_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice submit",
        usage="sluice submit [Sluice options] [spark-submit options] app.py [app arguments]",
        allow_abbrev=False,
        add_help=False,
        description="Runs pyspark's spark-submit with Sluice switched on. Sluice's options (below) go "
        "before the application; every other option before it goes to spark-submit (`sluice submit "
        "--spark-help` lists spark-submit's own); everything after the application is the application's. "
        "Your --jars and --conf spark.plugins=... are merged with Sluice's, not replaced. On a local master "
        "Spark is pinned to loopback and to pyspark's own Spark.",
        epilog="Example: sluice submit --buffer-timeout 10ms --master yarn --executor-memory 4g app.py --day 1",
    )
    parser.add_argument("-h", "--help", action="store_true", help="this help")
    parser.add_argument("--spark-help", action="store_true", help="spark-submit's own help")
    _add_sluice_options(parser)
    return parser


def submit_command_line(spark_submit: str, args: Sequence[str]) -> List[str]:
    """The spark-submit command line of ``sluice submit ARGS``."""
    parsed, rest = sluice_arguments(submit_parser(), args, "submit")
    if parsed.spark_help:
        return [spark_submit, "--help"]
    if not split(rest)[1]:
        raise SystemExit(
            "sluice submit: no application: give app.py (or a jar, or --class with spark-internal) after the "
            "options; `sluice submit --help` shows how"
        )
    return submit_command(spark_submit, sluice_conf(parsed, "submit"), rest)


def _submit(user_args: List[str]) -> int:
    parser = submit_parser()
    options, _ = split(user_args, set(SWITCHES) | SLUICE_SWITCHES)
    if not user_args or any(o.name in ("-h", "--help") for o in options):
        parser.print_help()
        return 0 if user_args else 2
    spark_submit = _spark_submit("submit")
    command = submit_command_line(spark_submit, user_args)
    env = submit_environment(os.environ, command[1:])
    sys.stdout.flush()
    os.execve(command[0], command, env)
    return 1  # not reached: execve replaces this process


# ---- sluice connect-server ----------------------------------------------------------------------

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
    if any(o.name in ("-h", "--help") for o in split(args)[0]):
        connect_server_parser().print_help()
        return 0
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


# ---- sluice doctor, compare, demo, bench, jar ---------------------------------------------------


def _doctor(args: List[str]) -> int:
    from sluice import _doctor

    return _doctor.main(args)


def _compare(args: List[str]) -> int:
    from sluice import compare

    return compare.main(args, _spark_submit("compare"))


def demo_parser() -> argparse.ArgumentParser:
    from sluice import demo

    parser = argparse.ArgumentParser(
        prog="sluice demo",
        description="Runs a shuffle-heavy job on a local two-executor cluster through Sluice, showing its "
        "Spark UI and Sluice tab; with --compare, runs it with `sluice compare` against Spark's sort shuffle.",
    )
    parser.add_argument("--rows", type=int, default=demo.ROWS, help="rows of each input (default %(default)s)")
    parser.add_argument(
        "--partitions", type=int, default=demo.PARTITIONS, help="shuffle partitions (default %(default)s)"
    )
    parser.add_argument("--master", default=demo.MASTER, help="Spark master (default %(default)s)")
    parser.add_argument(
        "--keep-ui",
        type=float,
        nargs="?",
        const=demo.KEEP_UI_SECONDS,
        metavar="SECONDS",
        help="keep the session open afterwards so you can look at the Sluice tab of its UI, until Ctrl-C "
        f"or SECONDS (default {demo.KEEP_UI_SECONDS:.0f})",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="instead, run the job alternately with Spark's sort shuffle and with Sluice (`sluice compare`) "
        "and report medians, spread and whether they differ beyond noise",
    )
    parser.add_argument(
        "--rounds", type=int, default=demo.COMPARE_ROUNDS, help="rounds of --compare (default %(default)s)"
    )
    return parser


def _demo(args: List[str]) -> int:
    from sluice import demo

    parsed = demo_parser().parse_args(args)
    if parsed.rows < 1 or parsed.partitions < 1:
        raise SystemExit("sluice demo: --rows and --partitions must be at least 1")
    if parsed.keep_ui is not None and parsed.keep_ui <= 0:
        raise SystemExit("sluice demo: --keep-ui takes a positive number of seconds")
    if parsed.compare:
        from sluice import compare

        if parsed.keep_ui is not None:
            raise SystemExit("sluice demo: --keep-ui and --compare do not go together (compare runs without a UI)")
        return compare.main(
            demo.compare_arguments(parsed.rows, parsed.partitions, parsed.master, parsed.rounds), _spark_submit("demo")
        )
    demo.main(rows=parsed.rows, partitions=parsed.partitions, master=parsed.master, keep_ui_seconds=parsed.keep_ui)
    return 0


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


SHUFFLE_SERVICE_HELP = """usage: sluice shuffle-service [--properties-file FILE] [--conf KEY=VALUE]... [--host ADDRESS]
       sluice shuffle-service --status HOST:PORT

Runs Sluice's node shuffle service in the foreground until it is stopped (SIGTERM): it serves the map
outputs of every executor on this host that registers with it (spark.sluice.service.enabled), so
executors may go without their outputs. One per host; see docs/node-shuffle-service.md.

  --properties-file FILE  settings, as spark-submit reads them
  --conf KEY=VALUE        one setting (spark.sluice.service.port, spark.sluice.service.applicationTimeout,
                          spark.sluice.service.recoveryDir, spark.authenticate, spark.metrics.conf, ...),
                          repeatable
  --host ADDRESS          the address to bind (default SPARK_LOCAL_IP, else every address)
  --status HOST:PORT      print the metrics of the running service at HOST:PORT as JSON

SLUICE_SERVICE_JAVA_OPTS sets the service's JVM options (default -Xmx512m)."""


def _shuffle_service(args: List[str]) -> int:
    """Replaces this process with the node shuffle service's JVM (or its --status query)."""
    if set(args) & {"-h", "--help"}:
        print(SHUFFLE_SERVICE_HELP)
        return 0
    from sluice._service import service_command

    try:
        command = service_command(args)
    except FileNotFoundError as e:
        raise SystemExit(f"sluice shuffle-service: {e}") from None
    sys.stdout.flush()
    os.execv(command[0], command)
    return 1  # not reached: execv replaces this process


def _jar(args: List[str]) -> int:
    argparse.ArgumentParser(prog="sluice jar", description="Prints the path of the Sluice plugin jar.").parse_args(args)
    try:
        from sluice._jars import jar_path

        print(jar_path())
    except FileNotFoundError as e:
        raise SystemExit(f"sluice: {e}") from None
    return 0


# ---- the command table --------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One ``sluice`` command: its one-line help and the function that runs it on its own arguments."""

    help: str
    run: Callable[[List[str]], int]


COMMANDS: Dict[str, Command] = {
    "jar": Command("print the path of the Sluice plugin jar", _jar),
    "conf": Command("print the settings that switch a job to Sluice (spark-submit arguments or properties)", _conf),
    "submit": Command("run pyspark's spark-submit with Sluice (`sluice submit --help`)", _submit),
    "doctor": Command("check a Spark configuration for what Sluice refuses or what will hurt", _doctor),
    "compare": Command("run your application alternately with the sort shuffle and with Sluice, and compare", _compare),
    "connect-server": Command("run a Spark Connect server with Sluice", _connect_server),
    "demo": Command("run a shuffle-heavy job on a local two-executor cluster through Sluice", _demo),
    "shuffle-service": Command(
        "run Sluice's node shuffle service on this host (docs/node-shuffle-service.md)", _shuffle_service
    ),
    "bench": Command("benchmarks against Spark's own shuffles (needs the sluice-bench distribution)", _bench),
}


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [
        "usage: sluice [--version] COMMAND [arguments]",
        "",
        "Sluice: Flink's network stack as a Spark shuffle. Commands (`sluice COMMAND --help` for each):",
    ]
    lines += [f"  {name:<{width}}  {command.help}" for name, command in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        print(_usage())
        return 0
    if args[:1] == ["--version"]:
        print(f"sluice {__version__} (spark-sluice)")
        return 0
    if not args or args[0] not in COMMANDS:
        what = f"unknown command {args[0]!r}" if args else "no command"
        print(f"{_usage()}\n\nsluice: {what}", file=sys.stderr)
        return 2
    return COMMANDS[args[0]].run(args[1:])


if __name__ == "__main__":
    sys.exit(main())
