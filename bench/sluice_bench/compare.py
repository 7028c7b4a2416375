"""Comparing query answers of two runs: rows as plain values, numbers within a tolerance.

Answers are lists of rows (lists of plain values). Decimals become floats, dates and times ISO
strings, so answers survive a trip through JSON. Two answers agree when they hold the same rows,
in any order (ties under ORDER BY may come out in either order), with numbers equal up to a
relative tolerance: sums of doubles depend on the order the shuffle delivers rows in.
"""

from __future__ import annotations

import datetime
import decimal
import math
from typing import Any, List, Optional, Sequence, Tuple

Row = List[Any]

REL_TOL = 1e-6
ABS_TOL = 1e-6


def plain(value: Any) -> Any:
    """A JSON-able, comparable form of one cell."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    return value


def plain_rows(rows: Sequence[Sequence[Any]]) -> List[Row]:
    return [[plain(v) for v in row] for row in rows]


def _sort_key(row: Row) -> Tuple[str, ...]:
    # Numbers rounded to 6 significant digits, so rows that agree within the tolerance sort alike.
    return tuple(f"{v:.6g}" if isinstance(v, float) else repr(v) for v in row)


def cells_agree(a: Any, b: Any, rel_tol: float = REL_TOL, abs_tol: float = ABS_TOL) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a == b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, float) and math.isnan(a):
            return isinstance(b, float) and math.isnan(b)
        close: bool = math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=abs_tol)
        return close
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(cells_agree(x, y, rel_tol, abs_tol) for x, y in zip(a, b))
    return bool(a == b)


def difference(expected: Sequence[Row], actual: Sequence[Row], rel_tol: float = REL_TOL) -> Optional[str]:
    """None when the answers agree; otherwise a short description of the first difference."""
    if len(expected) != len(actual):
        return f"{len(actual)} rows instead of {len(expected)}"
    ordered_e = sorted(expected, key=_sort_key)
    ordered_a = sorted(actual, key=_sort_key)
    for i, (e, a) in enumerate(zip(ordered_e, ordered_a)):
        if len(e) != len(a) or not all(cells_agree(x, y, rel_tol) for x, y in zip(e, a)):
            return f"row {i} (sorted) differs: expected {e!r}, got {a!r}"
    return None
