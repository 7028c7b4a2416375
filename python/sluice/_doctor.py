"""``sluice doctor`` and :func:`sluice.doctor`: a Spark configuration checked for what Sluice would
refuse at start-up and what will hurt, each finding with its fix.

The configuration is read the way spark-submit reads it (its flags and ``--conf`` over
``--properties-file``, else over ``spark-defaults.conf`` of ``SPARK_CONF_DIR`` / ``SPARK_HOME``),
or taken from a live session. What the JVM refuses or warns about is checked with the JVM's own
rules, from the tables the build generates: the option table (``_options.json``: every
``spark.sluice.*`` value and the rules between them) and the Spark settings table
(``_spark_rules.json``: refused are the external shuffle service, push-based shuffle, dynamic
allocation without shuffle tracking, the decommissioning fallback storage, the codec, the I/O
encryption cipher, and the Spark release line; warned about is shuffle tracking left on beside the
node shuffle service). What will hurt is checked here: memory overhead against Sluice's network
memory for the application's kind, the port range against executors per node, plugin and jar
lists that a user's flags replace, local dirs, authentication and encryption, the file-descriptor
limit.
Spark's private APIs, which Sluice's start-up also checks, can only be checked by starting it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import textwrap
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from sluice import _options
from sluice._submit import ResolvedConf, resolve_conf, split, submit_command
from sluice.config import PLUGIN, SHUFFLE_MANAGER

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ERROR, WARNING, NOTE = "error", "warning", "note"
_SEVERITIES = (ERROR, WARNING, NOTE)

_RULES = Path(__file__).resolve().parent / "_spark_rules.json"

# Exit status of `sluice doctor`, for CI.
EXIT_CLEAN, EXIT_ERRORS, EXIT_WARNINGS = 0, 1, 2

# Spark's memory overhead (spark.executor.memoryOverheadFactor's doc and the Kubernetes feature steps
# of Spark 4.3): 10 % of the heap, at least spark.executor.minMemoryOverhead, except 40 % for non-JVM
# (Python, R) applications on Kubernetes.
OVERHEAD_FACTOR = 0.10
K8S_NON_JVM_OVERHEAD_FACTOR = 0.40
MIN_OVERHEAD = "384m"

# The report's width.
WIDTH = 100

# File descriptors beside Sluice's open partition files: connections, jars, Spark's own files.
FD_MARGIN = 1024


@dataclass(frozen=True)
class Finding:
    """One thing wrong or risky: its severity (``error``: Sluice refuses it or the application
    fails; ``warning``: it will hurt; ``note``: worth knowing), the setting(s) it is about, the
    problem and its fix."""

    severity: str
    setting: str
    problem: str
    fix: str


@dataclass(frozen=True)
class Configuration:
    """A Spark configuration as the checks read it: the settings, and (from a command line) what came
    from the file and what from the command line, the files read, the application."""

    conf: Dict[str, str]
    from_file: Dict[str, str]
    from_command_line: Dict[str, str]
    files: Tuple[str, ...]
    kind: Optional[str]
    spark_version: Optional[str]
    spark_version_source: str

    @property
    def master(self) -> str:
        return self.conf.get("spark.master", "local[*]")


def application_kind(application: Optional[str]) -> Optional[str]:
    """``python`` for ``app.py``, ``jvm`` for a jar or a main class of Spark's own, None for none."""
    if application is None:
        return None
    return "python" if application.endswith(".py") else "jvm"


@lru_cache(maxsize=1)
def spark_rules() -> Dict[str, Any]:
    """The generated table of Spark settings Sluice refuses (``_spark_rules.json``)."""
    table: Dict[str, Any] = json.loads(_RULES.read_text(encoding="utf-8"))
    return table


def _holds(condition: Mapping[str, Any], conf: Mapping[str, str]) -> bool:
    value = conf.get(str(condition["key"]), str(condition["default"])).strip()
    return (re.fullmatch(str(condition["pattern"]), value) is not None) != bool(condition["negate"])


def _substitute(text: str, conf: Mapping[str, str]) -> str:
    return re.sub(r"\$\{([^}]+)\}", lambda m: conf.get(m.group(1), ""), text)


# ---- reading a configuration ---------------------------------------------------------------------


def _installed_spark_version(conf: Mapping[str, str], environ: Mapping[str, str]) -> Tuple[Optional[str], str]:
    """The Spark a submission would run on: the cluster's (``SPARK_HOME``) for a cluster master when
    set, else pyspark's own."""
    master = conf.get("spark.master", "local[*]")
    home = environ.get("SPARK_HOME")
    if home and not master.startswith("local"):
        release = Path(home, "RELEASE")
        if release.is_file():
            found = re.search(r"Spark (\d+\.\d+\.\d+\S*)", release.read_text(errors="replace"))
            if found:
                return found.group(1), str(release)
        cores = sorted(Path(home, "jars").glob("spark-core_*-*.jar"))
        if cores:
            return cores[-1].stem.split("-", 1)[1], str(cores[-1])
        return None, f"SPARK_HOME={home} (no RELEASE file or spark-core jar)"
    try:
        import pyspark

        return str(pyspark.__version__), f"pyspark at {Path(pyspark.__file__).parent}"
    except ImportError:
        return None, "no pyspark"


def from_command_line(user_args: Sequence[str], environ: Mapping[str, str]) -> Configuration:
    """The configuration spark-submit would run ``user_args`` with (as ``sluice doctor`` reads it)."""
    resolved: ResolvedConf = resolve_conf(user_args, environ)
    conf = dict(resolved.conf)
    if "spark.master" not in conf and environ.get("MASTER"):
        conf["spark.master"] = environ["MASTER"]
    version, source = _installed_spark_version(conf, environ)
    return Configuration(
        conf,
        resolved.from_file,
        resolved.from_command_line,
        resolved.files,
        application_kind(resolved.application),
        version,
        source,
    )


def from_session(spark: "SparkSession") -> Configuration:
    """A running session's configuration (a PySpark application: its kind is Python)."""
    try:
        conf = {str(k): str(v) for k, v in spark.sparkContext.getConf().getAll()}
    except Exception:  # a Spark Connect session: no SparkContext, its settings through spark.conf
        conf = {str(k): str(v) for k, v in spark.conf.getAll.items()}
    return Configuration(conf, {}, conf, (), "python", str(spark.version), "the running session")


# ---- the checks --------------------------------------------------------------------------------


def _sluice_on(c: Configuration) -> bool:
    return c.conf.get("spark.shuffle.manager", "").strip() == SHUFFLE_MANAGER


def check_switched_on(c: Configuration) -> List[Finding]:
    if _sluice_on(c):
        return []
    current = c.conf.get("spark.shuffle.manager", "sort (Spark's default)")
    return [
        Finding(
            ERROR,
            "spark.shuffle.manager",
            f"Sluice is not switched on: spark.shuffle.manager is {current}, so nothing below runs on Sluice.",
            "Run with `sluice submit` (`sluice doctor --submit ...` checks what it runs), add the lines of "
            "`sluice conf --format properties` to spark-defaults.conf, or set spark.shuffle.manager="
            f"{SHUFFLE_MANAGER} with Sluice's jar on the class path.",
        )
    ]


def check_spark_version(c: Configuration) -> List[Finding]:
    line = str(spark_rules()["spark_line"])
    if c.spark_version is None:
        return [
            Finding(
                NOTE,
                "Spark version",
                f"Could not tell which Spark will run ({c.spark_version_source}); Sluice runs on Spark {line}.x only.",
                "Set SPARK_HOME to the cluster's Spark installation to check its version.",
            )
        ]
    if ".".join(c.spark_version.split(".")[:2]) == line:
        return []
    return [
        Finding(
            ERROR,
            "Spark version",
            f"This is Spark {c.spark_version} ({c.spark_version_source}), but Sluice is built for Spark {line}.x: "
            "every application stops at start-up (`was built for Spark`).",
            f"Install the Sluice release built for Spark {'.'.join(c.spark_version.split('.')[:2])}, or run on "
            f"Spark {line}.",
        )
    ]


def check_refused_settings(c: Configuration) -> List[Finding]:
    """The JVM's start-up refusals (errors) and warnings (``SparkSettingRules``), from the generated
    table."""
    found: List[Finding] = []
    conf = dict(c.conf)
    conf.setdefault("spark.master", c.master)
    for severity, table in ((ERROR, "rules"), (WARNING, "warnings")):
        for rule in spark_rules()[table]:
            if all(_holds(condition, conf) for condition in rule["when"]):
                keys = ", ".join(str(cond["key"]) for cond in rule["when"] if cond["key"] != "spark.master")
                problem, fix = _substitute(rule["problem"], conf), _substitute(rule["fix"], conf)
                found.append(Finding(severity, keys, problem, fix))
    return found


def check_sluice_options(c: Configuration) -> List[Finding]:
    """Every ``spark.sluice.*`` value, and the rules between them, as the JVM checks them."""
    found: List[Finding] = []
    valid: Dict[str, str] = {}
    for key, raw in c.conf.items():
        if not key.startswith("spark.sluice."):
            continue
        try:
            option = _options.by_key(key)
            valid[key] = _options.render(option, raw)
        except ValueError as e:
            found.append(
                Finding(
                    ERROR,
                    key,
                    f"{e}: executors refuse to start.",
                    "Fix the value or the key (docs/configuration.md lists every setting and its valid values).",
                )
            )
    try:
        _options.check_combinations(valid)
    except ValueError as e:
        found.append(Finding(ERROR, "spark.sluice.*", f"{e}: executors refuse to start.", "Raise the setting named."))
    return found


def _listed(value: Optional[str]) -> List[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _is_sluice_jar(entry: str) -> bool:
    name = entry.replace("\\", "/").rsplit("/", 1)[-1]
    return name.startswith("sluice") and name.endswith(".jar") or name == "*" and "sluice" in entry


def check_jars_and_plugins(c: Configuration, environ: Mapping[str, str]) -> List[Finding]:
    """The jar on both class paths and the plugin in Spark's plugin lists, and a user's flags that
    replace the file's lists (``--jars``, ``--conf spark.plugins=``)."""
    if not _sluice_on(c):
        return []
    found: List[Finding] = []
    class_path = [
        p
        for key in ("spark.driver.extraClassPath", "spark.executor.extraClassPath")
        for p in c.conf.get(key, "").split(os.pathsep)
    ]
    on_class_path = any(_is_sluice_jar(p) for p in class_path if p)
    home = environ.get("SPARK_HOME")
    in_spark_jars_dir = bool(home and list(Path(home, "jars").glob("sluice*.jar")))
    in_jars = any(_is_sluice_jar(j) for j in _listed(c.conf.get("spark.jars")))
    file_jars = _listed(c.from_file.get("spark.jars"))
    replaced_jars = "spark.jars" in c.from_command_line and any(_is_sluice_jar(j) for j in file_jars) and not in_jars
    if not (on_class_path or in_spark_jars_dir or in_jars):
        why = (
            "the command line's --jars (or --conf spark.jars=) replaced the file's spark.jars, which held Sluice's jar"
            if replaced_jars
            else "Sluice's jar is in neither spark.jars nor spark.driver/executor.extraClassPath"
        )
        found.append(
            Finding(
                ERROR,
                "spark.jars",
                f"{why}: the application fails at start with ClassNotFoundException: {SHUFFLE_MANAGER}.",
                "Put the jar on the class path where users' flags cannot replace it: spark.driver.extraClassPath "
                "and spark.executor.extraClassPath in spark-defaults.conf (the same path on every host, or in the "
                "image), or SPARK_HOME/jars; or add it to --jars (`sluice submit` merges it for you).",
            )
        )
    elif in_jars and not on_class_path and not in_spark_jars_dir and c.from_file.get("spark.jars"):
        found.append(
            Finding(
                WARNING,
                "spark.jars",
                "Sluice's jar comes from spark-defaults.conf's spark.jars: a user's --jars (or --conf spark.jars=) "
                f"replaces that list, and the application then fails at start with ClassNotFoundException: "
                f"{SHUFFLE_MANAGER}.",
                "Put the jar on spark.driver.extraClassPath and spark.executor.extraClassPath instead (the same "
                "path on every host, or in the image), which users' --jars do not replace.",
            )
        )
    plugins = _listed(c.conf.get("spark.plugins"))
    default_list = _listed(c.conf.get("spark.plugins.defaultList"))
    if PLUGIN not in plugins + default_list:
        replaced = "spark.plugins" in c.from_command_line and PLUGIN in _listed(c.from_file.get("spark.plugins"))
        why = (
            "the command line's --conf spark.plugins= replaced the file's spark.plugins, which held Sluice's plugin"
            if replaced
            else "Sluice's plugin is in neither spark.plugins nor spark.plugins.defaultList"
        )
        found.append(
            Finding(
                WARNING,
                "spark.plugins",
                f"{why}: shuffles run on Sluice, but without its tab, metrics (sluice.metrics, Spark's metrics "
                "system), application summary and executor-start preloading.",
                f"Put {PLUGIN} in spark.plugins.defaultList in spark-defaults.conf: Spark adds that list to "
                "spark.plugins, which stays the users'.",
            )
        )
    elif PLUGIN in _listed(c.from_file.get("spark.plugins")) and PLUGIN not in default_list:
        found.append(
            Finding(
                WARNING,
                "spark.plugins",
                "Sluice's plugin comes from spark-defaults.conf's spark.plugins: a user's --conf spark.plugins=... "
                "replaces it, silently dropping Sluice's tab and metrics.",
                f"Move {PLUGIN} to spark.plugins.defaultList, which Spark adds to the users' spark.plugins.",
            )
        )
    return found


_SIZE = re.compile(r"^\s*(\d+)\s*([kmgtp]?)i?b?\s*$", re.IGNORECASE)
_SHIFT = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40, "p": 50}


def spark_mib(value: str, default_unit: str = "m") -> Optional[int]:
    """A Spark memory size in MiB (a bare number is in ``default_unit``, as Spark's memory settings
    read it); None when it is not a size."""
    m = _SIZE.match(value)
    if not m:
        return None
    unit = (m.group(2) or default_unit).lower()
    return (int(m.group(1)) << _SHIFT[unit]) >> 20


def _cluster_manager(master: str) -> str:
    if master.startswith("k8s://"):
        return "kubernetes"
    if master == "yarn":
        return "yarn"
    if master.startswith("local"):
        return "local"
    return "standalone"


def check_memory_overhead(c: Configuration) -> List[Finding]:
    """Sluice's network memory (direct, beside the heap) against the container's overhead, whose
    default Spark sizes for the application's kind without counting Sluice."""
    manager = _cluster_manager(c.master)
    if manager not in ("yarn", "kubernetes") or not _sluice_on(c):
        return []
    conf = c.conf
    heap = spark_mib(conf.get("spark.executor.memory", "1g")) or 1024
    network = _options.options()["network_memory"]
    _, network_bytes = _options._parse_bytes(network, conf.get(network.key, network.default))
    network_mib = math.ceil((network_bytes or 0) / (1 << 20))
    kind = c.kind or "python"
    assumed = "" if c.kind else " (assumed: give app.py or the jar to check for your application's kind)"
    if "spark.executor.memoryOverheadFactor" in conf:
        factor, source = float(conf["spark.executor.memoryOverheadFactor"]), "spark.executor.memoryOverheadFactor"
    elif manager == "kubernetes" and "spark.kubernetes.memoryOverheadFactor" in conf:
        factor, source = float(conf["spark.kubernetes.memoryOverheadFactor"]), "spark.kubernetes.memoryOverheadFactor"
    elif manager == "kubernetes" and kind == "python":
        factor, source = K8S_NON_JVM_OVERHEAD_FACTOR, "Spark's factor for non-JVM applications on Kubernetes"
    else:
        factor, source = OVERHEAD_FACTOR, "Spark's default factor"
    minimum = spark_mib(conf.get("spark.executor.minMemoryOverhead", MIN_OVERHEAD)) or 384
    spark_own = max(int(heap * factor), minimum)
    needed = spark_own + network_mib
    on = "YARN" if manager == "yarn" else "Kubernetes"
    what = f"a {'Python' if kind == 'python' else 'JVM'} application{assumed} on {on}"
    kill = "YARN kills the container" if manager == "yarn" else "Kubernetes kills the pod (OOMKilled)"
    explicit = conf.get("spark.executor.memoryOverhead")
    if explicit is not None:
        overhead = spark_mib(explicit)
        if overhead is None or overhead >= needed:
            return []
        problem = (
            f"spark.executor.memoryOverhead={explicit} leaves {overhead - network_mib} MiB beside Sluice's network "
            f"memory ({network.key}={network_mib}m, off the heap), where Spark itself reserves {spark_own} MiB for "
            f"{what} ({factor:.2f} × {heap} MiB heap, {source}, at least {minimum} MiB): when it runs out, {kill}."
        )
    else:
        problem = (
            f"The executors' memory overhead is Spark's default for {what}, {spark_own} MiB ({factor:.2f} × {heap} "
            f"MiB heap, {source}, at least {minimum} MiB), which does not count Sluice's network memory "
            f"({network.key}={network_mib}m, off the heap): when the overhead runs out, {kill}."
        )
    return [
        Finding(
            WARNING,
            "spark.executor.memoryOverhead",
            problem,
            f"Set spark.executor.memoryOverhead={needed}m (Spark's {spark_own} MiB + Sluice's {network_mib} MiB).",
        )
    ]


def check_port_range(c: Configuration, executors_per_node: Optional[int]) -> List[Finding]:
    """spark.sluice.network.port + spark.port.maxRetries: how many executors fit on one node."""
    port_option = _options.options()["port"]
    try:
        base = int(c.conf.get(port_option.key, port_option.default))
    except ValueError:
        return []  # reported by check_sluice_options
    if base == 0 or not _sluice_on(c):
        return []
    rules = spark_rules()
    key = str(rules["port_max_retries_key"])
    try:
        retries = int(c.conf.get(key, str(rules["port_max_retries_default"])))
    except ValueError:
        retries = int(rules["port_max_retries_default"])
    capacity = retries + 1
    last = base + retries
    span = f"{port_option.key}={base} with {key}={retries} gives {capacity} ports ({base}-{last})"
    fix = (
        f"Raise {key} to at least the executors per node minus one (and open that range), or set "
        f"{port_option.key}=0 (any free port) where no firewall needs a fixed range."
    )
    found: List[Finding] = []
    if base < 1024:
        found.append(
            Finding(
                WARNING,
                port_option.key,
                f"{span}: ports below 1024 need root or CAP_NET_BIND_SERVICE, which executors rarely have.",
                f"Use a base of 1024 or more. {fix}",
            )
        )
    if _cluster_manager(c.master) == "kubernetes":
        return found  # one executor per pod, each with its own address
    if executors_per_node is not None and executors_per_node > capacity:
        found.append(
            Finding(
                ERROR,
                f"{port_option.key}, {key}",
                f"{span}: at most {capacity} Sluice executors fit on one node, across all applications that use "
                f"this base, but {executors_per_node} are expected; the next one fails to bind "
                "(`Sluice's server could not bind`).",
                fix,
            )
        )
    elif executors_per_node is None:
        found.append(
            Finding(
                NOTE,
                f"{port_option.key}, {key}",
                f"{span}: at most {capacity} Sluice executors fit on one node, across all applications that use "
                "this base; one more fails to bind.",
                f"Pass --executors-per-node N to check against your nodes. {fix}",
            )
        )
    return found


def _filesystem_type(path: Path) -> Optional[str]:
    """The file system type of ``path``'s mount (Linux's /proc/mounts), None elsewhere."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    best, kind = "", None
    resolved = str(path.resolve())
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and (resolved == parts[1] or resolved.startswith(parts[1].rstrip("/") + "/")):
            if len(parts[1]) >= len(best):
                best, kind = parts[1], parts[2]
    return kind


def check_local_dirs(c: Configuration, environ: Mapping[str, str]) -> List[Finding]:
    """Where Sluice's blocking partition files go (Spark's local dirs): existing, writable, on disk."""
    manager = _cluster_manager(c.master)
    found: List[Finding] = []
    if manager == "kubernetes":
        if c.conf.get("spark.kubernetes.local.dirs.tmpfs", "false").strip().lower() == "true":
            found.append(
                Finding(
                    WARNING,
                    "spark.kubernetes.local.dirs.tmpfs",
                    "Local dirs are in memory (tmpfs): Sluice's partition files, like the sort shuffle's, count "
                    "against the pod's memory limit, and a large shuffle gets the pod OOMKilled.",
                    "Set spark.kubernetes.local.dirs.tmpfs=false, or size spark.executor.memoryOverhead for the "
                    "shuffle's files on top.",
                )
            )
        return found
    if manager == "yarn":
        if "spark.local.dir" in c.conf:
            found.append(
                Finding(
                    NOTE,
                    "spark.local.dir",
                    "On YARN executors use the NodeManager's local dirs (yarn.nodemanager.local-dirs); "
                    "spark.local.dir is ignored there.",
                    "Set the NodeManagers' yarn.nodemanager.local-dirs to fast local disks.",
                )
            )
        return found
    dirs = _listed(environ.get("SPARK_LOCAL_DIRS") or c.conf.get("spark.local.dir") or "/tmp")
    where = "on this machine" + ("" if manager == "local" else " (the workers' may differ)")
    for d in dirs:
        path = Path(d)
        if not path.is_dir():
            found.append(
                Finding(
                    ERROR if manager == "local" else WARNING,
                    "spark.local.dir",
                    f"The local dir {d} does not exist {where}: executors cannot write shuffle files there.",
                    "Create it, or point spark.local.dir (SPARK_LOCAL_DIRS) at a local disk.",
                )
            )
            continue
        if not os.access(path, os.W_OK | os.X_OK):
            found.append(
                Finding(
                    ERROR if manager == "local" else WARNING,
                    "spark.local.dir",
                    f"The local dir {d} is not writable {where}.",
                    "Give the user Spark runs as write access, or point spark.local.dir elsewhere.",
                )
            )
            continue
        if _filesystem_type(path) == "tmpfs":
            found.append(
                Finding(
                    WARNING,
                    "spark.local.dir",
                    f"The local dir {d} is a tmpfs {where}: shuffle and spill files live in memory.",
                    "Point spark.local.dir (SPARK_LOCAL_DIRS) at a local disk.",
                )
            )
        free = shutil.disk_usage(path).free
        if free < (1 << 30):
            found.append(
                Finding(
                    WARNING,
                    "spark.local.dir",
                    f"The local dir {d} has {free >> 20} MiB free {where}: a shuffle larger than that fails.",
                    "Free space, or point spark.local.dir at a larger disk.",
                )
            )
    return found


def _true(conf: Mapping[str, str], key: str) -> bool:
    return conf.get(key, "false").strip().lower() == "true"


def check_security(c: Configuration) -> List[Finding]:
    """spark.authenticate, spark.network.crypto.enabled and spark.ssl.rpc.* as Sluice's connections use them."""
    conf = c.conf
    manager = _cluster_manager(c.master)
    auth = _true(conf, "spark.authenticate")
    crypto = _true(conf, "spark.network.crypto.enabled")
    tls = _true(conf, "spark.ssl.rpc.enabled")
    found: List[Finding] = []
    if manager == "local":
        return found
    if (
        auth
        and manager in ("standalone",)
        and not (conf.get("spark.authenticate.secret") or conf.get("spark.authenticate.secret.file"))
    ):
        found.append(
            Finding(
                ERROR,
                "spark.authenticate",
                "spark.authenticate=true without spark.authenticate.secret: outside YARN and Kubernetes, which "
                "generate the secret, Spark refuses to start.",
                "Set spark.authenticate.secret (or spark.authenticate.secret.file) on the driver and every worker.",
            )
        )
    if crypto and not auth:
        found.append(
            Finding(
                WARNING,
                "spark.network.crypto.enabled",
                "spark.network.crypto.enabled=true has no effect without spark.authenticate=true: connections, "
                "Sluice's included, travel in clear text.",
                "Set spark.authenticate=true as well.",
            )
        )
    if tls:
        keys = conf.get("spark.ssl.rpc.keyStore") or conf.get("spark.ssl.keyStore")
        openssl = _true(conf, "spark.ssl.rpc.openSslEnabled") or _true(conf, "spark.ssl.openSslEnabled")
        pem = (conf.get("spark.ssl.rpc.privateKey") or conf.get("spark.ssl.privateKey")) and (
            conf.get("spark.ssl.rpc.certChain") or conf.get("spark.ssl.certChain")
        )
        if not keys and not (openssl and pem):
            found.append(
                Finding(
                    ERROR,
                    "spark.ssl.rpc.enabled",
                    "spark.ssl.rpc.enabled=true without spark.ssl.rpc.keyStore (or privateKey and certChain with "
                    "openSslEnabled): executors refuse to start (`Sluice's shuffle connections cannot be TLS "
                    "without keys`).",
                    "Set spark.ssl.rpc.keyStore and its password (or spark.ssl.keyStore), the same on every host.",
                )
            )
        if not auth:
            found.append(
                Finding(
                    WARNING,
                    "spark.ssl.rpc.enabled",
                    "TLS without spark.authenticate encrypts the shuffle but lets any TLS client read it: Spark's "
                    "TLS authenticates only the server.",
                    "Set spark.authenticate=true as well (docs/security.md).",
                )
            )
    if not auth and not tls:
        found.append(
            Finding(
                WARNING,
                "spark.authenticate",
                "spark.authenticate is off: every executor's Sluice server serves any shuffle partition to any "
                "client that reaches it, as Spark's own block transfer service does then.",
                "Where untrusted hosts can reach executors, set spark.authenticate=true (and "
                "spark.network.crypto.enabled=true or spark.ssl.rpc.enabled=true to encrypt), or keep the "
                "executors' ports behind a firewall (docs/security.md).",
            )
        )
    elif auth and not crypto and not tls:
        found.append(
            Finding(
                NOTE,
                "spark.network.crypto.enabled",
                "Connections are authenticated but not encrypted: shuffle data travels in clear text.",
                "Set spark.network.crypto.enabled=true (or spark.ssl.rpc.enabled=true) to encrypt it.",
            )
        )
    return found


def check_file_descriptors(c: Configuration, limit: Optional[int]) -> List[Finding]:
    """The soft limit of open files (on this machine) against Sluice's open partition files."""
    if limit is None or not _sluice_on(c):
        return []
    option = _options.options()["max_open_partition_files"]
    try:
        files = int(c.conf.get(option.key, option.default))
    except ValueError:
        return []
    needed = files + FD_MARGIN
    if limit >= needed:
        return []
    manager = _cluster_manager(c.master)
    where = (
        "this machine's"
        if manager in ("local", "standalone")
        else "this machine's (the NodeManagers' or the container runtime's apply on the cluster)"
    )
    return [
        Finding(
            WARNING if manager in ("local", "standalone") else NOTE,
            "open files",
            f"{where} limit of open files is {limit}: an executor may keep {files} partition files open "
            f"({option.key}) beside its connections and Spark's own files, and fails with `Too many open files`.",
            f"Raise the limit to at least {needed} (ulimit -n; LimitNOFILE= in the worker's systemd unit; "
            f"/etc/security/limits.conf), or lower {option.key}.",
        )
    ]


def _open_files_limit() -> Optional[int]:
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return None if soft == resource.RLIM_INFINITY else int(soft)
    except (ImportError, OSError, ValueError):
        return None


def check(
    c: Configuration,
    environ: Mapping[str, str],
    *,
    executors_per_node: Optional[int] = None,
    open_files_limit: Optional[int] = None,
) -> List[Finding]:
    """Every finding of ``c``, errors first."""
    checks: List[Callable[[], List[Finding]]] = [
        lambda: check_switched_on(c),
        lambda: check_spark_version(c),
        lambda: check_refused_settings(c),
        lambda: check_sluice_options(c),
        lambda: check_jars_and_plugins(c, environ),
        lambda: check_memory_overhead(c),
        lambda: check_port_range(c, executors_per_node),
        lambda: check_local_dirs(c, environ),
        lambda: check_security(c),
        lambda: check_file_descriptors(c, open_files_limit),
    ]
    found = [f for run in checks for f in run()]
    return sorted(found, key=lambda f: _SEVERITIES.index(f.severity))


def doctor(spark: "SparkSession", *, executors_per_node: Optional[int] = None) -> List[Finding]:
    """The findings of a running session's configuration, errors first: what Sluice refuses and what
    will hurt, each with its fix (see ``sluice doctor`` for a configuration before it runs).

    Args:
        spark: a running session (classic, or a Spark Connect session: its server's settings).
        executors_per_node: how many executors share a node, to check the port range against.

    Returns:
        A list of :class:`Finding` (``severity``, ``setting``, ``problem``, ``fix``), plain values.
    """
    return check(
        from_session(spark), os.environ, executors_per_node=executors_per_node, open_files_limit=_open_files_limit()
    )


# ---- the command ---------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    from sluice.cli import _add_sluice_options

    p = argparse.ArgumentParser(
        prog="sluice doctor",
        usage="sluice doctor [--submit [Sluice options]] [--executors-per-node N] [--json] "
        "[spark-submit options] [app.py | app.jar]",
        allow_abbrev=False,
        description="Checks a Spark configuration for what Sluice refuses at start-up and what will hurt, each "
        "finding with its fix. It reads the configuration as spark-submit would from the same arguments "
        "(--master, --conf K=V, --properties-file F, else spark-defaults.conf of SPARK_CONF_DIR or SPARK_HOME); "
        "the application, if given, says its kind (Python or JVM), which sets Spark's own memory overhead on "
        "Kubernetes. Exit status: 0 clean (notes only), 1 errors, 2 warnings but no errors.",
    )
    p.add_argument(
        "--submit",
        action="store_true",
        help="check what `sluice submit` would run: these arguments with Sluice's settings merged in",
    )
    p.add_argument("--executors-per-node", type=int, metavar="N", help="executors a node runs, for the port range")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    _add_sluice_options(p)
    return p


def format_findings(findings: Sequence[Finding], c: Configuration) -> List[str]:
    counts = {s: sum(f.severity == s for f in findings) for s in _SEVERITIES}
    read = ", ".join(c.files) if c.files else "no properties file"
    kind = {"python": "a Python application", "jvm": "a JVM application", None: "no application given"}[c.kind]
    lines = [
        f"sluice doctor: {counts[ERROR]} error(s), {counts[WARNING]} warning(s), {counts[NOTE]} note(s) "
        f"(master {c.master}; {read}; {kind})"
    ]
    indent = " " * 8
    for f in findings:
        lines.append(f"{f.severity.upper():<8}{f.setting}")
        lines += textwrap.wrap(f.problem, WIDTH, initial_indent=indent, subsequent_indent=indent)
        lines += textwrap.wrap(f"fix: {f.fix}", WIDTH, initial_indent=indent, subsequent_indent=indent + "     ")
    return lines


def exit_status(findings: Sequence[Finding]) -> int:
    if any(f.severity == ERROR for f in findings):
        return EXIT_ERRORS
    if any(f.severity == WARNING for f in findings):
        return EXIT_WARNINGS
    return EXIT_CLEAN


def main(args: Sequence[str], environ: Optional[Mapping[str, str]] = None) -> int:
    from sluice._submit import SWITCHES
    from sluice.cli import SLUICE_SWITCHES, sluice_arguments, sluice_conf

    env = dict(os.environ if environ is None else environ)
    own = {"--submit", "--json"}
    options, application = split(list(args), set(SWITCHES) | SLUICE_SWITCHES | own)
    if any(o.name in ("-h", "--help") for o in options):
        parser().print_help()
        return 0
    parsed, rest = sluice_arguments(parser(), list(args), "doctor", switches=own)
    if parsed.executors_per_node is not None and parsed.executors_per_node < 1:
        raise SystemExit("sluice doctor: --executors-per-node must be at least 1")
    if parsed.submit:
        rest = submit_command("spark-submit", sluice_conf(parsed, "doctor"), rest)[1:]
    elif (
        any(v is not None for k, v in vars(parsed).items() if k in _options.options())
        or parsed.prometheus
        or parsed.yarn
    ):
        raise SystemExit("sluice doctor: Sluice's options only go with --submit (check what `sluice submit` runs)")
    c = from_command_line(rest, env)
    findings = check(c, env, executors_per_node=parsed.executors_per_node, open_files_limit=_open_files_limit())
    if parsed.json:
        print(json.dumps({"findings": [asdict(f) for f in findings], "exit_status": exit_status(findings)}, indent=2))
    else:
        for line in format_findings(findings, c):
            print(line)
    sys.stdout.flush()
    return exit_status(findings)
