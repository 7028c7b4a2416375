"""dev/cluster's tool: a Spark standalone cluster across separate network hosts, on this machine.

Every host is a network namespace with its own address on a private subnet (10.77.0.0/24 by
default), joined by a veth link to a Linux bridge that lives in a namespace of its own; each link
is rate-limited in both directions with `tc qdisc ... tbf`. Spark's standalone Master and Workers
(pyspark's `bin/spark-class`) run in their hosts, the driver or spark-submit in the driver host.
Nothing here touches the machine's own interfaces or addresses: links are created inside the
bridge namespace and moved straight into their host namespace, and addresses exist only there.

    dev/cluster run [options] -- COMMAND ...   bring the cluster up, run COMMAND in the driver
                                               host, tear everything down (also on failure/Ctrl-C)
    dev/cluster shell [options]                the same with an interactive shell
    dev/cluster down [--all]                   remove what a killed run left behind
    dev/cluster status                         list this tool's namespaces and their processes

Options: --workers N (2), --rate RATE per link (1gbit; e.g. 10gbit, or "none"), --cores N per
worker (1), --memory SIZE per worker (1g), --logs DIR (kept after the run; default a temporary
directory, deleted unless the command failed), --sluice-service (Sluice's node shuffle service,
``sluice shuffle-service``, in every worker host, bound to the host's address on port 7338),
--spark-shuffle-service (Spark's external shuffle service inside every Worker, port 7337).

COMMAND sees SLUICE_CLUSTER_MASTER (spark://10.77.0.2:7077), SPARK_LOCAL_IP (the driver host's
address), SLUICE_CLUSTER_PREFIX and pyspark's Spark (SPARK_HOME unset), e.g.

    source dev/env.sh && dev/cluster run -- sluice submit --master '$SLUICE_CLUSTER_MASTER' app.py
    dev/cluster run --rate 10gbit -- sh -c 'sluice submit --master $SLUICE_CLUSTER_MASTER app.py'

Namespaces are named sluice-<pid>-<random>-<host>; the process that made them holds a lock,
/run/sluice-cluster/sluice-<pid>-<random>-lock, for as long as it lives. `down` removes the
namespaces whose lock is free (their maker has ended, however it ended) and every process inside
them; `--all` removes every sluice-* namespace. Needs
root (CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2 and tc. ``dev/cluster`` runs :func:`main`;
tests/realapps.py and ``sluice bench cluster`` import this module (``dev/`` on ``sys.path``).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Dict, List, Mapping, Optional, Sequence, Type

ROOT_PREFIX = "sluice-"
LOCK_DIR = Path("/run/sluice-cluster")  # one lock file per cluster, held by the process that made it
SUBNET = "10.77.0"
MASTER_PORT = 7077
# spark.sluice.service.port's default: each worker host's Sluice shuffle service listens there.
SLUICE_SERVICE_PORT = 7338
SLUICE_SERVICE_MAIN = "org.apache.spark.shuffle.sluice.service.SluiceShuffleServiceMain"
BRIDGE = "br0"
# tbf: a queue of at most this long a wait, and a bucket of this many milliseconds at the rate.
TBF_LATENCY = "20ms"
TBF_BURST_MS = 2.0


class ClusterError(Exception):
    """A step of bringing the cluster up or down failed; the message says which and why."""


@dataclass
class Host:
    """One network host: its namespace, its address, and its link's name in the bridge namespace."""

    name: str
    ns: str
    address: str
    link: str = ""

    def __post_init__(self) -> None:
        self.link = self.link or f"v-{self.name}"


@dataclass
class Cluster:
    """A standalone Spark cluster over network namespaces; a context manager (up on enter, down on exit).

    With ``sluice_service`` every worker host also runs Sluice's node shuffle service (``sluice
    shuffle-service``, as an operator runs it beside each Worker) on its own address and port
    :data:`SLUICE_SERVICE_PORT`, reading only under that host's local dir; with
    ``spark_shuffle_service`` every Worker runs Spark's external shuffle service (port 7337).
    """

    workers: int = 2
    rate: Optional[str] = "1gbit"
    cores: int = 1
    memory: str = "1g"
    logs: Optional[Path] = None
    sluice_service: bool = False
    spark_shuffle_service: bool = False
    prefix: str = field(default_factory=lambda: f"{ROOT_PREFIX}{os.getpid()}-{secrets.token_hex(2)}-")
    spark_home: Path = field(default_factory=lambda: pyspark_home())

    def __post_init__(self) -> None:
        if not 1 <= self.workers <= 50:
            raise ClusterError(f"--workers must be between 1 and 50, not {self.workers}")
        if self.rate in ("", "none"):
            self.rate = None
        if self.rate:
            rate_bits(self.rate)  # a bad rate fails here, before any namespace exists
        self.bridge = Host("bridge", self.prefix + "br", "")
        self.master = Host("master", self.prefix + "master", f"{SUBNET}.2")
        self.driver = Host("driver", self.prefix + "driver", f"{SUBNET}.10")
        self.worker_hosts = [
            Host(f"w{i}", f"{self.prefix}w{i}", f"{SUBNET}.{10 + i}") for i in range(1, self.workers + 1)
        ]
        self.hosts = [self.master, self.driver] + self.worker_hosts
        self.master_url = f"spark://{self.master.address}:{MASTER_PORT}"
        self._own_logs = self.logs is None
        self.logs = Path(self.logs) if self.logs else Path(tempfile.mkdtemp(prefix=self.prefix))
        self._made: List[str] = []  # namespaces, in creation order
        self._lock: Optional[IO[str]] = None
        self._daemons: List[subprocess.Popen[bytes]] = []
        self._log_files: List[IO[bytes]] = []

    # -- life cycle ---------------------------------------------------------------------------

    def __enter__(self) -> "Cluster":
        self.up()
        return self

    def __exit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.down(keep_logs=error is not None)

    def up(self, timeout: float = 120.0) -> None:
        """Creates the hosts and links, then starts the Master and the Workers and waits for them."""
        check_prerequisites()
        taken = [ns for ns in list_namespaces() if ns.startswith(self.prefix)]
        if taken:
            raise ClusterError(
                f"namespaces with this cluster's prefix {self.prefix!r} exist already: "
                f"{', '.join(taken)} (remove them with `dev/cluster down --all`)"
            )
        self._lock = hold_lock(self.prefix)
        try:
            self._make_network()
            self._start_daemons(timeout)
        except BaseException:
            self.down(keep_logs=True)
            raise

    def down(self, keep_logs: bool = False) -> None:
        """Stops every process in this cluster's namespaces and deletes the namespaces. Idempotent."""
        for ns in reversed(self._made):
            remove_namespace(ns)
        self._made.clear()
        if self._lock is not None:
            lock_path(self.prefix).unlink(missing_ok=True)
            self._lock.close()
            self._lock = None
        for p in self._daemons:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        self._daemons.clear()
        for f in self._log_files:
            f.close()
        self._log_files.clear()
        if self._own_logs and not keep_logs and self.logs is not None:
            shutil.rmtree(self.logs, ignore_errors=True)

    # -- network ------------------------------------------------------------------------------

    def _make_network(self) -> None:
        br = self.bridge.ns
        self._add_namespace(br)
        ip("-n", br, "link", "set", "lo", "up")
        ip("-n", br, "link", "add", BRIDGE, "type", "bridge")
        ip("-n", br, "link", "set", BRIDGE, "up")
        for host in self.hosts:
            self._add_namespace(host.ns)
            ip("-n", host.ns, "link", "set", "lo", "up")
            # Made inside the bridge namespace, one end moved straight into the host's: the
            # machine's own namespace never sees either end.
            ip("-n", br, "link", "add", host.link, "type", "veth", "peer", "name", "eth0", "netns", host.ns)
            ip("-n", br, "link", "set", host.link, "master", BRIDGE)
            ip("-n", br, "link", "set", host.link, "up")
            ip("-n", host.ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
            ip("-n", host.ns, "link", "set", "eth0", "up")
            if self.rate:
                # The host's sending side, and its receiving side (the bridge end's sending side).
                self._limit(host.ns, "eth0")
                self._limit(br, host.link)

    def _limit(self, ns: str, dev: str) -> None:
        assert self.rate is not None
        burst = max(64 * 1024, int(rate_bits(self.rate) / 8 * TBF_BURST_MS / 1000))
        run(
            [
                "tc",
                "-n",
                ns,
                "qdisc",
                "add",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                self.rate,
                "burst",
                str(burst),
                "latency",
                TBF_LATENCY,
            ]
        )

    def _add_namespace(self, ns: str) -> None:
        ip("netns", "add", ns)
        self._made.append(ns)

    # -- Spark's daemons ----------------------------------------------------------------------

    def _start_daemons(self, timeout: float) -> None:
        assert self.logs is not None
        spark_class = str(self.spark_home / "bin" / "spark-class")
        master_log = self.logs / "master.log"
        self._start(
            self.master,
            master_log,
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                self.master.address,
                "--port",
                str(MASTER_PORT),
                "--webui-port",
                "8080",
            ],
            {"SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"},
        )
        wait_for_line(master_log, "I have been elected leader", timeout, self._daemons[-1])
        worker_logs = []
        worker_opts = "-Dspark.decommission.enabled=true"
        if self.spark_shuffle_service:
            worker_opts += " -Dspark.shuffle.service.enabled=true"
        for host in self.worker_hosts:
            work = self.logs / host.name
            self.local_dir(host).mkdir(parents=True, exist_ok=True)
            log = self.logs / f"{host.name}.log"
            # Decommissioning on: a Worker that gets SIGPWR (spark.worker.decommission.signal) tells
            # the Master, which decommissions its executors (see decommission_worker). Spark's
            # external shuffle service runs inside the Worker when asked for.
            self._start(
                host,
                log,
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    host.address,
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--work-dir",
                    str(work / "work"),
                    "--webui-port",
                    "8081",
                    self.master_url,
                ],
                {"SPARK_LOCAL_DIRS": str(self.local_dir(host)), "SPARK_WORKER_OPTS": worker_opts},
            )
            worker_logs.append((log, self._daemons[-1]))
        for log, process in worker_logs:
            wait_for_line(log, "Successfully registered with master", timeout, process)
        if self.sluice_service:
            self._start_sluice_services(timeout)

    def _start_sluice_services(self, timeout: float) -> None:
        """One ``sluice shuffle-service`` per worker host, bound to the host's address, serving only
        what executors registered under the host's local dir (its Worker's SPARK_LOCAL_DIRS)."""
        assert self.logs is not None
        sluice = Path(sys.executable).parent / "sluice"
        if not sluice.is_file():
            raise ClusterError(f"--sluice-service needs the sluice command beside {sys.executable} (source dev/env.sh)")
        started = []
        for host in self.worker_hosts:
            log = self.logs / f"{host.name}-sluice-service.log"
            argv = [
                str(sluice),
                "shuffle-service",
                "--host",
                host.address,
                "--conf",
                f"spark.sluice.service.port={SLUICE_SERVICE_PORT}",
                "--conf",
                f"spark.sluice.service.allowedDirs={self.local_dir(host)}",
            ]
            self._start(host, log, argv, {})
            started.append((log, self._daemons[-1]))
        for log, process in started:
            wait_for_line(log, "Sluice shuffle service listening on", timeout, process)

    def local_dir(self, host: Host) -> Path:
        """The worker host's local dir (its Worker's SPARK_LOCAL_DIRS): the executors' dirs are under it."""
        assert self.logs is not None
        return self.logs / host.name / "local"

    def sluice_service_address(self, host: Host) -> str:
        """HOST:PORT of the worker host's Sluice shuffle service (with ``sluice_service``)."""
        return f"{host.address}:{SLUICE_SERVICE_PORT}"

    def _start(self, host: Host, log: Path, argv: Sequence[str], extra: Mapping[str, str]) -> None:
        env = self.host_env(host)
        env["SPARK_HOME"] = str(self.spark_home)
        env["SPARK_DAEMON_MEMORY"] = "256m"
        env.update(extra)
        out = open(log, "wb")
        self._log_files.append(out)
        # A session of its own: a Ctrl-C at the terminal reaches this tool, which stops them in order.
        self._daemons.append(
            subprocess.Popen(
                ["ip", "netns", "exec", host.ns, *argv],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        )

    def host_env(self, host: Host) -> Dict[str, str]:
        """The environment of a Spark process on ``host``: its address, pyspark's Spark, this Python."""
        assert self.logs is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        env.update(
            SPARK_LOCAL_IP=host.address,
            # Never created: no spark-defaults.conf or spark-env.sh of anyone's. (Absent rather than
            # empty, it also leaves the JVMs' class path as pyspark's own, which a class-data
            # archive of pyspark's jars, as the tests use, needs.)
            SPARK_CONF_DIR=str(self.logs / "conf"),
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            SLUICE_CLUSTER_MASTER=self.master_url,
            SLUICE_CLUSTER_PREFIX=self.prefix,
        )
        return env

    # -- running things on hosts ----------------------------------------------------------------

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise ClusterError(f"no host {name!r}; hosts are {', '.join(h.name for h in self.hosts)}")

    def popen(
        self, host: Host, argv: Sequence[str], env: Optional[Mapping[str, str]] = None, **kwargs: object
    ) -> "subprocess.Popen[str]":
        """Starts ``argv`` in ``host`` (default environment: :meth:`host_env`)."""
        started: "subprocess.Popen[str]" = subprocess.Popen(
            ["ip", "netns", "exec", host.ns, *argv],  # type: ignore[call-overload]
            env=dict(env if env is not None else self.host_env(host)),
            text=True,
            **kwargs,
        )
        return started

    def run_on(
        self, host: Host, argv: Sequence[str], timeout: float, env: Optional[Mapping[str, str]] = None
    ) -> "subprocess.CompletedProcess[str]":
        """Runs ``argv`` in ``host`` to completion, capturing its output."""
        return subprocess.run(
            ["ip", "netns", "exec", host.ns, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env if env is not None else self.host_env(host)),
        )

    def cut(self, host: Host) -> None:
        """Takes the host's link down at the bridge: no RST, no FIN, its peers just hear nothing."""
        set_link(self.bridge.ns, host.link, up=False)

    def reconnect(self, host: Host) -> None:
        set_link(self.bridge.ns, host.link, up=True)


# -- helpers ----------------------------------------------------------------------------------


def pyspark_home() -> Path:
    try:
        import pyspark
    except ImportError:
        raise ClusterError("pyspark is not importable by this Python: run `source dev/env.sh` first") from None
    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file():
        raise ClusterError(f"{home} has no bin/spark-class")
    return home


def run(argv: Sequence[str], timeout: float = 60.0) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise ClusterError(f"{argv[0]} is not installed (dev/cluster needs iproute2 and tc)") from None
    if done.returncode != 0:
        raise ClusterError(f"`{' '.join(argv)}` failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def ip(*args: str) -> str:
    return run(["ip", *args])


def check_prerequisites() -> None:
    if os.geteuid() != 0:
        raise ClusterError("dev/cluster needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) to create network namespaces")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise ClusterError(f"{tool} is not installed (dev/cluster needs iproute2 and tc)")


def rate_bits(rate: str) -> float:
    """tc's rate spelling (1gbit, 500mbit, 10Gbit) in bits per second."""
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12, "bit": 1.0}
    lowered = rate.lower()
    for unit, scale in units.items():
        if lowered.endswith(unit):
            try:
                return float(lowered[: -len(unit)]) * scale
            except ValueError:
                break
    raise ClusterError(f"--rate {rate!r} is not a rate like 1gbit, 10gbit or 500mbit")


def set_link(bridge_ns: str, link: str, up: bool) -> None:
    """Sets a host's link (its end in the bridge namespace) up or down."""
    ip("-n", bridge_ns, "link", "set", link, "up" if up else "down")


def executor_pids(ns: str) -> List[int]:
    """The Spark executor JVMs running in namespace ``ns``."""
    return [pid for pid in namespace_pids(ns) if "CoarseGrainedExecutorBackend" in cmdline(pid)]


def sluice_service_pids(ns: str) -> List[int]:
    """The Sluice shuffle service JVMs running in namespace ``ns``."""
    return [pid for pid in namespace_pids(ns) if SLUICE_SERVICE_MAIN in cmdline(pid)]


def worker_pids(ns: str) -> List[int]:
    """The Spark standalone Worker JVMs running in namespace ``ns``."""
    return [pid for pid in namespace_pids(ns) if "org.apache.spark.deploy.worker.Worker" in cmdline(pid)]


def decommission_worker(ns: str) -> List[int]:
    """Decommissions the Worker of the host with namespace ``ns``, as a cloud's notice of a lost
    machine would: SIGPWR. The Worker tells the Master, which decommissions the executors on that
    host (their applications need spark.decommission.enabled) and starts no new ones there; the
    Worker stays decommissioned until it is restarted. Returns the pids signalled."""
    pids = worker_pids(ns)
    for pid in pids:
        _signal(pid, signal.SIGPWR)
    return pids


def list_namespaces() -> List[str]:
    out = run(["ip", "netns", "list"])
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def namespace_pids(ns: str) -> List[int]:
    done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
    return [int(p) for p in done.stdout.split() if p.isdigit() and int(p) != os.getpid()]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def remove_namespace(ns: str, grace: float = 10.0) -> None:
    """Stops every process in ``ns`` (SIGTERM, then SIGKILL after ``grace`` s) and deletes it."""
    pids = namespace_pids(ns)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        time.sleep(0.2)
        pids = namespace_pids(ns)
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace
    while namespace_pids(ns) and time.monotonic() < deadline:
        time.sleep(0.2)
    subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_path(prefix: str) -> Path:
    return LOCK_DIR / f"{prefix}lock"


def hold_lock(prefix: str) -> IO[str]:
    """Takes the cluster's ownership lock, held (by the open file) as long as its process lives.

    The kernel drops the lock when the process ends, however it ends, so a free lock is a sure
    sign that the cluster's owner is gone: unlike a process id, which another process (or another
    PID namespace's process) may carry.
    """
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    f = open(lock_path(prefix), "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise ClusterError(f"another process holds {lock_path(prefix)}") from None
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def _owner_gone(prefix: str) -> Optional[bool]:
    """Whether the cluster ``prefix``'s owner has ended (its lock is free); None without a lock file."""
    path = lock_path(prefix)
    try:
        f = open(path, "r+")
    except FileNotFoundError:
        return None
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True


def _prefix_of(ns: str) -> str:
    return ns[: ns.rfind("-") + 1]


def stale_namespaces(everything: bool = False, unlocked_too: bool = True) -> List[str]:
    """This tool's namespaces whose owner has ended (all of them with ``everything``).

    The owner has ended when the cluster's lock is free. Namespaces without a lock file (made
    by an older dev/cluster, or whose lock file was lost) count as stale when ``unlocked_too`` and
    the process id in their name is no longer alive.
    """
    found = []
    for ns in list_namespaces():
        if not ns.startswith(ROOT_PREFIX):
            continue
        gone = _owner_gone(_prefix_of(ns))
        if gone is None and unlocked_too:
            owner = ns[len(ROOT_PREFIX) :].split("-", 1)[0]
            gone = not owner.isdigit() or not _alive(int(owner))
        if everything or gone:
            found.append(ns)
    return found


def clean_stale(everything: bool = False, unlocked_too: bool = True) -> List[str]:
    """Removes :func:`stale_namespaces` (every process in them first) and their lock files."""
    removed = stale_namespaces(everything, unlocked_too)
    # Hosts before bridges, so no process outlives its link.
    for ns in sorted(removed, key=lambda n: n.endswith("-br")):
        remove_namespace(ns)
    # Lock files of ended makers: those of the clusters just removed, and any left without one.
    if LOCK_DIR.is_dir():
        for lock in LOCK_DIR.glob(f"{ROOT_PREFIX}*lock"):
            prefix = lock.name[: -len("lock")]
            if _owner_gone(prefix) and not any(ns.startswith(prefix) for ns in list_namespaces()):
                lock.unlink(missing_ok=True)
    return removed


def wait_for_line(log: Path, text: str, timeout: float, process: "subprocess.Popen[bytes]") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.is_file() and text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            raise ClusterError(f"{log.stem} exited with {process.returncode} before {text!r}; its log:\n" + _tail(log))
        time.sleep(0.3)
    raise ClusterError(f"{log.stem} did not log {text!r} within {timeout:.0f}s; its log:\n" + _tail(log))


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# -- command line -----------------------------------------------------------------------------


def _interrupt(signum: int, frame: Optional[FrameType]) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="dev/cluster", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "shell"):
        p = commands.add_parser(name)
        p.add_argument("--workers", type=int, default=2)
        p.add_argument("--rate", default="1gbit")
        p.add_argument("--cores", type=int, default=1)
        p.add_argument("--memory", default="1g")
        p.add_argument("--logs")
        p.add_argument(
            "--sluice-service", action="store_true", help="Sluice's node shuffle service in every worker host"
        )
        p.add_argument(
            "--spark-shuffle-service", action="store_true", help="Spark's external shuffle service in every Worker"
        )
        if name == "run":
            p.add_argument("cmd", nargs=argparse.REMAINDER)
    down = commands.add_parser("down")
    down.add_argument("--all", action="store_true", help="every sluice-* namespace, also those of running clusters")
    commands.add_parser("status")
    args = parser.parse_args(argv)

    try:
        if args.command == "down":
            check_prerequisites()
            removed = clean_stale(args.all)
            print("removed " + (", ".join(removed) if removed else "nothing"))
            return 0
        if args.command == "status":
            for ns in list_namespaces():
                if ns.startswith(ROOT_PREFIX):
                    print(ns)
                    for pid in namespace_pids(ns):
                        print(f"  {pid} {cmdline(pid)[:160]}")
            return 0
        cmd = list(args.cmd) if args.command == "run" else [os.environ.get("SHELL", "/bin/bash")]
        if cmd[:1] == ["--"]:
            cmd = cmd[1:]
        if not cmd:
            parser.error("run needs a command after --")
        # Also when started with SIGINT ignored (a background job of a script).
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _interrupt)
        with Cluster(
            workers=args.workers,
            rate=args.rate,
            cores=args.cores,
            memory=args.memory,
            logs=Path(args.logs) if args.logs else None,
            sluice_service=args.sluice_service,
            spark_shuffle_service=args.spark_shuffle_service,
        ) as cluster:
            print(
                f"[dev/cluster] master {cluster.master_url}, driver {cluster.driver.address}, workers "
                f"{', '.join(h.address for h in cluster.worker_hosts)}; links {cluster.rate or 'unlimited'}; "
                f"logs {cluster.logs}"
                + (f"; Sluice shuffle services on port {SLUICE_SERVICE_PORT}" if cluster.sluice_service else "")
                + ("; Spark's shuffle service in every Worker" if cluster.spark_shuffle_service else ""),
                file=sys.stderr,
            )
            env = cluster.host_env(cluster.driver)
            # Whatever the user's environment sets for the command, except where Spark must bind.
            env.update({k: v for k, v in os.environ.items() if k.startswith("PYSPARK_")})
            code = subprocess.run(["ip", "netns", "exec", cluster.driver.ns, *cmd], env=env).returncode
            if code != 0:
                print(f"[dev/cluster] the command exited with {code}; logs kept in {cluster.logs}", file=sys.stderr)
                cluster._own_logs = False
            return code
    except ClusterError as e:
        print(f"dev/cluster: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("[dev/cluster] interrupted; the cluster was torn down", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
