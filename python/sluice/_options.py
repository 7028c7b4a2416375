"""The Sluice option table (``_options.json``, generated from the JVM's SluiceOptions) and the
validation of Python values against it.

Values are checked by the same rules the JVM applies when an executor starts (type, range,
power of two), so a bad setting fails in ``sluice.configure`` instead of in an executor log.
Each valid value is rendered as the text the JVM parses (sizes ``32k``, durations ``100ms``).
"""

from __future__ import annotations

import datetime
import difflib
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Dict, Mapping, Optional, Tuple

_TABLE = Path(__file__).resolve().parent / "_options.json"

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

_BYTES = re.compile(r"^\s*(\d+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)?\s*$", re.IGNORECASE)
_BYTE_SHIFTS = {"b": 0, "k": 10, "m": 20, "g": 30, "t": 40}

_DURATION = re.compile(r"^\s*(-?\d+)\s*(us|ms|s|sec|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}

_INTEGER = re.compile(r"^\s*[+-]?\d+\s*$")


@dataclass(frozen=True)
class Option:
    """One row of the option table: a ``spark.sluice.*`` key and the rules for its values."""

    key: str
    python: str
    type: str
    default: str
    values: Optional[Tuple[str, ...]]
    min: Optional[int]
    max: Optional[int]
    power_of_two: bool
    valid: str
    at_least: Tuple["AtLeast", ...] = ()


@dataclass(frozen=True)
class AtLeast:
    """A rule between two size options (the JVM's ``io.sluice.config.AtLeast``): the option it belongs
    to must be at least ``factor`` × ``reference`` + ``plus`` bytes, because ``why``."""

    reference: str
    factor: int
    plus: int
    why: str

    def formula(self) -> str:
        times = "" if self.factor == 1 else f"{self.factor} × "
        extra = "" if self.plus == 0 else f" + {render_bytes(self.plus)}"
        return f"{times}{self.reference}{extra}"


class _Invalid(Exception):
    """A value does not fit an option; carries the reason only (the caller names option and key)."""


@lru_cache(maxsize=1)
def options() -> Dict[str, Option]:
    """All Sluice options by Python name, in the order of the generated table."""
    rows = json.loads(_TABLE.read_text(encoding="utf-8"))
    table: Dict[str, Option] = {}
    for row in rows:
        values = row["values"]
        option = Option(
            key=row["key"],
            python=row["python"],
            type=row["type"],
            default=row["default"],
            values=tuple(values) if values is not None else None,
            min=row["min"],
            max=row["max"],
            power_of_two=bool(row["power_of_two"]),
            valid=row["valid"],
            at_least=tuple(
                AtLeast(rule["reference"], int(rule["factor"]), int(rule["plus"]), rule["why"])
                for rule in row.get("at_least", [])
            ),
        )
        table[option.python] = option
    return table


def lookup(name: str) -> Option:
    """The option called ``name``; a ValueError suggesting the closest name when there is none."""
    table = options()
    option = table.get(name)
    if option is not None:
        return option
    # Compare without case and underscores, so `bufferTimeout` finds `buffer_timeout` too.
    squashed = {python.replace("_", ""): python for python in table}
    close = difflib.get_close_matches(name.replace("_", "").lower(), list(squashed), n=1)
    hint = f"did you mean {squashed[close[0]]!r}?" if close else f"valid options: {', '.join(table)}"
    raise ValueError(f"Unknown Sluice option {name!r}; {hint}")


def by_key(key: str) -> Option:
    """The option whose Spark key is ``key``; a ValueError suggesting the closest key when there is none."""
    table = {option.key: option for option in options().values()}
    option = table.get(key)
    if option is not None:
        return option
    close = difflib.get_close_matches(key, list(table), n=1, cutoff=0.8)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise ValueError(f"Unknown Sluice setting {key}{hint}")


# The one rule for numbers without a unit on the command line (``require_unit``): refused for sizes
# and durations, whose unit a bare number hides (bytes? milliseconds? seconds?).
UNIT_RULE = (
    "Sizes and durations need a unit: 32k, 64m, 1g (b, k, m, g, t); 10ms, 5s, 2min (us, ms, s, min, h, d). "
    "A bare number is refused."
)


def render(option: Option, value: object, *, require_unit: bool = False) -> str:
    """``value`` as the text the JVM parses for ``option``, after checking it is valid. With
    ``require_unit``, a size or duration given as a string of digits alone is refused (the
    command line's rule, :data:`UNIT_RULE`).

    Raises:
        ValueError: naming the Python option, its Spark key and the value.
    """
    if require_unit and option.type in ("bytes", "duration") and isinstance(value, str) and _INTEGER.match(value):
        example = (
            f"{value.strip()}b or {value.strip()}k"
            if option.type == "bytes"
            else f"{value.strip()}ms or {value.strip()}s"
        )
        raise ValueError(
            f"Invalid value {value!r} for Sluice option {option.python} ({option.key}): a bare number; "
            f"give its unit, e.g. {example} ({UNIT_RULE})"
        )
    try:
        text, number = _PARSERS[option.type](option, value)
        if number is not None:
            _check_bounds(option, number)
    except _Invalid as e:
        expected = f"; expected {option.valid}" if option.valid else ""
        raise ValueError(
            f"Invalid value {value!r} for Sluice option {option.python} ({option.key}): {e}{expected}"
        ) from None
    return text


def spark_settings(options: Mapping[str, object], *, require_unit: bool = False) -> Dict[str, str]:
    """Sluice options by their Python names as ``{Spark key: value}``, each checked and rendered.

    Raises:
        ValueError: for an unknown name or an invalid value, as :func:`lookup` and :func:`render`.
    """
    settings: Dict[str, str] = {}
    for name, value in options.items():
        option = lookup(name)
        settings[option.key] = render(option, value, require_unit=require_unit)
    check_combinations(settings)
    return settings


def check_combinations(settings: Mapping[str, str]) -> None:
    """Applies the JVM's rules between options (``AtLeast``) to ``{Spark key: rendered value}``, the
    options not given at their defaults, with the JVM's message. An option not given rises to its
    bound (the JVM raises it the same way), so only one given below its bound is refused.

    Raises:
        ValueError: naming the option, its value, the rule and the options' Python names.
    """
    by_key = {option.key: option for option in options().values()}

    def size(key: str) -> int:
        _, number = _parse_bytes(by_key[key], settings.get(key, by_key[key].default))
        assert number is not None
        return number

    for option in options().values():
        for rule in option.at_least:
            if option.key not in settings:
                continue  # left at its default, it rises to the bound (SluiceConf does the same)
            least = rule.factor * size(rule.reference) + rule.plus
            if size(option.key) < least:
                raw = settings.get(option.key, option.default)
                raise ValueError(
                    f"Invalid value '{raw}' for {option.key}: must be at least {rule.formula()} "
                    f"({render_bytes(least)}): {rule.why} (Sluice options {option.python} and "
                    f"{by_key[rule.reference].python})"
                )


def _check_bounds(option: Option, number: int) -> None:
    if option.power_of_two and (number <= 0 or number & (number - 1) != 0):
        raise _Invalid("not a power of two")
    if (option.min is not None and number < option.min) or (option.max is not None and number > option.max):
        raise _Invalid("out of range")


def _parse_int(option: Option, value: object) -> Tuple[str, Optional[int]]:
    if isinstance(value, bool):
        raise _Invalid("a bool, not a whole number")
    if isinstance(value, str) and _INTEGER.match(value):
        value = int(value)
    if not isinstance(value, int):
        raise _Invalid("not a whole number")
    if not _INT_MIN <= value <= _INT_MAX:
        raise _Invalid("too large")
    return str(value), value


def _parse_double(option: Option, value: object) -> Tuple[str, Optional[int]]:
    if isinstance(value, bool):
        raise _Invalid("a bool, not a number")
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise _Invalid("not a number") from None
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Invalid("not a finite number")
    return repr(float(value)), math.floor(value)


def _parse_boolean(option: Option, value: object) -> Tuple[str, Optional[int]]:
    if isinstance(value, bool):
        return ("true" if value else "false"), None
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower(), None
    raise _Invalid("not True or False")


def _parse_bytes(option: Option, value: object) -> Tuple[str, Optional[int]]:
    if isinstance(value, bool):
        raise _Invalid("a bool, not a size")
    if isinstance(value, int):
        if value < 0:
            raise _Invalid("a negative size")
        size = value
    elif isinstance(value, str) and (match := _BYTES.match(value)):
        unit = (match.group(2) or "b")[0].lower()
        size = int(match.group(1)) << _BYTE_SHIFTS[unit]
    else:
        raise _Invalid("not a size (a number of bytes, or e.g. 32k, 64m, 1g)")
    if size > _LONG_MAX:
        raise _Invalid("too large")
    return render_bytes(size), size


def _parse_duration(option: Option, value: object) -> Tuple[str, Optional[int]]:
    if isinstance(value, bool):
        raise _Invalid("a bool, not a duration")
    if isinstance(value, int):
        millis = value
    elif isinstance(value, datetime.timedelta):
        millis, rest = divmod(value, datetime.timedelta(milliseconds=1))
        if rest:
            raise _Invalid("not a whole number of milliseconds")
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        number, unit = int(match.group(1)), (match.group(2) or "ms").lower()
        if unit == "us":
            millis = abs(number) // 1000 * (-1 if number < 0 else 1)  # truncates, like the JVM
        else:
            millis = number * _DURATION_MS[unit]
    else:
        raise _Invalid("not a duration (milliseconds, a timedelta, or e.g. 100ms, 5s, 2min)")
    if not _LONG_MIN <= millis <= _LONG_MAX:
        raise _Invalid("too large")
    return render_duration(millis), millis


def _parse_enum(option: Option, value: object) -> Tuple[str, Optional[int]]:
    allowed = option.values or ()
    if isinstance(value, str) and value.strip().lower() in allowed:
        return value.strip().lower(), None
    raise _Invalid(f"not one of {', '.join(allowed)}")


def _parse_string(option: Option, value: object) -> Tuple[str, Optional[int]]:
    if not isinstance(value, str):
        raise _Invalid("not a string")
    return value.strip(), None


_PARSERS: Dict[str, Callable[[Option, object], Tuple[str, Optional[int]]]] = {
    "int": _parse_int,
    "double": _parse_double,
    "boolean": _parse_boolean,
    "bytes": _parse_bytes,
    "duration": _parse_duration,
    "enum": _parse_enum,
    "string": _parse_string,
}


def render_bytes(size: int) -> str:
    """A size the way the JVM renders it: the largest unit that divides it (``32k``, ``1g``)."""
    for shift, unit in ((40, "t"), (30, "g"), (20, "m"), (10, "k")):
        if size != 0 and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return f"{size}b"


def render_duration(millis: int) -> str:
    """A duration the way the JVM renders it: ``2min``, ``5s`` or ``100ms``."""
    if millis != 0 and millis % 60_000 == 0:
        return f"{millis // 60_000}min"
    if millis != 0 and millis % 1000 == 0:
        return f"{millis // 1000}s"
    return f"{millis}ms"
