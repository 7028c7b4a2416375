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
    """The order runs are made in: every contender once per round, the rounds' orders the rows of
    a Williams design (A B, B A with two; A B C, C B A, B C A, A C B, C A B, B A C with three), so
    drift of a shared machine hits each contender alike, each comes first in turn, and each follows
    each of the others equally often: over n rounds for an even number n of contenders, over 2n
    for an odd one (what a run leaves behind, its JVMs exiting and its files being deleted and
    written back, weighs on the next). Rotating one order alone would not do: with three, C would
    always follow B."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    orders = williams_orders(len(contenders))
    return [(r, contenders[i]) for r in range(1, rounds + 1) for i in orders[(r - 1) % len(orders)]]


def williams_orders(n: int) -> List[List[int]]:
    """The rows of a Williams design for ``n`` treatments, as indices: a Latin square whose every
    ordered pair of neighbours occurs once (``n`` even), or such a square's rows each followed by
    its mirror image, where every pair occurs twice (``n`` odd)."""
    first = [0]
    low, high = 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [[(x + i) % n for x in first] for i in range(n)]
    return rows if n % 2 == 0 else [order for row in rows for order in (row, row[::-1])]


def goal(name: str, value: float, target: float, *, at_most: bool, unit: str = "") -> Dict[str, Any]:
    """A goal as the result JSON records it: ``value`` against ``target`` (an upper bound when
    ``at_most``, else a lower bound), and whether it was met (never with a NaN value)."""
    met = value == value and (value <= target if at_most else value >= target)
    return {"goal": name, "value": value, "target": target, "at_most": at_most, "unit": unit, "met": bool(met)}
