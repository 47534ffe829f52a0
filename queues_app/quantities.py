"""Quantities as operators read and type them: GPUs, CPU cores, memory in GiB, "unlimited".

The database and the engine keep engine units (queue quotas: gpu devices, cpu cores, memory
bytes; nodes and tasks: cpu millicores, memory bytes, GPU memory MiB) and ``-1`` for
"unlimited" (quota, limit) or "unset" (over-quota weight).  The admin and the dashboard show
and accept human units instead; the conversion lives here once, so a form that displays a
value and parses it back gets the same number (``parse_quota(display_quota_input(x)) == x``).
"""
from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

GIB = 2**30
UNLIMITED = Decimal(-1)

#: The unit shown after a queue quantity of each resource.
UNIT = {"gpu": "GPUs", "cpu": "cores", "memory": "GiB"}
#: Binary and decimal suffixes accepted for memory (no suffix = GiB).
MEMORY_SUFFIX = {
    "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15,
    "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
}
UNLIMITED_WORDS = {"unlimited", "no limit", "∞", "-1"}
UNSET_WORDS = {"unset", "default", "-1"}
_NUMBER = re.compile(r"^\s*([+-]?(?:\d[\d_,]*\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*$")


def number(value: Any, places: int = 2) -> str:
    """A number without trailing zeros and with thousands separators: 64, 118.5, 1,536."""
    if value is None:
        return "—"
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(f):
        return "—"
    text = f"{f:,.{places}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def is_unlimited(value: Any) -> bool:
    try:
        return value is not None and float(value) == -1
    except (TypeError, ValueError):
        return False


def queue_amount(resource: str, value: Any, *, unit: bool = True, unlimited: str = "unlimited") -> str:
    """A queue quantity (QueueResource / QueueStatus units) for reading: ``64 GPUs``,
    ``88 cores``, ``704 GiB``, ``unlimited``."""
    if value is None:
        return "—"
    if is_unlimited(value):
        return unlimited
    f = float(value)
    if resource == "memory":
        f /= GIB
    text = number(f, 1 if resource == "memory" else 2)
    return f"{text} {UNIT[resource]}" if unit else text


def weight(value: Any) -> str:
    if value is None:
        return "—"
    return "unset (1)" if is_unlimited(value) else number(value, 4)


def cores(millis: Any) -> str:
    return "—" if millis is None else f"{number(float(millis) / 1000.0)} cores"


def gib(nbytes: Any, places: int = 1) -> str:
    return "—" if nbytes is None else f"{number(float(nbytes) / GIB, places)} GiB"


def mib_as_gib(mib: Any) -> str:
    return "—" if not mib else f"{number(float(mib) / 1024.0, 1)} GiB"


# ----------------------------------------------------------------------------- form input


def display_quota_input(resource: str, value: Any, *, kind: str = "quota") -> str:
    """What a form field shows for a stored value; ``parse_quota`` reads it back exactly."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        return value
    d = Decimal(str(value))
    if d == UNLIMITED:
        return "unset" if kind == "over_quota_weight" else "unlimited"
    if resource == "memory" and kind != "over_quota_weight":
        for suffix, size in (("", GIB), ("Mi", 2**20), ("Ki", 2**10)):
            if d % size == 0:
                return f"{_plain(d / size)}{suffix}"
        return f"{_plain(d)}B"
    return _plain(d)


def _plain(d: Decimal) -> str:
    text = format(d.normalize(), "f") if d == d.to_integral_value() else format(d, "f").rstrip("0").rstrip(".")
    return text or "0"


def parse_quota(resource: str, text: Any, *, kind: str = "quota") -> Decimal:
    """An operator's input in the units shown (GPUs, cores, GiB or a memory quantity like
    ``512Mi``; ``unlimited`` / ``unset`` / ``-1``) to the stored units (memory in bytes).

    Raises ValidationError with a message that says what is accepted; range checks (no other
    negative, NaN, absurd sizes) stay with the model's validators, the one set of rules.
    """
    if isinstance(text, (Decimal, int, float)) and not isinstance(text, bool):
        return Decimal(str(text))
    raw = "" if text is None else str(text)
    word = raw.strip().lower()
    words = UNSET_WORDS if kind == "over_quota_weight" else UNLIMITED_WORDS
    if word in words:
        return UNLIMITED
    m = _NUMBER.match(raw)
    if not m:
        raise ValidationError(_hint(resource, kind), code="invalid")
    try:
        value = Decimal(m.group(1).replace("_", "").replace(",", ""))
    except InvalidOperation:
        raise ValidationError(_hint(resource, kind), code="invalid") from None
    if not value.is_finite():
        raise ValidationError("Must be a finite number.", code="not_finite")
    suffix = m.group(2).lower()
    if resource == "memory" and kind != "over_quota_weight":
        if suffix not in MEMORY_SUFFIX and suffix != "":
            raise ValidationError(_hint(resource, kind), code="invalid")
        if value == -1:
            return UNLIMITED
        try:
            return (value * (MEMORY_SUFFIX[suffix] if suffix else GIB)).quantize(Decimal(1))
        except InvalidOperation:
            raise ValidationError("The amount is absurdly large.", code="too_large") from None
    if resource == "cpu" and kind != "over_quota_weight" and suffix in ("m",):
        return value / 1000
    if suffix not in ("", "cores", "core", "gpus", "gpu") or (suffix in ("cores", "core") and resource != "cpu") \
            or (suffix in ("gpus", "gpu") and resource != "gpu"):
        raise ValidationError(_hint(resource, kind), code="invalid")
    return value


def _hint(resource: str, kind: str) -> str:
    if kind == "over_quota_weight":
        return "Enter a number >= 0, or 'unset' (counts as 1)."
    if resource == "memory":
        return "Enter GiB (e.g. 512), a quantity such as 512Mi or 2Ti, or 'unlimited'."
    if resource == "cpu":
        return "Enter cores (e.g. 64 or 0.5), millicores such as 500m, or 'unlimited'."
    return "Enter a number of GPUs (e.g. 8 or 0.5), or 'unlimited'."


class QuotaFormField(forms.Field):
    """A quota / over-quota weight / limit typed in the units shown (see :func:`parse_quota`).

    ``prepare_value`` shows a stored value the way ``parse_quota`` reads it back, so an
    untouched row does not count as changed and is not re-saved (no audit row).
    """

    def __init__(self, *, resource: str, kind: str, **kwargs: Any) -> None:
        self.resource, self.kind = resource, kind
        kwargs.setdefault("required", True)
        kwargs.setdefault("widget", forms.TextInput(attrs={"size": 10, "class": f"quota-input quota-{kind}",
                                                           "autocomplete": "off", "spellcheck": "false"}))
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Decimal:
        return parse_quota(self.resource, value, kind=self.kind)

    def prepare_value(self, value: Any) -> str:
        return display_quota_input(self.resource, value, kind=self.kind)

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            new = self.to_python(data)
        except ValidationError:
            return True
        old = UNLIMITED if initial is None or initial == "" else parse_quota(self.resource, initial, kind=self.kind)
        return old != new


class ScaledFormField(forms.Field):
    """A node quantity typed in the units shown (CPU cores, memory GiB, GPU memory GiB) and
    cleaned to the stored integer unit (millicores, bytes, MiB).  ``suffixes`` give other
    accepted units in stored units (``500m`` cores, ``512Mi`` memory); the model's validators
    still check the range."""

    def __init__(self, *, scale: int, unit: str, suffixes: dict[str, int] | None = None, **kwargs: Any) -> None:
        self.scale, self.unit, self.suffixes = scale, unit, {k.lower(): v for k, v in (suffixes or {}).items()}
        kwargs.setdefault("widget", forms.TextInput(attrs={"size": 12, "autocomplete": "off"}))
        kwargs.setdefault("help_text", unit)
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> int | None:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raw = "" if value is None else str(value).strip()
        if raw == "":
            return None
        m = _NUMBER.match(raw)
        suffix = m.group(2).lower() if m else ""
        if not m or (suffix and suffix not in self.suffixes and suffix != self.unit.lower()):
            accepted = ", ".join(sorted(self.suffixes))
            raise ValidationError(f"Enter {self.unit} (e.g. 64){' or a quantity with ' + accepted if accepted else ''}.",
                                  code="invalid")
        try:
            number_ = Decimal(m.group(1).replace("_", "").replace(",", ""))
            factor = self.suffixes.get(suffix, self.scale) if suffix and suffix != self.unit.lower() else self.scale
            stored = (number_ * factor).to_integral_value()
        except InvalidOperation:
            raise ValidationError("The amount is absurdly large.", code="too_large") from None
        if not stored.is_finite() or abs(stored) > 2**63:
            raise ValidationError("The amount is absurdly large.", code="too_large")
        return int(stored)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
            d = Decimal(value) / self.scale
            return _plain(d) if d == d.to_integral_value() else format(d.normalize(), "f")
        return value

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return self.to_python(data) != (None if initial in (None, "") else int(initial))
        except (ValidationError, TypeError, ValueError):
            return True


def node_cpu_field(**kwargs: Any) -> ScaledFormField:
    return ScaledFormField(scale=1000, unit="cores", suffixes={"m": 1}, **kwargs)


def node_memory_field(**kwargs: Any) -> ScaledFormField:
    return ScaledFormField(scale=GIB, unit="GiB", suffixes={k: v for k, v in MEMORY_SUFFIX.items() if k}, **kwargs)


def node_gpu_memory_field(**kwargs: Any) -> ScaledFormField:
    return ScaledFormField(scale=1024, unit="GiB", suffixes={"mi": 1, "mib": 1, "gi": 1024, "gib": 1024}, **kwargs)
