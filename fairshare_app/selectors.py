"""Every read of fairshare_app.  Selectors that expose data take the caller's tenant first:
``tenant=None`` is an operator; a tenant sees its own usage (rows of its workloads) and the
budgets and fair-share rows of the queues granted to it.

``engine_inputs`` / ``normalized_usage`` are what ``queues_app.cycle.engine_io`` puts into the
engine's input (``usage`` block, ``kValue``, budget policies as queue resource overrides).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable, Sequence

from django.db.models import DateTimeField, F, FloatField, Max, Min, Q, QuerySet, Sum, Value
from django.db.models.functions import Substr, TruncDay, TruncHour, TruncMonth

from fairshare_app import sshare
from fairshare_app.choices import BudgetPolicy, SshareAlgorithm
from fairshare_app.clock import db_now, to_epoch
from fairshare_app.models import (
    AccountingInterval,
    AccountingState,
    FairshareSettings,
    GpuBudget,
    NormalizedUsage,
    QueueIntervalStat,
    UsageRecord,
)
from fairshare_app.services.settings import fairshare_settings_get
from fairshare_app.usage import MAX_HALF_LIVES, _weight_expr, decayed_usage
from fairshare_app.windows import period_bounds, reset_start, window_start
from queues_app.choices import TASK_STATES_HOLDING
from queues_app.errors import ApplicationError
from queues_app.models import Queue, QueueResource, QueueStatus, Task, Tenant

GIB = 1024.0 ** 3
GROUP_BY = ("queue", "tenant", "user", "queue_user")
BUCKETS = ("none", "hour", "day", "month")
MAX_REPORT_DAYS = 3660
MAX_CHART_POINTS = 2000
ROOT_KEY = ""


def fairshare_settings() -> FairshareSettings:
    return fairshare_settings_get()


def accounting_state() -> AccountingState | None:
    return AccountingState.objects.filter(pk=1).first()


# ----------------------------------------------------------------------------- engine input


def normalized_usage(*, tenant: Tenant | None = None) -> dict[str, dict[str, float]]:
    """``{queue_name: {gpu, cpu, memory}}`` (fractions of the cluster, 0..1) as last computed by
    the accounting task; queues with no usage are left out (absent = 0 for the engine).

    Usable as ``settings.KAI_USAGE_PROVIDER``.  One query.
    """
    qs = NormalizedUsage.objects.select_related("queue")
    if tenant is not None:
        qs = qs.filter(queue__tenants=tenant)
    out = {}
    for row in qs.order_by("queue__name"):
        values = {r: getattr(row, r) for r in ("gpu", "cpu", "memory") if getattr(row, r) > 0}
        if values:
            out[row.queue.name] = values
    return out


def engine_inputs(*, now: datetime | None = None) -> dict[str, Any]:
    """What the cycle hands the engine from fair-share accounting.

    ``{"usage": {queue: {resource: U}}, "config": {"kValue": k}, "queues": {queue: {resource:
    {field: value}}}}`` -- the last being budget policies of exhausted budgets: ``deprioritize``
    sets the GPU over-quota weight to 0, ``block_over_quota`` sets the GPU limit to the quota.
    A handful of queries whatever the number of queues.
    """
    cfg = fairshare_settings_get()
    now = now or db_now()
    overrides: dict[str, dict[str, dict[str, float]]] = {}
    for status in budget_statuses(tenant=None, now=now, active_only=True):
        if not status.exhausted or status.budget.policy == BudgetPolicy.REPORT_ONLY:
            continue
        name = status.budget.queue.name
        if status.budget.policy == BudgetPolicy.DEPRIORITIZE:
            overrides.setdefault(name, {}).setdefault("gpu", {})["overQuotaWeight"] = 0
        elif status.budget.policy == BudgetPolicy.BLOCK_OVER_QUOTA:
            quota = status.gpu_quota
            overrides.setdefault(name, {}).setdefault("gpu", {})["limit"] = quota if quota >= 0 else -1
    return {"usage": normalized_usage(), "config": {"kValue": float(cfg.k_value)}, "queues": overrides}


# ----------------------------------------------------------------------------- usage reports


def _scoped_records(tenant: Tenant | None) -> QuerySet[UsageRecord]:
    qs = UsageRecord.objects.all()
    return qs if tenant is None else qs.filter(tenant=tenant)


def _check_range(start: datetime, end: datetime) -> None:
    if start is None or end is None:
        raise ApplicationError("Invalid date range.", extra={"start": ["start and end are required."]})
    if end <= start:
        raise ApplicationError("Invalid date range.", extra={"end": ["Must be after start."]})
    if end - start > timedelta(days=MAX_REPORT_DAYS):
        raise ApplicationError("Invalid date range.", extra={"end": [f"The range is at most {MAX_REPORT_DAYS} days."]})


def usage_report(*, tenant: Tenant | None, start: datetime, end: datetime, group_by: str = "queue",
                 bucket: str = "none", queues: Sequence[str] = ()) -> list[dict[str, Any]]:
    """GPU-hours, CPU core-hours and memory GiB-hours per group (and time bucket) in ``[start, end)``.

    An accounting interval counts in the range (and bucket) containing its start; compacted
    history has hourly, then daily resolution.  One grouped query.
    """
    _check_range(start, end)
    if group_by not in GROUP_BY:
        raise ApplicationError("Invalid report.", extra={"group_by": [f"Use one of {', '.join(GROUP_BY)}."]})
    if bucket not in BUCKETS:
        raise ApplicationError("Invalid report.", extra={"bucket": [f"Use one of {', '.join(BUCKETS)}."]})
    qs = _scoped_records(tenant).filter(interval__start__gte=start, interval__start__lt=end)
    if queues:
        qs = qs.filter(queue_name__in=list(queues))
    keys = {"queue": ["queue_name"], "tenant": ["tenant_name"], "user": ["user_name"],
            "queue_user": ["queue_name", "user_name"]}[group_by]
    if bucket != "none":
        trunc = {"hour": TruncHour, "day": TruncDay, "month": TruncMonth}[bucket]
        qs = qs.annotate(period=trunc("interval__start"))
        keys = ["period"] + keys
    rows = qs.values(*keys).annotate(g=Sum("gpu"), c=Sum("cpu"), m=Sum("memory")).order_by(*keys)
    out = []
    for r in rows:
        item = {("queue" if k == "queue_name" else "tenant" if k == "tenant_name" else "user" if k == "user_name"
                 else k): r[k] for k in keys}
        item.update(gpu_hours=(r["g"] or 0.0) / 3600.0, cpu_hours=(r["c"] or 0.0) / 3600.0,
                    memory_gib_hours=(r["m"] or 0.0) / 3600.0 / GIB)
        out.append(item)
    return out


def _tree() -> tuple[dict[int, int | None], dict[int, str]]:
    """The current queue tree: ({id: parent id}, {id: name}), one query."""
    parents: dict[int, int | None] = {}
    names: dict[int, str] = {}
    for qid, pid, name in Queue.objects.values_list("id", "parent_id", "name"):
        parents[qid], names[qid] = pid, name
    return parents, names


def _ancestors_and_self(qid: int, parents: dict[int, int | None]) -> list[int]:
    """``qid`` and every queue above it (bounded: a corrupt cyclic tree cannot hang)."""
    out, cur = [], qid
    while cur is not None and cur in parents and len(out) < 1000:
        out.append(cur)
        cur = parents[cur]
    return out


#: Up to this many named queues, a series reads each subtree with its own grouped query.
SUBTREE_QUERY_MAX = 20


def usage_timeseries(*, tenant: Tenant | None, start: datetime, end: datetime, queues: Sequence[str] = (),
                     max_points: int = MAX_CHART_POINTS) -> dict[str, dict[str, list]]:
    """Per queue: ``{"t": [...], "allocated_gpu": [...], "fair_share_gpu": [...], "usage_gpu": [...]}``
    over ``[start, end)`` for charts (allocation = mean GPUs held over each interval).

    Usage is recorded on leaf queues; a parent queue's allocation is its subtree's sum (as
    ``QueueStatus.allocated_gpu`` and the fair share of a parent are), rolled up the current
    tree.  A ``queues`` filter naming a parent reads its whole subtree.  A few queries: with a
    short ``queues`` list the subtrees are summed in SQL by path prefix (rows = intervals x
    queues), else one query grouped by (interval, queue) is rolled up here.  At most
    ``max_points`` points per series (evenly strided intervals).
    """
    _check_range(start, end)
    intervals = AccountingInterval.objects.filter(start__gte=start, start__lt=end)
    n = intervals.count()
    stride = max(1, -(-n // max(1, min(max_points, MAX_CHART_POINTS))))
    ids = list(intervals.order_by("start").values_list("id", "start", "covered_seconds"))[::stride]
    keep = {i for i, _, _ in ids}
    when = {i: (t, cov) for i, t, cov in ids}
    parents, names = _tree()
    visible: set[str] | None = None
    if tenant is not None:
        visible = set(Queue.objects.filter(tenants=tenant).values_list("name", flat=True))
    wanted: set[str] | None = set(queues) if queues else None
    if visible is not None:
        wanted = visible if wanted is None else wanted & visible
    series: dict[str, dict[str, dict]] = {}

    def slot(name: str) -> dict[str, dict]:
        return series.setdefault(name, {"alloc": {}, "fs": {}, "u": {}})

    # every interval of the range (a range join), or the strided ones by id
    rec = (UsageRecord.objects.filter(interval__start__gte=start, interval__start__lt=end) if stride == 1
           else UsageRecord.objects.filter(interval_id__in=keep))

    def add(name: str, interval_id: int, gpu_seconds: float | None) -> None:
        cov = when[interval_id][1]
        cell = slot(name)["alloc"]
        cell[interval_id] = cell.get(interval_id, 0.0) + ((gpu_seconds or 0.0) / cov if cov else 0.0)

    if wanted is not None and len(wanted) <= SUBTREE_QUERY_MAX:
        # a few named queues (the charts page shows the top level): each subtree summed in SQL,
        # grouped by the ancestor's path prefix, one query per tree depth among them
        paths = dict(Queue.objects.filter(name__in=list(wanted)).values_list("name", "path"))
        by_depth: dict[int, dict[str, str]] = {}
        for name, path in paths.items():
            by_depth.setdefault(len(path), {})[path] = name
        for width, names_at in sorted(by_depth.items()):
            mine = rec.filter(queue__isnull=False).annotate(
                prefix=Substr("queue__path", 1, width)).filter(prefix__in=list(names_at))
            for interval_id, prefix, g in mine.values("interval_id", "prefix").annotate(g=Sum("gpu")).values_list(
                    "interval_id", "prefix", "g"):
                add(names_at[prefix], interval_id, g)
        gone = rec.filter(queue__isnull=True, queue_name__in=list(wanted))  # history of deleted queues
        for interval_id, name, g in gone.values("interval_id", "queue_name").annotate(g=Sum("gpu")).values_list(
                "interval_id", "queue_name", "g"):
            add(name, interval_id, g)
    else:
        if wanted is not None:
            ids_wanted = {qid for qid, name in names.items() if name in wanted}
            below = {qid for qid in parents if ids_wanted.intersection(_ancestors_and_self(qid, parents))}
            rec = rec.filter(Q(queue_name__in=list(wanted)) | Q(queue_id__in=list(below)))
        for r in rec.values("interval_id", "queue_id", "queue_name").annotate(g=Sum("gpu")):
            holders = ([names[q] for q in _ancestors_and_self(r["queue_id"], parents)]
                       if r["queue_id"] in parents else [r["queue_name"]])
            for name in holders:
                if wanted is None or name in wanted:
                    add(name, r["interval_id"], r["g"])
    st = (QueueIntervalStat.objects.filter(interval__start__gte=start, interval__start__lt=end) if stride == 1
          else QueueIntervalStat.objects.filter(interval_id__in=keep))
    if wanted is not None:
        st = st.filter(queue_name__in=list(wanted))
    for s in st.values("interval_id", "queue_name", "fair_share_gpu", "usage_gpu"):
        slot(s["queue_name"])["fs"][s["interval_id"]] = s["fair_share_gpu"]
        slot(s["queue_name"])["u"][s["interval_id"]] = s["usage_gpu"]
    out = {}
    order = [i for i, _, _ in ids]
    for name, d in sorted(series.items()):
        out[name] = {
            "t": [when[i][0] for i in order],
            "allocated_gpu": [d["alloc"].get(i, 0.0) for i in order],
            "fair_share_gpu": [d["fs"].get(i) for i in order],
            "usage_gpu": [d["u"].get(i) for i in order],
        }
    return out


# ----------------------------------------------------------------------------- budgets


@dataclass
class BudgetStatus:
    budget: GpuBudget
    period_start: datetime
    period_end: datetime
    used_gpu_hours: float
    remaining_gpu_hours: float
    burn_rate_gpu_per_hour: float
    projected_exhaustion: datetime | None
    exhausted: bool
    gpu_quota: float
    burn_down: list[tuple[datetime, float]]

    def as_dict(self) -> dict[str, Any]:
        b = self.budget
        return {
            "id": b.pk, "queue": b.queue.name, "period": b.period, "policy": b.policy, "is_active": b.is_active,
            "gpu_hours": float(b.gpu_hours), "period_start": self.period_start, "period_end": self.period_end,
            "used_gpu_hours": self.used_gpu_hours, "remaining_gpu_hours": self.remaining_gpu_hours,
            "burn_rate_gpu_per_hour": self.burn_rate_gpu_per_hour,
            "projected_exhaustion": self.projected_exhaustion, "exhausted": self.exhausted,
            "burn_down": [{"t": t, "remaining_gpu_hours": r} for t, r in self.burn_down],
        }


def budget_list(*, tenant: Tenant | None, active_only: bool = False) -> QuerySet[GpuBudget]:
    """Budgets visible to the caller: a tenant sees budgets of its granted queues and of their
    ancestors (the department budget that limits it)."""
    qs = GpuBudget.objects.select_related("queue")
    if active_only:
        qs = qs.filter(is_active=True)
    if tenant is not None:
        visible: set[int] = set()
        parents = dict(Queue.objects.values_list("id", "parent_id"))
        for qid in tenant.queues.values_list("id", flat=True):
            cur = qid
            while cur is not None and cur not in visible:
                visible.add(cur)
                cur = parents.get(cur)
        qs = qs.filter(queue_id__in=visible)
    return qs.order_by("queue__path", "period")


def budget_get(*, tenant: Tenant | None, pk: int) -> GpuBudget:
    return budget_list(tenant=tenant).get(pk=pk)


def _subtree_ids(root_id: int, children: dict[int | None, list[int]]) -> list[int]:
    out, stack = [], [root_id]
    while stack:
        q = stack.pop()
        out.append(q)
        stack.extend(children.get(q, []))
    return out


def gpus_held_by_queue() -> dict[int, float]:
    """GPUs held right now (Running / Binding / Releasing tasks, what accounting counts as
    usage) per leaf queue id; one grouped query."""
    rows = (Task.objects.filter(state__in=TASK_STATES_HOLDING).values("workload__queue_id")
            .annotate(g=Sum("gpu")).values_list("workload__queue_id", "g"))
    return {qid: float(g or 0) for qid, g in rows}


#: At most this many points in a burn-down series (hourly buckets up to a month, then daily).
BURN_DOWN_HOURLY_UP_TO = timedelta(days=31)


def budget_statuses(*, tenant: Tenant | None, now: datetime | None = None, active_only: bool = False,
                    budgets: Iterable[GpuBudget] | None = None, with_burn_down: bool = False) -> list[BudgetStatus]:
    """Burn-down of each budget in its current period.

    ``used`` = GPU-hours recorded for the budget queue's subtree since the period started;
    ``burn_rate`` = the GPUs the subtree holds right now (a GPU held for an hour burns one
    GPU-hour), so the projection reacts to what runs now rather than averaging over an idle
    night; ``projected_exhaustion`` = now + remaining / burn rate when that falls before the
    period ends, else None.  Queries: budgets, queue tree, quotas, current holdings, one
    grouped usage query per period (hourly buckets with the burn-down).
    """
    now = now or db_now()
    items = list(budgets) if budgets is not None else list(budget_list(tenant=tenant, active_only=active_only))
    if not items:
        return []
    tree = list(Queue.objects.values_list("id", "parent_id"))
    children: dict[int | None, list[int]] = {}
    for qid, pid in tree:
        children.setdefault(pid, []).append(qid)
    quotas = dict(QueueResource.objects.filter(resource="gpu", queue_id__in=[b.queue_id for b in items])
                  .values_list("queue_id", "quota"))
    held = gpus_held_by_queue()
    out = []
    by_period: dict[str, list[GpuBudget]] = {}
    for b in items:
        by_period.setdefault(b.period, []).append(b)
    for period, group in by_period.items():
        start, end = period_bounds(period, now)
        usage = _period_usage(start, now, paths={b.queue.path for b in group}, by_bucket=with_burn_down)
        for b in group:
            ids = _subtree_ids(b.queue_id, children)
            buckets = usage.get(b.queue.path, {})
            used = sum(g for g, _, _ in buckets.values()) / 3600.0
            rate = sum(held.get(q, 0.0) for q in ids)
            budget = float(b.gpu_hours)
            remaining = max(0.0, budget - used)
            projected = None
            if used < budget and rate > 0:
                eta = now + timedelta(hours=remaining / rate)
                projected = eta if eta < end else None
            burn = _burn_down(buckets, start, now, budget) if with_burn_down else []
            out.append(BudgetStatus(b, start, end, used, remaining, rate, projected, used >= budget,
                                    float(quotas.get(b.queue_id, 0)), burn))
    out.sort(key=lambda s: (s.budget.queue.path, s.budget.period))
    return out


_Bucket = tuple[float, datetime, datetime]  # GPU-seconds, first interval start, last interval end


def _period_usage(start: datetime, now: datetime, *, paths: set[str], by_bucket: bool
                  ) -> dict[str, dict[Any, _Bucket]]:
    """``{queue path: {bucket: (gpu-seconds, first start, last end)}}`` recorded in ``[start, now)``
    for the subtrees of the given queues (by tree path prefix, summed in SQL).

    Buckets are hours (days for periods past a month) when the burn-down is asked for, else one
    bucket per queue.  One query (a UNION ALL of one grouped select per tree depth among the
    budgets' queues), returning one row per budget queue and bucket (not per leaf).
    """
    by_width: dict[int, set[str]] = {}
    for path in paths:
        by_width.setdefault(len(path), set()).add(path)
    trunc = TruncHour if (now - start) <= BURN_DOWN_HOURLY_UP_TO else TruncDay
    parts = []
    for width, prefixes in sorted(by_width.items()):
        qs = (UsageRecord.objects.filter(interval__start__gte=start, interval__start__lt=now, queue__isnull=False)
              .annotate(prefix=Substr("queue__path", 1, width)).filter(prefix__in=sorted(prefixes))
              .annotate(p=trunc("interval__start") if by_bucket else Value(None, output_field=DateTimeField())))
        parts.append(qs.values("prefix", "p").annotate(g=Sum("gpu"), first=Min("interval__start"),
                                                       last=Max("interval__end")).order_by())
    out: dict[str, dict[Any, _Bucket]] = {}
    if not parts:
        return out
    rows = parts[0].union(*parts[1:], all=True) if len(parts) > 1 else parts[0]  # one round trip
    for r in rows:
        out.setdefault(r["prefix"], {})[r["p"]] = (r["g"] or 0.0, r["first"], r["last"])
    return out


def _burn_down(buckets: dict[Any, _Bucket], start: datetime, now: datetime, budget: float
               ) -> list[tuple[datetime, float]]:
    """Remaining GPU-hours over the period so far, from the recorded usage.

    Each bucket is placed at the first start and the last end of the accounting intervals
    inside it, so the line stays flat until usage really began and ends where accounting
    ends; a last point at ``now`` carries the value forward.
    """
    out, used, reached = [(start, budget)], 0.0, start
    for _, (g, first, last) in sorted(buckets.items(), key=lambda kv: kv[1][1]):
        if not g:
            continue
        if first > reached:
            out.append((first, max(0.0, budget - used)))
        used += g / 3600.0
        reached = min(last, now)
        out.append((reached, max(0.0, budget - used)))
    if now > reached:
        out.append((now, max(0.0, budget - used)))
    return out


# ----------------------------------------------------------------------------- sshare


def sshare_tree(*, tenant: Tenant | None, now: datetime | None = None, algorithm: str | None = None
                ) -> tuple[sshare.Tree, dict[str, Any]]:
    """The queue tree as Slurm associations, with decayed billing usage, computed.

    Accounts = queues (RawShares = GPU over-quota weight, -1/unset = 1); users of a leaf queue =
    members of the tenants granted it plus owners of usage there (1 share each; usage without an
    owner stays on the account).
    RawUsage = decayed billing-seconds since the latest reset (settings: half-life, reset
    period, billing weights), exact 2**(-age/half_life) decay (not Slurm's 0.693 constant).
    A tenant sees the subtrees of its granted queues (with their ancestors).
    """
    cfg = fairshare_settings_get()
    now = now or db_now()
    algorithm = algorithm or (sshare.CLASSIC if cfg.sshare_algorithm == SshareAlgorithm.CLASSIC else sshare.FAIR_TREE)
    if algorithm not in sshare.ALGORITHMS:
        raise ApplicationError("Invalid report.", extra={"algorithm": [f"Use one of {', '.join(sshare.ALGORITHMS)}."]})
    since = reset_start(cfg.reset_period, now) if cfg.reset_period != "NONE" else None
    half_life = cfg.half_life.total_seconds()
    weights = (cfg.billing_weight_gpu, cfg.billing_weight_cpu, cfg.billing_weight_memory_gib / GIB)

    queues = list(Queue.objects.order_by("path", "name").values("id", "name", "parent_id"))
    shares = {r["queue_id"]: float(r["over_quota_weight"]) for r in
              QueueResource.objects.filter(resource="gpu").values("queue_id", "over_quota_weight")}
    deserved = dict(QueueResource.objects.filter(resource="gpu").values_list("queue_id", "quota"))
    status = {s["queue_id"]: s for s in QueueStatus.objects.values("queue_id", "fair_share_gpu", "allocated_gpu")}
    billing = _billing_by_queue_user(now=now, since=since, half_life_s=half_life, weights=weights)
    name_of = {q["id"]: q["name"] for q in queues}
    # Associations: members of the tenants granted a leaf queue, plus whoever has usage there.
    members: dict[int, set[str]] = {}
    for qid, username in Queue.objects.filter(tenants__is_active=True, tenants__members__isnull=False).values_list(
            "id", "tenants__members__username"):
        members.setdefault(qid, set()).add(username)
    # The cluster association is keyed "" (no queue can have that name), displayed "root".
    assocs = [sshare.Assoc(ROOT_KEY, None, "root", shares=None)]
    has_children = {q["parent_id"] for q in queues if q["parent_id"] is not None}
    for q in queues:
        w = shares.get(q["id"], 1.0)
        st = status.get(q["id"], {})
        extra = {"GPUDeserved": float(deserved.get(q["id"], 0)), "GPUFairShare": st.get("fair_share_gpu"),
                 "GPUAllocated": st.get("allocated_gpu")}
        own = billing.get((q["id"], ""), 0.0)
        extra["own_usage"] = own
        parent = name_of.get(q["parent_id"], ROOT_KEY) if q["parent_id"] is not None else ROOT_KEY
        assocs.append(sshare.Assoc(q["name"], parent, q["name"], shares=1.0 if w < 0 else w,
                                   raw_usage=own, extra=extra))
        if q["id"] in has_children:
            continue
        for user in sorted(members.get(q["id"], set()) | {u for (qid, u) in billing if qid == q["id"] and u}):
            assocs.append(sshare.Assoc(f"{q['name']}/{user}", q["name"], q["name"], user=user, shares=1.0,
                                       raw_usage=billing.get((q["id"], user), 0.0)))
    tree = sshare.Tree(assocs)
    sshare.compute(tree, algorithm)
    meta = {"algorithm": algorithm, "now": now.isoformat(), "usage_since": since.isoformat() if since else None,
            "half_life_seconds": half_life, "billing_weights": {"gpu": weights[0], "cpu": weights[1],
                                                                 "memory_gib": cfg.billing_weight_memory_gib},
            "usage_units": "decayed billing-seconds (GPU-seconds with the default weights)",
            "decay": "exact 0.5 ** (age / half_life)"}
    if tenant is not None:
        meta["visible_accounts"] = sorted(_tenant_accounts(tenant, queues))
    return tree, meta


def _tenant_accounts(tenant: Tenant, queues: list[dict]) -> set[str]:
    parents = {q["id"]: q["parent_id"] for q in queues}
    names = {q["id"]: q["name"] for q in queues}
    out: set[str] = set()
    for qid in tenant.queues.values_list("id", flat=True):
        cur = qid
        while cur is not None:
            out.add(names[cur])
            cur = parents.get(cur)
    return out


def sshare_rows(*, tenant: Tenant | None, now: datetime | None = None, algorithm: str | None = None,
                accounts: Sequence[str] = (), users: Sequence[str] = (), users_only: bool = False
                ) -> tuple[list[sshare.Assoc], dict[str, Any]]:
    """Rows of the report for the caller: a tenant sees its granted queues, their ancestors
    and their users (not sibling teams)."""
    tree, meta = sshare_tree(tenant=tenant, now=now, algorithm=algorithm)
    rows = sshare.select_rows(tree, accounts=accounts, users=users, users_only=users_only)
    if tenant is not None:
        visible = set(meta["visible_accounts"])
        rows = [r for r in rows if r.parent is None or r.account in visible]
    return rows, meta


def _billing_by_queue_user(*, now: datetime, since: datetime | None, half_life_s: float,
                           weights: tuple[float, float, float]) -> dict[tuple[int, str], float]:
    qs = UsageRecord.objects.filter(queue__isnull=False, interval__end__lte=now)
    if since is not None:
        qs = qs.filter(interval__start__gte=since)
    if half_life_s > 0:  # negligible weights; PostgreSQL's POWER raises on underflow
        qs = qs.filter(interval__mid_epoch__gte=to_epoch(now) - MAX_HALF_LIVES * half_life_s)
    w = _weight_expr("interval__mid_epoch", to_epoch(now), half_life_s)
    bill = (F("gpu") * weights[0] + F("cpu") * weights[1] + F("memory") * weights[2]) * w
    return {(r["queue_id"], r["user_name"]): r["b"] or 0.0
            for r in qs.values("queue_id", "user_name").annotate(b=Sum(bill, output_field=FloatField()))}


def queue_usage_now(*, tenant: Tenant | None, now: datetime | None = None) -> dict[str, dict[str, float]]:
    """Normalised usage recomputed right now (not the cached value), for the API and admin."""
    cfg = fairshare_settings_get()
    now = now or db_now()

    sums = decayed_usage(now=now, window_start=window_start(cfg, now), half_life_s=cfg.half_life.total_seconds())
    parents = dict(Queue.objects.values_list("id", "parent_id"))
    names = dict(Queue.objects.values_list("id", "name"))
    visible = None if tenant is None else set(Queue.objects.filter(tenants=tenant).values_list("id", flat=True))
    out = {}
    for qid, u in sums.fractions(parents).items():
        if qid in names and (visible is None or qid in visible):
            out[names[qid]] = {"gpu": float(u[0]), "cpu": float(u[1]), "memory": float(u[2])}
    return out
