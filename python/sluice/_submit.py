"""spark-submit's command line as ``sluice submit`` and ``sluice connect-server`` read and extend it.

One walker (:func:`split`) reads spark-submit's options the way SparkSubmitOptionParser does:
every option takes a value (the next argument, or after ``=``) except the switches, and the first
argument that is not an option is the application, after which everything is the application's
own. Everything else here (the master, the deploy mode, the merged command, the environment) is
read from what the walker returns.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Dict, List, Mapping, Optional, Sequence, Tuple

from sluice.config import APPENDED_KEYS, append_to_list

# spark-submit's options that take no value (SparkSubmitOptionParser's switches).
SWITCHES = frozenset(
    ["--verbose", "-v", "--help", "-h", "--version", "--supervise", "--usage-error", "--load-spark-defaults"]
)

# Masters whose executors (and, in cluster deploy mode, driver) run on other machines' Pythons: the
# submitting machine's interpreter path means nothing there.
_REMOTE_PYTHON_MASTERS = ("yarn", "k8s://")


@dataclass(frozen=True)
class Option:
    """One option before the application: its name, its value ('' for a switch) and its arguments as given."""

    name: str
    value: str
    given: Tuple[str, ...]

    def conf(self) -> Optional[Tuple[str, str]]:
        """``(key, value)`` when this is a ``--conf key=value`` (or ``-c``), else None."""
        if self.name not in ("--conf", "-c"):
            return None
        key, _, value = self.value.partition("=")
        return key, value


def split(args: Sequence[str], switches: AbstractSet[str] = SWITCHES) -> Tuple[List[Option], List[str]]:
    """The options before the application, and the application with its own arguments (maybe none).

    ``switches`` are the options that take no value (spark-submit's, plus any of the caller's own).
    """
    options: List[Option] = []
    i = 0
    while i < len(args) and args[i].startswith("-"):
        name, has_inline, inline = args[i].partition("=")
        takes_value = name not in switches and not has_inline
        value = inline if has_inline else (args[i + 1] if takes_value and i + 1 < len(args) else "")
        step = 2 if takes_value else 1
        options.append(Option(name, value, tuple(args[i : i + step])))
        i += step
    return options, list(args[i:])


def submit_arguments(conf: Mapping[str, str]) -> List[str]:
    """``conf`` as spark-submit arguments: ``--jars <jar>``, then ``--conf key=value`` pairs."""
    args = ["--jars", conf["spark.jars"]]
    for key, value in conf.items():
        if key != "spark.jars":
            args += ["--conf", f"{key}={value}"]
    return args


def submit_command(spark_submit: str, conf: Mapping[str, str], user_args: Sequence[str]) -> List[str]:
    """The spark-submit command line running ``user_args`` with Sluice.

    Sluice's arguments come first; the user's own ``--jars``, ``--conf spark.jars=`` and
    ``--conf spark.plugins=`` (which would otherwise replace Sluice's) are merged into them.
    """
    merged = dict(conf)
    user_jars: List[str] = []
    kept: List[str] = []
    options, application = split(user_args)
    for option in options:
        pair = option.conf()
        if option.name == "--jars":
            user_jars.append(option.value)
        elif pair is not None and pair[0] in APPENDED_KEYS:
            key, listed = pair
            if key == "spark.jars":
                user_jars.append(listed)
            else:
                merged[key] = append_to_list(listed, [merged[key]])
        else:
            kept += option.given
    merged["spark.jars"] = append_to_list(",".join(user_jars), [conf["spark.jars"]])
    return [spark_submit] + submit_arguments(merged) + kept + application


# spark-submit's options that set a Spark setting, and the key each sets (SparkSubmitArguments).
FLAG_KEYS = {
    "--master": "spark.master",
    "--deploy-mode": "spark.submit.deployMode",
    "--name": "spark.app.name",
    "--jars": "spark.jars",
    "--packages": "spark.jars.packages",
    "--py-files": "spark.submit.pyFiles",
    "--files": "spark.files",
    "--archives": "spark.archives",
    "--driver-memory": "spark.driver.memory",
    "--driver-cores": "spark.driver.cores",
    "--driver-class-path": "spark.driver.extraClassPath",
    "--driver-java-options": "spark.driver.extraJavaOptions",
    "--driver-library-path": "spark.driver.extraLibraryPath",
    "--executor-memory": "spark.executor.memory",
    "--executor-cores": "spark.executor.cores",
    "--num-executors": "spark.executor.instances",
    "--total-executor-cores": "spark.cores.max",
    "--queue": "spark.yarn.queue",
}


@dataclass(frozen=True)
class ResolvedConf:
    """A Spark configuration as spark-submit resolves it from its command line and files.

    ``conf`` is the result; ``from_file`` what the properties file (``--properties-file``, else
    ``spark-defaults.conf``) gave, and ``from_command_line`` what ``--conf`` and spark-submit's own
    flags gave, which win over the file (so a user's ``--jars`` replaces the file's ``spark.jars``).
    ``files`` are the files read, ``application`` the application (``app.py``, a jar, or
    ``spark-internal`` / None for a main class of Spark's own).
    """

    conf: Dict[str, str]
    from_file: Dict[str, str]
    from_command_line: Dict[str, str]
    files: Tuple[str, ...]
    application: Optional[str]


def defaults_file(environ: Mapping[str, str]) -> Optional[str]:
    """The ``spark-defaults.conf`` spark-submit reads: in ``SPARK_CONF_DIR``, else ``SPARK_HOME/conf``."""
    conf_dir = environ.get("SPARK_CONF_DIR") or (
        os.path.join(environ["SPARK_HOME"], "conf") if environ.get("SPARK_HOME") else None
    )
    return os.path.join(conf_dir, "spark-defaults.conf") if conf_dir else None


def resolve_conf(user_args: Sequence[str], environ: Mapping[str, str]) -> ResolvedConf:
    """The configuration spark-submit would run ``user_args`` with: its flags and ``--conf`` pairs
    over the properties file (``--properties-file``, which replaces ``spark-defaults.conf`` unless
    ``--load-spark-defaults`` is given; else ``spark-defaults.conf``), as SparkSubmitArguments does."""
    options, application = split(user_args)
    from_conf: Dict[str, str] = {}
    from_flags: Dict[str, str] = {}
    properties_file: Optional[str] = None
    load_defaults = False
    for option in options:
        pair = option.conf()
        if pair is not None:
            from_conf[pair[0]] = pair[1]
        elif option.name == "--properties-file":
            properties_file = option.value
        elif option.name == "--load-spark-defaults":
            load_defaults = True
        elif option.name in FLAG_KEYS:
            from_flags[FLAG_KEYS[option.name]] = option.value
    files: List[str] = []
    defaults = defaults_file(environ)
    if properties_file is None or load_defaults:
        files += [defaults] if defaults and os.path.isfile(defaults) else []
    if properties_file is not None:
        files.append(properties_file)
    from_file: Dict[str, str] = {}
    for path in files:
        from_file.update(properties(path))
    command_line = {**from_conf, **from_flags}
    return ResolvedConf(
        conf={**from_file, **command_line},
        from_file=from_file,
        from_command_line=command_line,
        files=tuple(files),
        application=application[0] if application else None,
    )


def submit_master(user_args: Sequence[str], environ: Mapping[str, str]) -> str:
    """The master spark-submit will use, found the way spark-submit finds it.

    ``--master`` (or ``--conf spark.master=``) before the application, else ``spark.master`` in
    ``--properties-file`` or in the ``spark-defaults.conf`` of ``SPARK_CONF_DIR`` / ``SPARK_HOME``,
    else the ``MASTER`` environment variable, else ``local[*]``.
    """
    return resolve_conf(user_args, environ).conf.get("spark.master") or environ.get("MASTER") or "local[*]"


def deploy_mode(user_args: Sequence[str], environ: Mapping[str, str]) -> str:
    """``client`` or ``cluster``, from ``--deploy-mode`` or ``spark.submit.deployMode`` (default client)."""
    return resolve_conf(user_args, environ).conf.get("spark.submit.deployMode") or "client"


def properties(path: str) -> Dict[str, str]:
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
    its ``conf/``) is how the user's cluster installation is found. Python is this interpreter
    (which has pyspark and Sluice) wherever it runs on this machine's file system: everywhere on
    local and standalone masters, the driver only on YARN and Kubernetes in client mode, nothing
    in their cluster mode (their hosts and images have Pythons of their own).
    """
    env = dict(environ)
    master = submit_master(user_args, environ)
    if not is_cluster_master(master):
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        env.pop("SPARK_HOME", None)
    if not master.startswith(_REMOTE_PYTHON_MASTERS):
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", env["PYSPARK_PYTHON"])
    elif deploy_mode(user_args, environ) == "client":
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return env
