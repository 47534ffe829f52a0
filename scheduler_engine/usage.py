"""Time-based fairshare math (spec e): usage windows, decay and normalised usage.

Pure functions (plus one small accumulator class) shared by the engine's simulator and the Django
accounting app (``fairshare_app``); nothing here imports Django.

API
---
Windows (datetimes; aware datetimes are handled in UTC, naive ones as given)
    ``sliding_window_start(now, window_size)``                -> ``now - window_size``
    ``tumbling_window_start(start, window_size, now)``        -> latest reset, or ``None`` (empty window)
    ``previous_cron_occurrence(expr, now)``                   -> latest cron match strictly before ``now``
    ``parse_cron(expr)`` -> :class:`CronSchedule`; aliases ``@hourly @daily @midnight @weekly @monthly
      @yearly @annually``
    ``window_start(window_type, now, *, window_size=None, tumbling_start=None, cron=None)``
    ``period_reset(period, now)``: Slurm ``PriorityUsageResetPeriod`` names (DAILY, WEEKLY = Sunday 00:00,
      MONTHLY, QUARTERLY, YEARLY; NONE -> ``None``) under the same boundary rule.
Decay and usage
    ``decay_weights(timestamps, now, half_life)``             -> ``0.5 ** ((now - t) / h)``; h <= 0: 1
    ``normalized_usage(timestamps, allocated, capacity, *, now, half_life=0, window_start=None)``
        -> ``U = sum(a * d) / sum(cap * d)`` over samples with ``window_start <= t <= now``
    ``fake_history_weights(n_samples, window_size, half_life)`` (KAI simulator fake usage DB weighting)
    ``history_usage(allocated_history, capacity_history, *, window_size, window_type, half_life)``
        (one sample per simulator tick: sliding / tumbling windows counted in ticks)
    ``slurm_decay_factor(dt, half_life)``                     (Slurm's ``(1 - 0.693/HL) ** dt``)
    :class:`DecayedUsage`: incremental decayed accumulator of (allocation, capacity) samples; exact,
      path independent, never negative, never increasing without new samples.

The reset-time rule (spec e.1, from upstream prometheus_test.go): **at an exact boundary the previous
boundary is returned** - the window that just ended is still the current one. Tumbling arithmetic is
done in integer microseconds so no float rounding can move a boundary.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import numpy as np

_US = timedelta(microseconds=1)


# --------------------------------------------------------------------------------------------------
# windows


def sliding_window_start(now: datetime, window_size: timedelta) -> datetime:
    """Start of a sliding window: the last ``window_size`` before ``now``."""
    if window_size <= timedelta(0):
        raise ValueError(f"window_size: must be positive, got {window_size}")
    return now - window_size


def tumbling_window_start(start: datetime, window_size: timedelta, now: datetime) -> datetime | None:
    """Latest reset ``start + k * window_size`` not after ``now``; at an exact boundary, the previous one.

    ``now == start`` returns ``start``; ``start`` in the future returns ``None`` (an empty window).
    Examples (spec e.1): start 10:00, 1h: 12:30 -> 12:00, 13:00 -> 12:00, 13:00:01 -> 13:00.
    """
    if window_size <= timedelta(0):
        raise ValueError(f"window_size: must be positive, got {window_size}")
    if now < start:
        return None
    elapsed = (now - start) // _US
    if elapsed == 0:
        return start
    window = window_size // _US
    k = (elapsed - 1) // window
    return start + k * window * _US


_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTH_NAMES = {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())}
_DOW_NAMES = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}
_FIELDS = (("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}), ("month", 1, 12, _MONTH_NAMES),
           ("day of week", 0, 7, _DOW_NAMES))


@dataclass(frozen=True)
class CronSchedule:
    """A parsed 5-field cron expression (minute hour day-of-month month day-of-week)."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday .. 6 = Saturday (7 is folded into 0)
    days_restricted: bool
    weekdays_restricted: bool

    def day_matches(self, t: datetime) -> bool:
        """Vixie-cron rule: if both day fields are restricted, either may match."""
        dow = (t.weekday() + 1) % 7
        dom_ok = t.day in self.days
        dow_ok = dow in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return dom_ok or dow_ok
        return dom_ok and dow_ok

    def matches(self, t: datetime) -> bool:
        return t.minute in self.minutes and t.hour in self.hours and t.month in self.months and self.day_matches(t)


def _parse_value(text: str, names: dict[str, int], field: str, expr: str) -> int:
    low = text.lower()
    if low in names:
        return names[low]
    if not text.isdigit():
        raise ValueError(f"cron: bad {field} value {text!r} in {expr!r}")
    return int(text)


def _parse_field(text: str, field: str, lo: int, hi: int, names: dict[str, int], expr: str) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        step = 1
        if "/" in part:
            part, step_text = part.split("/", 1)
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"cron: bad step {step_text!r} in {field} of {expr!r}")
            step = int(step_text)
        if part == "*":
            a, b = lo, hi
        elif "-" in part:
            a_text, b_text = part.split("-", 1)
            a, b = _parse_value(a_text, names, field, expr), _parse_value(b_text, names, field, expr)
        else:
            a = _parse_value(part, names, field, expr)
            b = hi if step > 1 else a
        if not (lo <= a <= hi and lo <= b <= hi) or a > b:
            raise ValueError(f"cron: {field} {part!r} out of range {lo}-{hi} in {expr!r}")
        values.update(range(a, b + 1, step))
    return frozenset(values)


def parse_cron(expr: str) -> CronSchedule:
    """Parse ``"m h dom mon dow"`` (numbers, ``*``, ranges, steps, lists, month/day names) or an alias."""
    if not isinstance(expr, str):
        raise ValueError(f"cron: expected a string, got {type(expr).__name__}")
    text = _ALIASES.get(expr.strip().lower(), expr.strip())
    parts = text.split()
    if len(parts) != 5:
        raise ValueError(f"cron: expected 5 fields (minute hour day-of-month month day-of-week), got {expr!r}")
    sets = [_parse_field(p, f, lo, hi, names, expr) for p, (f, lo, hi, names) in zip(parts, _FIELDS)]
    weekdays = frozenset(d % 7 for d in sets[4])
    return CronSchedule(
        minutes=sets[0], hours=sets[1], days=sets[2], months=sets[3], weekdays=weekdays,
        days_restricted=parts[2] != "*", weekdays_restricted=parts[4] != "*",
    )


def _to_naive_utc(t: datetime) -> tuple[datetime, timezone | None]:
    if t.tzinfo is None:
        return t, None
    return t.astimezone(timezone.utc).replace(tzinfo=None), timezone.utc


# a match further back than this many years means the expression (practically) never matches;
# the step bound is enough to cross that span day by day plus the hour/minute steps
_CRON_MAX_YEARS = 30
_CRON_MAX_STEPS = 200_000


def previous_cron_occurrence(expr: str | CronSchedule, now: datetime) -> datetime:
    """The latest time matching ``expr`` strictly before ``now`` (at an exact match: the previous one).

    Examples (spec e.1): hourly at 14:30 -> 14:00, at 14:00 -> 13:00; ``0 */6 * * *`` at 12:00 -> 06:00;
    Mondays 12:00 on Wed 15:00 -> Mon 12:00; monthly 1st on Mar 31 23:00 -> Mar 1.
    Walks backwards skipping whole months / days / hours that cannot match (bounded).
    """
    sched = expr if isinstance(expr, CronSchedule) else parse_cron(expr)
    t, tz = _to_naive_utc(now)
    floor = t.replace(second=0, microsecond=0)
    t = floor - timedelta(minutes=1) if floor == t else floor
    minute = timedelta(minutes=1)
    oldest = t.year - _CRON_MAX_YEARS
    for _ in range(_CRON_MAX_STEPS):
        if t.year < oldest or t.year <= datetime.min.year:
            break
        if t.month not in sched.months:
            t = t.replace(day=1, hour=0, minute=0) - minute
            continue
        if not sched.day_matches(t):
            t = t.replace(hour=0, minute=0) - minute
            continue
        if t.hour not in sched.hours:
            t = t.replace(minute=0) - minute
            continue
        if t.minute not in sched.minutes:
            earlier = [m for m in sched.minutes if m < t.minute]
            if earlier:
                t = t.replace(minute=max(earlier))
            else:
                t = t.replace(minute=0) - minute
            continue
        return t.replace(tzinfo=tz) if tz else t
    raise ValueError(f"cron: {expr!r} has no occurrence in the searched past (does it ever match?)")


def window_start(
    window_type: str,
    now: datetime,
    *,
    window_size: timedelta | None = None,
    tumbling_start: datetime | None = None,
    cron: str | None = None,
) -> datetime | None:
    """Start of the usage window for ``sliding`` | ``tumbling`` | ``cron``; ``None`` = empty window."""
    if window_type == "sliding":
        if window_size is None:
            raise ValueError("window_size: required for a sliding window")
        return sliding_window_start(now, window_size)
    if window_type == "tumbling":
        if window_size is None or tumbling_start is None:
            raise ValueError("tumbling_start and window_size: required for a tumbling window")
        return tumbling_window_start(tumbling_start, window_size, now)
    if window_type == "cron":
        if not cron:
            raise ValueError("cron: required for a cron window")
        return previous_cron_occurrence(cron, now)
    raise ValueError(f"window_type: expected sliding, tumbling or cron, got {window_type!r}")


_SLURM_PERIODS = {
    "DAILY": "0 0 * * *",
    "WEEKLY": "0 0 * * 0",
    "MONTHLY": "0 0 1 * *",
    "QUARTERLY": "0 0 1 1,4,7,10 *",
    "YEARLY": "0 0 1 1 *",
}


def period_reset(period: str, now: datetime) -> datetime | None:
    """Latest reset of a Slurm ``PriorityUsageResetPeriod`` (``NONE`` -> ``None``), same boundary rule."""
    key = str(period).upper()
    if key == "NONE":
        return None
    if key not in _SLURM_PERIODS:
        raise ValueError(f"period: expected one of NONE, {', '.join(_SLURM_PERIODS)}, got {period!r}")
    return previous_cron_occurrence(_SLURM_PERIODS[key], now)


# --------------------------------------------------------------------------------------------------
# decay and normalised usage


def _check_half_life(half_life) -> float:
    h = float(0.0 if half_life is None else half_life)
    if math.isnan(h) or math.isinf(h):
        raise ValueError(f"half_life: must be finite, got {half_life!r}")
    return h


def decay_weights(timestamps, now: float, half_life: float | None) -> np.ndarray:
    """``0.5 ** ((now - t) / h)`` per sample (seconds); ``h <= 0`` or ``None`` disables decay (all 1)."""
    t = np.asarray(timestamps, dtype=np.float64)
    h = _check_half_life(half_life)
    if h <= 0:
        return np.ones_like(t)
    return np.exp2(-(float(now) - t) / h)


def normalized_usage(
    timestamps,
    allocated,
    capacity,
    *,
    now: float,
    half_life: float | None = 0.0,
    window_start: float | None = None,
) -> np.ndarray:
    """``U = sum_t a(t) d(t) / sum_t cap(t) d(t)`` over samples with ``window_start <= t <= now``.

    ``timestamps`` (S,) seconds; ``allocated`` (S, ...) with resources on the last axis (e.g. (S, Q, 3));
    ``capacity`` (S, 3). Both numerator and denominator are decayed, so a queue that held the whole
    cluster for the whole window has U = 1 whatever the half-life. A resource with no capacity in the
    window gives 0. The result is clipped to [0, 1]: the two metrics are sampled separately and may
    briefly disagree, and the engine's contract is a fraction.
    """
    t = np.asarray(timestamps, dtype=np.float64).reshape(-1)
    a = np.asarray(allocated, dtype=np.float64)
    cap = np.asarray(capacity, dtype=np.float64)
    if a.ndim < 2 or a.shape[:1] != t.shape or cap.shape[:1] != t.shape:
        raise ValueError(f"allocated/capacity: expected {t.size} samples, got {a.shape} and {cap.shape}")
    if cap.ndim != 2 or a.shape[-1] != cap.shape[-1]:
        raise ValueError(f"capacity: expected shape (samples, resources) matching allocated, got {cap.shape}")
    for name, arr in (("timestamps", t), ("allocated", a), ("capacity", cap)):
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name}: values must be finite")
    if np.any(a < 0) or np.any(cap < 0):
        raise ValueError("allocated/capacity: values must be >= 0")
    keep = t <= float(now)
    if window_start is not None:
        keep &= t >= float(window_start)
    w = decay_weights(t[keep], now, half_life)
    a_k = a[keep]
    cap_k = cap[keep]
    num = np.tensordot(w, a_k, axes=(0, 0)) if w.size else np.zeros(a.shape[1:])
    den = w @ cap_k if w.size else np.zeros(cap.shape[1])
    den_b = np.broadcast_to(den, num.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.where(den_b > 0, num / np.where(den_b > 0, den_b, 1.0), 0.0)
    return np.clip(u, 0.0, 1.0)


def fake_history_weights(n_samples: int, window_size: int, half_life: float | None) -> np.ndarray:
    """Weights of KAI's simulator fake usage DB: the last ``window_size`` samples, sample i weighted
    ``0.5 ** ((window_size - i) / h)`` (older samples dropped, weight 0); h <= 0 -> 1.

    Returned per sample of the full history (oldest first), so ``weights @ samples`` is the sum.
    """
    if n_samples < 0 or window_size <= 0:
        raise ValueError("n_samples must be >= 0 and window_size > 0")
    w = np.zeros(n_samples)
    kept = min(n_samples, window_size)
    if kept == 0:
        return w
    h = _check_half_life(half_life)
    i = np.arange(kept, dtype=np.float64)
    w[n_samples - kept:] = 1.0 if h <= 0 else np.exp2(-(window_size - i) / h)
    return w


def history_usage(
    allocated_history,
    capacity_history,
    *,
    window_size: int,
    window_type: str = "sliding",
    half_life: float | None = 0.0,
) -> np.ndarray:
    """Usage U for a simulator that records one sample per tick (cycle), ticks 0..n-1, now = tick n.

    ``allocated_history`` (n, Q, 3), ``capacity_history`` (n, 3). ``sliding``: the last ``window_size``
    samples; ``tumbling``: samples since the latest reset at a multiple of ``window_size`` (exact-boundary
    rule: at tick n = k * window_size the window that just ended is still current). A sample at tick t
    weighs ``0.5 ** ((n - t) / h)``, the same relative weighting as KAI's simulator fake usage DB
    (``fake_history_weights``); ``h <= 0`` = no decay. With no samples every U is 0.
    """
    a = np.asarray(allocated_history, dtype=np.float64)
    cap = np.asarray(capacity_history, dtype=np.float64)
    n = a.shape[0]
    if window_size <= 0:
        raise ValueError(f"window_size: must be a positive number of ticks, got {window_size}")
    if window_type == "sliding":
        start = max(0, n - int(window_size))
    elif window_type == "tumbling":
        start = 0 if n == 0 else ((n - 1) // int(window_size)) * int(window_size)
    else:
        raise ValueError(f"window_type: expected sliding or tumbling, got {window_type!r}")
    t = np.arange(n, dtype=np.float64)
    return normalized_usage(t, a, cap, now=float(n), half_life=half_life, window_start=float(start))


def slurm_decay_factor(dt: float, half_life: float) -> float:
    """Slurm multifactor decay over ``dt`` seconds: ``(1 - 0.693 / HL) ** dt``; HL <= 0 -> 1 (no decay).

    Slurm uses the constant 0.693, not ln 2, so one half-life gives ~0.50007; kept for bit-compatible
    Slurm-style reports.
    """
    hl = _check_half_life(half_life)
    if hl <= 0:
        return 1.0
    return float((1.0 - 0.693 / hl) ** float(dt))


# --------------------------------------------------------------------------------------------------
# incremental accumulator

# The stored sums are scaled to an epoch on a fixed grid of whole half-lives; moving to a later epoch
# multiplies by an exact power of two (np.ldexp), so the state depends only on the samples and the
# current time, never on how many steps were taken to get there.
_EPOCH_GRID = 64  # half-lives between epochs: 2**64 growth keeps sums far from overflow
_FLUSH = 2.0 ** -1000  # below this a rebased sum is flushed to 0 (keeps ldexp exact: no subnormals)


class DecayedUsage:
    """Decayed sums of per-queue allocation and cluster capacity, advanced incrementally.

    ``add(t, allocated, capacity, duration=1)`` records one sample at time ``t`` (seconds, non-decreasing);
    ``advance(t)`` moves the clock without usage (a pure decay step); ``decayed(now)`` returns
    ``(num (Q, 3), den (3,))`` = ``sum a * duration * 0.5**((now - t)/h)`` and the same for capacity;
    ``usage(now)`` returns ``num / den`` in [0, 1]; ``reset(t)`` starts a new (tumbling) window.

    Guarantees (property-tested): advancing in k small steps gives bit-for-bit the same state as one
    big step; sums are never negative; without new samples ``decayed(now)`` never increases as ``now``
    grows. ``half_life <= 0`` means no decay (plain sums).
    """

    def __init__(self, n_queues: int, half_life: float | None, *, n_resources: int = 3, origin: float = 0.0):
        self.half_life = _check_half_life(half_life)
        self.origin = float(origin)
        self.n_queues = int(n_queues)
        self.n_resources = int(n_resources)
        self.reset(self.origin)

    # -- time bookkeeping
    def _exponent(self, t: float) -> float:
        """Half-lives elapsed since the origin (0 when decay is off)."""
        if self.half_life <= 0:
            return 0.0
        return (float(t) - self.origin) / self.half_life

    def _epoch_for(self, t: float) -> int:
        return _EPOCH_GRID * math.floor(self._exponent(t) / _EPOCH_GRID)

    def _rebase(self, t: float) -> None:
        target = self._epoch_for(t)
        if target > self._epoch:
            shift = -(target - self._epoch)
            for arr in (self._num, self._den):
                arr[...] = np.ldexp(arr, shift)
                arr[arr < _FLUSH] = 0.0
            self._epoch = target

    def _scale(self, t: float) -> float:
        """``2 ** (x - epoch)`` as ``ldexp(2 ** frac, whole - epoch)``: exact in the power-of-two part."""
        x = self._exponent(t)
        whole = math.floor(x)
        frac = x - whole
        return math.ldexp(2.0 ** frac, whole - self._epoch)

    # -- API
    @property
    def now(self) -> float:
        return self._now

    def reset(self, t: float | None = None) -> None:
        """Forget all samples (start of a tumbling window at ``t``)."""
        t = self.origin if t is None else float(t)
        self._num = np.zeros((self.n_queues, self.n_resources))
        self._den = np.zeros(self.n_resources)
        self._now = t
        self._epoch = self._epoch_for(t)

    def advance(self, t: float) -> None:
        """Move the clock to ``t`` (>= the current time) with no usage: a decay step."""
        t = float(t)
        if not math.isfinite(t):
            raise ValueError(f"t: must be finite, got {t!r}")
        if t < self._now:
            raise ValueError(f"t: time must not go backwards ({t} < {self._now})")
        self._now = t
        self._rebase(t)

    def add(self, t: float, allocated, capacity, duration: float = 1.0) -> None:
        """Record a sample: ``allocated`` (Q, 3) and ``capacity`` (3,) held for ``duration`` at time ``t``."""
        a = np.asarray(allocated, dtype=np.float64).reshape(self.n_queues, self.n_resources)
        cap = np.asarray(capacity, dtype=np.float64).reshape(self.n_resources)
        d = float(duration)
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(cap)) and math.isfinite(d)):
            raise ValueError("allocated/capacity/duration: values must be finite")
        if np.any(a < 0) or np.any(cap < 0) or d < 0:
            raise ValueError("allocated/capacity/duration: values must be >= 0")
        self.advance(t)
        s = self._scale(t) * d
        self._num += a * s
        self._den += cap * s

    def decayed(self, now: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Decayed sums at ``now`` (default: the current time; must not be before it)."""
        now = self._now if now is None else float(now)
        if now < self._now:
            raise ValueError(f"now: must not be before the last sample/advance ({now} < {self._now})")
        x = self._exponent(now)
        whole = math.floor(x)
        frac = x - whole
        factor = 2.0 ** -frac  # in (0.5, 1]
        shift = self._epoch - whole  # <= 0
        num = np.ldexp(self._num * factor, shift)
        den = np.ldexp(self._den * factor, shift)
        return num, den

    def usage(self, now: float | None = None) -> np.ndarray:
        """Normalised usage U (Q, 3) in [0, 1]; 0 where no capacity was recorded."""
        num, den = self.decayed(now)
        den_b = np.broadcast_to(den, num.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.where(den_b > 0, num / np.where(den_b > 0, den_b, 1.0), 0.0)
        return np.clip(u, 0.0, 1.0)
