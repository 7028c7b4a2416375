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


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"32m"`` -> 33554432 (k, m, g, t are powers of 1024)."""
    match = _SIZE.match(text.strip())
    if not match:
        raise ValueError(f"not a size: {text!r}")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)
