"""Parsing of Kubernetes quantities and durations into the engine's internal units.

Scenario files (and the Django side, which writes scenario dicts) express resources the way
Kubernetes does: ``cpu: "500m"`` or ``cpu: 2`` (cores), ``memory: "4Gi"`` or a number of bytes,
durations as ``"90s"`` / ``"10m"`` / ``"2h"`` / ``"1d"`` or a number of seconds.  The engine works
in KAI's internal units (cpu millicores, memory bytes, seconds), so everything is converted once
here and the hot paths never see a string.

Every parser raises :class:`UnitError` (a ``ValueError``) with a message that says what was wrong,
without the field path; the loader prefixes the path.  NaN, infinities, booleans and values
beyond :data:`MAX_QUANTITY` are rejected: they are always typos or attacks, and letting them
through would poison the numpy arrays silently.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal

__all__ = [
    "UnitError",
    "MAX_QUANTITY",
    "MAX_DURATION",
    "parse_quantity",
    "parse_cpu",
    "parse_memory",
    "parse_gpu",
    "parse_number",
    "parse_duration",
    "format_cpu",
    "format_memory",
    "format_duration",
]

# Anything larger than this in internal units (bytes, millicores, devices) is refused: 2**63
# bytes is 8 EiB, far beyond any node, and keeps values exactly representable as int64.
MAX_QUANTITY = float(2**63)
# A hundred years in seconds; durations beyond that are refused.
MAX_DURATION = 100 * 365 * 86400.0


class UnitError(ValueError):
    """A value that is not a valid quantity or duration (message has no field path)."""


_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}

# sign, digits with optional fraction, optional decimal exponent, optional suffix
_QUANTITY_RE = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$"
)


def _check_number(value: object) -> float:
    """A plain YAML/JSON number as float; refuses bools, NaN and infinities."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UnitError(f"must be a number, got {type(value).__name__} {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise UnitError(f"must be a finite number, got {value!r}")
    return float(value)


# Scenarios repeat the same few strings ("1Gi", "500m") thousands of times; parsed results are
# cached (Decimal is immutable). Bounded so a generated file cannot grow it without limit.
_STR_CACHE: dict[str, Decimal] = {}
_STR_CACHE_MAX = 4096


def _parse_decimal(value: object) -> Decimal:
    """A quantity string or number as an exact Decimal in base units (sign not checked)."""
    if isinstance(value, str):
        hit = _STR_CACHE.get(value)
        if hit is not None:
            return hit
        amount = _parse_decimal_str(value)
        if len(_STR_CACHE) < _STR_CACHE_MAX:
            _STR_CACHE[value] = amount
        return amount
    x = _check_number(value)
    # repr() is the shortest text that round-trips, so 0.007 stays exactly 0.007
    return Decimal(repr(x)) if isinstance(value, float) else Decimal(int(value))


def _parse_decimal_str(value: str) -> Decimal:
    text = value.strip()
    m = _QUANTITY_RE.match(text)
    if not m:
        raise UnitError(f"is not a Kubernetes quantity: {value!r} (e.g. '500m', '2', '4Gi', '512Mi')")
    try:
        return Decimal(m.group("num")) * _SUFFIXES[m.group("suffix")]
    except ArithmeticError:  # decimal Overflow on absurd exponents
        raise UnitError(f"is too large: {value!r}") from None


def _to_float(amount: Decimal, *, allow_negative: bool, value: object) -> float:
    if amount < 0 and not allow_negative:
        raise UnitError(f"must be >= 0, got {value!r}")
    if amount.copy_abs() > Decimal(MAX_QUANTITY):
        raise UnitError(f"is too large: {value!r}")
    return float(amount)


def parse_quantity(value: object, *, allow_negative: bool = False) -> float:
    """A Kubernetes quantity (``"500m"``, ``"4Gi"``, ``"1e3"``) or number, in base units (a float)."""
    return _to_float(_parse_decimal(value), allow_negative=allow_negative, value=value)


def parse_cpu(value: object, *, allow_negative: bool = False) -> float:
    """cpu (``"500m"``, ``"2"``, or a number of cores) in millicores.

    The conversion is done in decimal arithmetic so ``"7m"`` and ``0.007`` both give exactly
    7.0 millicores (binary floats would give 7.000000000000001 and break whole-unit rounding).
    """
    amount = _parse_decimal(value)
    try:
        amount = amount * 1000
    except ArithmeticError:
        raise UnitError(f"is too large: {value!r}") from None
    return _to_float(amount, allow_negative=allow_negative, value=value)


def parse_memory(value: object, *, allow_negative: bool = False) -> float:
    """memory (``"4Gi"``, ``"512Mi"``, or a number of bytes) in bytes."""
    return parse_quantity(value, allow_negative=allow_negative)


def parse_gpu(value: object, *, allow_negative: bool = False) -> float:
    """gpu devices: a number (a fraction below 1 is a share of one device) or a plain quantity."""
    return parse_quantity(value, allow_negative=allow_negative)


def parse_number(value: object, *, allow_negative: bool = False, maximum: float = MAX_QUANTITY) -> float:
    """A plain finite number (no unit suffix), bounded by ``maximum`` in absolute value."""
    x = _check_number(value)
    if x < 0 and not allow_negative:
        raise UnitError(f"must be >= 0, got {value!r}")
    if abs(x) > maximum:
        raise UnitError(f"is too large: {value!r} (at most {maximum:g})")
    return x


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d|w)")
_DURATION_RE = re.compile(r"^[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ms|s|m|h|d|w))+$")


def parse_duration(value: object, *, allow_negative: bool = False) -> float:
    """A duration (``"90s"``, ``"10m"``, ``"2h"``, ``"1d"``, ``"1h30m"``, or seconds) in seconds."""
    if isinstance(value, str):
        text = value.strip()
        if text and _PLAIN_NUMBER.match(text):
            seconds = float(text)
        elif _DURATION_RE.match(text):
            sign = -1.0 if text.startswith("-") else 1.0
            body = text.lstrip("+-")
            seconds = sign * sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(body))
        else:
            raise UnitError(f"is not a duration: {value!r} (e.g. '90s', '10m', '2h', '1d', or seconds)")
    else:
        seconds = _check_number(value)
    if not math.isfinite(seconds):
        raise UnitError(f"must be a finite duration, got {value!r}")
    if seconds < 0 and not allow_negative:
        raise UnitError(f"must be >= 0, got {value!r}")
    if abs(seconds) > MAX_DURATION:
        raise UnitError(f"is too large: {value!r} (at most 100 years)")
    return seconds


_PLAIN_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")


def _plain(x: float) -> int | float:
    """An integral float as int (so exported scenarios read ``4`` rather than ``4.0``)."""
    return int(x) if float(x).is_integer() else float(x)


def format_cpu(millicores: float) -> str:
    """Millicores back to a scenario value that :func:`parse_cpu` reads as the same number."""
    if float(millicores).is_integer():
        return f"{int(millicores)}m"
    return f"{float(millicores)!r}m"


def format_memory(num_bytes: float) -> int | float:
    """Bytes back to a scenario value (a number of bytes)."""
    return _plain(num_bytes)


def format_duration(seconds: float) -> str | float:
    """Seconds back to a scenario duration: ``"90s"``, or a plain number of seconds for fractions."""
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return float(seconds)
