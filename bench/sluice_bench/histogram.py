"""Latency histograms written by the JVM's LatencyProbeWriter: merging them and reading
percentiles. A histogram is a list of buckets ``(low_us, high_us, count)``; a percentile is
read as the middle of its bucket (buckets are at most 1.6 % wide)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Sequence, Tuple

Bucket = Tuple[int, int]


@dataclass
class Histogram:
    buckets: Dict[Bucket, int] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return sum(self.buckets.values())

    def add(self, low: int, high: int, count: int) -> None:
        self.buckets[(low, high)] = self.buckets.get((low, high), 0) + count

    def merge(self, other: "Histogram") -> None:
        for (low, high), n in other.buckets.items():
            self.add(low, high, n)

    def quantile_us(self, q: float) -> float:
        """The ``q`` quantile (0..1) in microseconds; NaN when empty."""
        total = self.count
        if total == 0:
            return float("nan")
        rank = q * total
        seen = 0
        ordered = sorted(self.buckets.items())
        for (low, high), n in ordered:
            seen += n
            if seen >= rank:
                return (low + max(low, high - 1)) / 2.0
        (low, high), _ = ordered[-1]
        return float(high)

    def mean_us(self) -> float:
        total = self.count
        if total == 0:
            return float("nan")
        return sum((low + max(low, high - 1)) / 2.0 * n for (low, high), n in self.buckets.items()) / total

    def summary(self) -> Dict[str, float]:
        """count, mean, p50, p90, p95, p99, p99.9 and max, in milliseconds."""
        ms = 1000.0
        return {
            "count": self.count,
            "mean_ms": self.mean_us() / ms,
            "p50_ms": self.quantile_us(0.50) / ms,
            "p90_ms": self.quantile_us(0.90) / ms,
            "p95_ms": self.quantile_us(0.95) / ms,
            "p99_ms": self.quantile_us(0.99) / ms,
            "p999_ms": self.quantile_us(0.999) / ms,
            "max_ms": self.quantile_us(1.0) / ms,
        }


def from_buckets(buckets: Iterable[Sequence[int]]) -> Histogram:
    h = Histogram()
    for low, high, n in buckets:
        h.add(int(low), int(high), int(n))
    return h


def merge_files(paths: Iterable[Path]) -> Dict[str, Histogram]:
    """Every series of every file, merged by name (a task's file holds its latest totals)."""
    merged: Dict[str, Histogram] = {}
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a file being replaced right now: its task writes it again at close
        series: Dict[str, List[List[int]]] = data.get("histograms", {})
        for name, buckets in series.items():
            merged.setdefault(name, Histogram()).merge(from_buckets(buckets))
    return merged
