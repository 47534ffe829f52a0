"""The operators' landing page in the admin: the cluster at a glance, refreshing itself.

Sections (each a template under ``templates/admin/queues_app/dashboard/``): GPU cards (in use /
releasing / idle / not ready), the queue tree with one bar per queue and resource (quota,
fair share, allocated and limit on one scale per resource), pending workloads per queue with
their top reason from the last cycle, the last cycles, and a node map grouped by rack.

``dashboard.json`` returns the same sections rendered again (plus the node map as compact
per-node state), so ``static/queues_app/dashboard.js`` swaps them in place every few seconds
without a reload and the HTML has one definition.  Every figure comes from
``queues_app.selectors`` in grouped queries whose cost does not grow with the number of
workloads (see ``manage.py bench_admin``).
"""
from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from queues_app import quantities, selectors
from queues_app.models import Queue

RESOURCES = ("gpu", "cpu", "memory")
SECTIONS = ("cards", "queues", "pending", "cycles")


def _pct(value: float, scale: float) -> float:
    if scale <= 0 or not math.isfinite(value):
        return 0.0
    return round(max(0.0, min(100.0, 100.0 * value / scale)), 2)


def _bar(resource: str, *, allocated: float, fair_share: float, quota: float | None, limit: float | None,
         scale: float) -> dict[str, Any]:
    """One horizontal bar: positions in % of the resource's scale, labels in human units."""
    fmt = lambda v: quantities.queue_amount(resource, v, unit=False)  # noqa: E731
    unit = quantities.UNIT[resource]
    quota_unlimited = quota is None or quota < 0
    limit_unlimited = limit is None or limit < 0
    over_fair = allocated > fair_share * 1.0001 + 1e-9
    over_quota = not quota_unlimited and allocated > quota * 1.0001 + 1e-9
    parts = [f"allocated {fmt(allocated)} {unit}", f"fair share {fmt(fair_share)}",
             "quota unlimited" if quota_unlimited else f"quota {fmt(quota)}",
             "no limit" if limit_unlimited else f"limit {fmt(limit)}"]
    return {
        "resource": resource,
        "allocated_pct": _pct(allocated, scale),
        "fair_share_pct": _pct(fair_share, scale),
        "quota_pct": None if quota_unlimited else _pct(quota, scale),
        "limit_pct": None if limit_unlimited else _pct(limit, scale),
        "limit_beyond": not limit_unlimited and limit > scale,
        "state": "over-fair" if over_fair else ("over-quota" if over_quota else "ok"),
        "label": f"{fmt(allocated)} / {fmt(fair_share)}",
        "title": ", ".join(parts),
        "empty": allocated == 0 and fair_share == 0 and quota_unlimited and limit_unlimited,
    }


def queue_rows(queues: list[Queue], capacity: dict[str, float], pending: dict[int, dict[str, Any]],
               warnings: dict[int, list[str]]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Rows of the queue tree in depth-first order, with bars on one scale per resource."""
    data = []
    for q in queues:
        res = selectors.queue_resources(queue=q)
        st = selectors.queue_status(queue=q)
        values = {}
        for r in RESOURCES:
            row = res.get(r)
            values[r] = {
                "allocated": float(getattr(st, f"allocated_{r}", 0.0) or 0.0) if st else 0.0,
                "fair_share": float(getattr(st, f"fair_share_{r}", 0.0) or 0.0) if st else 0.0,
                "quota": float(row.quota) if row else 0.0,
                "limit": float(row.limit) if row else -1.0,
            }
        data.append((q, values))
    scale = {}
    for r in RESOURCES:
        candidates = [capacity.get(r, 0.0)]
        for _, v in data:
            candidates += [v[r]["allocated"], v[r]["fair_share"]]
            if v[r]["quota"] >= 0:
                candidates.append(v[r]["quota"])
            if 0 <= v[r]["limit"] <= 2 * max(capacity.get(r, 0.0), 1e-9):
                candidates.append(v[r]["limit"])
        scale[r] = max(candidates) or 1.0
    # pending counts rolled up the tree by path, so a parent shows its subtree's backlog
    subtree_pending: dict[int, int] = {}
    for q in queues:
        n = pending.get(q.pk, {}).get("pending", 0)
        if n:
            for seg in q.path.split("."):
                if seg:
                    subtree_pending[int(seg)] = subtree_pending.get(int(seg), 0) + n
    has_children = {q.parent_id for q in queues if q.parent_id}
    rows = []
    for q, v in data:
        info = pending.get(q.pk)
        rows.append({
            "id": q.pk, "name": q.name, "depth": q.depth, "indent": (q.depth - 1) * 1.25,
            "leaf": q.pk not in has_children, "priority": q.priority,
            "url": reverse("admin:queues_app_queue_change", args=[q.pk]),
            "bars": [_bar(r, scale=scale[r], **v[r]) for r in RESOURCES],
            "pending": subtree_pending.get(q.pk, 0),
            "top_reason": info["reasons"][0] if info and info["reasons"] else None,
            "warnings": warnings.get(q.pk, []),
            "pending_url": reverse("admin:queues_app_workload_changelist") + f"?status__exact=Pending&queue__id__exact={q.pk}",
        })
    return rows, scale


def _share(part: float, total: float) -> str:
    """A percentage that never reads 100 before everything is used (127.5 of 128 is 99.6)."""
    if total <= 0:
        return "0"
    pct = 100.0 * part / total
    return quantities.number(math.floor(pct * 10) / 10, 1) if pct < 100 else "100"


def _ago(t: datetime | None, now: datetime) -> str:
    if t is None:
        return "never"
    s = max(0, int((now - t).total_seconds()))
    if s < 90:
        return f"{s} s ago"
    if s < 5400:
        return f"{s // 60} min ago"
    if s < 172800:
        return f"{s // 3600} h ago"
    return f"{s // 86400} days ago"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


NODE_SHADES = 5  # in-use classes u0 (idle) .. u4 (full)


def node_cell(n: dict[str, Any]) -> tuple[str, str]:
    """CSS class and tooltip of one node-map cell."""
    gpus = float(n["gpus"])
    if not n["ready"]:
        cls = "nr"
    elif gpus <= 0:
        cls = "u0 nogpu"
    else:
        frac = min(1.0, n["in_use"] / gpus)
        # u0 idle, u1..u3 a third / two thirds / almost full, u4 every GPU in use
        shade = 0 if frac <= 0 else NODE_SHADES - 1 if frac >= 1 else min(NODE_SHADES - 2, 1 + int(frac * 3))
        cls = f"u{shade}"
    if n["cordoned"]:
        cls += " cordoned"
    if n["releasing"] > 0:
        cls += " releasing"
    state = "not ready" if not n["ready"] else ("cordoned" if n["cordoned"] else "schedulable")
    title = f"{n['name']}: {quantities.number(n['in_use'])}/{quantities.number(gpus)} GPUs in use"
    if n["releasing"]:
        title += f", {quantities.number(n['releasing'])} releasing"
    if n["pipelined"]:
        title += f", {quantities.number(n['pipelined'])} pipelined"
    return cls, f"{title}, {state}"


def dashboard_data(request: HttpRequest | None = None) -> dict[str, Any]:
    """Everything the page shows, computed once per request."""
    now = timezone.now()
    nodes = selectors.cluster_nodes(tenant=None, rack_labels=settings.KAI_DASHBOARD_RACK_LABELS)
    gpus = selectors.cluster_gpu_summary(nodes)
    capacity = selectors.cluster_capacity()
    cycle = selectors.last_applied_cycle(tenant=None)
    pending = selectors.pending_by_queue(tenant=None, cycle=cycle)
    queues = list(selectors.queue_list(tenant=None))
    warnings = selectors.quota_overcommit(tenant=None)
    rows, scale = queue_rows(queues, capacity, pending, warnings)
    names = {q.pk: q.name for q in queues}
    pending_rows = sorted(
        ({"queue": names.get(qid, "?"), "queue_id": qid, **item, "waiting": _ago(item["oldest"], now),
          "url": reverse("admin:queues_app_workload_changelist") + f"?status__exact=Pending&queue__id__exact={qid}"}
         for qid, item in pending.items()),
        key=lambda r: (-r["pending"], r["queue"]))
    cycles = []
    for c in selectors.recent_cycles(tenant=None, limit=8):
        took = (c.finished_at - c.started_at).total_seconds() if c.finished_at else None
        cycles.append({"id": c.pk, "status": c.status, "trigger": c.trigger, "ago": _ago(c.started_at, now),
                       "started_at": c.started_at, "duration": _duration(took), "bound": c.bound_count,
                       "pipelined": c.pipelined_count, "evicted": c.evicted_count, "error": (c.error or "")[:200],
                       "url": reverse("admin:queues_app_schedulingcycle_change", args=[c.pk])})
    racks: list[dict[str, Any]] = []
    node_url = reverse("admin:queues_app_node_change", args=[0]).replace("/0/", "/{}/")  # one reverse, not 2,000
    for n in nodes:
        if not racks or racks[-1]["name"] != (n["rack"] or "no rack label"):
            racks.append({"name": n["rack"] or "no rack label", "nodes": [], "gpus": 0.0, "in_use": 0.0})
        cls, title = node_cell(n)
        racks[-1]["nodes"].append({"id": n["id"], "cls": cls, "title": title,
                                   "url": node_url.format(n["id"])})
        racks[-1]["gpus"] += n["gpus"] if n["ready"] else 0
        racks[-1]["in_use"] += n["in_use"] if n["ready"] else 0
    for r in racks:
        r["summary"] = f"{quantities.number(r['in_use'])} / {quantities.number(r['gpus'])} GPUs in use"
    total = gpus["total"] or 1.0
    parts = [(key, label, gpus[key]) for key, label in (
        ("in_use", "in use"), ("releasing", "releasing"), ("reserved", "reserved by other schedulers"),
        ("idle", "idle"), ("cordoned_idle", "idle on cordoned nodes"), ("not_ready", "on nodes not ready"))]
    return {
        "now": now,
        "refresh_seconds": settings.KAI_DASHBOARD_REFRESH_SECONDS,
        "gpus": gpus,
        "gpu_fmt": {k: quantities.number(v) for k, v in gpus.items()},
        "gpu_parts": [{"key": k, "label": label, "value": quantities.number(v), "pct": _pct(v, total)}
                      for k, label, v in parts if v > 0],
        "gpu_in_use_pct": _share(gpus["in_use"], gpus["total"]),
        "capacity": {r: quantities.queue_amount(r, capacity[r]) for r in RESOURCES},
        "scale": {r: quantities.queue_amount(r, scale[r]) for r in RESOURCES},
        "queues": rows,
        "pending_rows": pending_rows,
        "pending_total": sum(item["pending"] for item in pending.values()),
        "oldest_pending": _ago(min((i["oldest"] for i in pending.values()), default=None), now)
        if pending else "none",
        "last_cycle": cycles[0] if cycles else None,
        "last_applied": {"ago": _ago(cycle.started_at, now), "id": cycle.pk} if cycle else None,
        "cycles": cycles,
        "racks": racks,
        "node_states": [[n["id"], *node_cell(n)] for n in nodes],
        "warnings_total": sum(len(v) for v in warnings.values()),
    }


def render_sections(data: dict[str, Any], request: HttpRequest | None = None) -> dict[str, str]:
    return {name: render_to_string(f"admin/queues_app/dashboard/_{name}.html", data, request=request)
            for name in SECTIONS}


def dashboard_json(request: HttpRequest) -> JsonResponse:
    """The page's sections rendered again plus the node map's per-node state, for the poller."""
    data = dashboard_data(request)
    body = {"generated_at": data["now"].isoformat(), "sections": render_sections(data, request),
            "nodes": data["node_states"]}
    if request.GET.get("nodes") == "html":
        body["nodes_html"] = render_to_string("admin/queues_app/dashboard/_nodes.html", data, request=request)
    response = JsonResponse(body)
    response["Cache-Control"] = "no-store"
    return response
