"""Statistics of the benchmarks: medians, ratios, percentiles, the alternation of contenders and goals."""

from __future__ import annotations

import statistics
from typing import Any, Dict, Iterable, List, Sequence, Tuple


def median(values: Iterable[float]) -> float:
    """The median of ``values`` (the mean of the middle two for an even count); NaN when empty."""
    data = [float(v) for v in values]
    return float(statistics.median(data)) if data else float("nan")


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, NaN when the denominator is 0 or NaN."""
    if denominator == 0 or denominator != denominator:
        return float("nan")
    return numerator / denominator


def spread(values: Sequence[float]) -> Dict[str, float]:
    """Median, least, most and count of ``values`` (empty when there are none)."""
    if not values:
        return {}
    return {"median": median(values), "min": min(values), "max": max(values), "runs": len(values)}


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of already sorted values, by linear interpolation."""
    if not sorted_values:
        return float("nan")
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def alternation(contenders: Sequence[str], rounds: int) -> List[Tuple[int, str]]:
    """The order runs are made in: every contender once per round, each round's order the last
    one's rotated by one (A B C, B C A, C A B ...; with two: A B, B A), so drift of a shared
    machine hits each contender alike and no contender always follows the same one (what a run
    leaves behind, its JVMs exiting and its files being deleted, weighs on the next)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    n = len(contenders)
    return [(r, contenders[(r - 1 + i) % n]) for r in range(1, rounds + 1) for i in range(n)]


def goal(name: str, value: float, target: float, *, at_most: bool, unit: str = "") -> Dict[str, Any]:
    """A goal as the result JSON records it: ``value`` against ``target`` (an upper bound when
    ``at_most``, else a lower bound), and whether it was met (never with a NaN value)."""
    met = value == value and (value <= target if at_most else value >= target)
    return {"goal": name, "value": value, "target": target, "at_most": at_most, "unit": unit, "met": bool(met)}
