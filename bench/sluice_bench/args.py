"""The benchmarks' command-line values: Sluice options, sort-shuffle settings, sizes."""

from __future__ import annotations

import re
from typing import Any, Dict

from sluice_bench.errors import BenchError


def sluice_options(args: Any) -> Dict[str, str]:
    """The ``--option NAME=VALUE`` pairs of a ``sluice bench`` command line."""
    return dict(option.split("=", 1) for option in getattr(args, "option", None) or [])


def sort_conf(args: Any) -> Dict[str, str]:
    """The ``--sort-conf KEY=VALUE`` pairs of a ``sluice bench`` command line: Spark settings for
    the sort shuffle's runs only; a pair without ``=`` or a key outside ``spark.`` is a BenchError."""
    pairs: Dict[str, str] = {}
    for item in getattr(args, "sort_conf", None) or []:
        key, has_value, value = str(item).partition("=")
        if not has_value or not key.startswith("spark."):
            raise BenchError(f"--sort-conf takes a Spark setting as KEY=VALUE (spark.*), got {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


# Spark turns host-local disk reads off on a local-cluster master unless they are set (its
# executors share one host, and it would rather test remote fetching), so every local benchmark
# compares reads across executors; --host-local turns them on for every contender.
HOST_LOCAL_CONF = {"spark.shuffle.readHostLocalDisk": "true"}
HOST_LOCAL_HELP = (
    "every contender reads the map outputs of the other executors on its host from their files "
    "(spark.shuffle.readHostLocalDisk=true, which Spark turns off on local-cluster masters), as executors "
    "sharing a cluster node do; saved as NAME-host-local.json"
)


def host_local_conf(args: Any) -> Dict[str, str]:
    """:data:`HOST_LOCAL_CONF` when the command line says ``--host-local``, else nothing."""
    return dict(HOST_LOCAL_CONF) if getattr(args, "host_local", False) else {}


def host_local_suffix(args: Any) -> str:
    """What a ``--host-local`` run adds to its result's name."""
    return "-host-local" if getattr(args, "host_local", False) else ""


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"32m"`` -> 33554432 (k, m, g, t are powers of 1024)."""
    match = _SIZE.match(text.strip())
    if not match:
        raise ValueError(f"not a size: {text!r}")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)
