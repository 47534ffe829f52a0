"""Admin what-if previews: what a queue edit would do in the next cycle, before saving it, and
what N more nodes of one shape would do (the scale-up preview on the node list).

Hooked into ``QueueAdmin`` through :class:`WhatIfAdminMixin` (an extra URL
``<id>/whatif/``) and a button on the queue change form
(``templates/admin/queues_app/queue/change_form.html``).  The page offers the queue's
priority and per-resource quota / over-quota weight / limit, prefilled with the current
values; "Preview" runs the engine on the live snapshot with and without the edit
(``whatif.preview_queue_edit``) and shows, per queue, the fair share before and after, and
which running workloads the next cycle would reclaim or preempt.  Nothing is stored: the
operator saves the change on the normal change form.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.core.exceptions import PermissionDenied
from django.core.validators import MaxValueValidator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path, reverse

from queues_app.cycle import whatif
from queues_app.errors import ApplicationError
from queues_app.models import Node, Queue, Workload
from queues_app.models.validators import validate_unlimited_or_nonnegative
from queues_app.quantities import UNIT, QuotaFormField, queue_amount

RESOURCES = ("gpu", "cpu", "memory")
FIELDS = ("quota", "over_quota_weight", "limit")
UNITS = {"gpu": "GPUs", "cpu": "cores", "memory": "GiB"}


class QueueWhatIfForm(forms.Form):
    """The editable fairness knobs of one queue, typed as on the queue page (GPUs, cores, GiB,
    "unlimited" / "unset"); cleaned to QueueResource units."""

    priority = forms.IntegerField(min_value=-(2**31 - 1), max_value=2**31 - 1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for res in RESOURCES:
            for f in FIELDS:
                self.fields[f"{res}_{f}"] = QuotaFormField(
                    resource=res, kind=f, label=f"{res} {f.replace('_', ' ')}",
                    validators=[validate_unlimited_or_nonnegative, MaxValueValidator(Decimal(2**70))],
                    help_text=UNITS[res] if f != "over_quota_weight" else "")

    def resources(self) -> dict[str, dict[str, Decimal]]:
        d = self.cleaned_data
        return {res: {f: d[f"{res}_{f}"] for f in FIELDS} for res in RESOURCES}


def initial_values(queue: Queue) -> dict[str, Any]:
    values: dict[str, Any] = {"priority": queue.priority}
    for r in queue.resources.all():
        for f in FIELDS:
            values[f"{r.resource}_{f}"] = getattr(r, f)
    return values


def _rows(answer: dict[str, Any], edited: str) -> list[dict[str, Any]]:
    rows = []
    for name, q in answer["queues"].items():
        row: dict[str, Any] = {"name": name, "edited": name == edited, "changed": False, "cells": []}
        for res in RESOURCES:
            b, a = q["fairShareBefore"][res], q["fairShareAfter"][res]
            row["cells"].append({"before": queue_amount(res, b, unit=False), "after": queue_amount(res, a, unit=False),
                                 "allocated": queue_amount(res, q["allocated"][res], unit=False), "changed": b != a})
            row["changed"] |= b != a
        rows.append(row)
    return rows


class WhatIfAdminMixin:
    """Adds ``<id>/whatif/`` to a ModelAdmin of :class:`Queue`."""

    def get_urls(self):  # type: ignore[override]
        urls = super().get_urls()  # type: ignore[misc]
        extra = [path("<path:object_id>/whatif/", self.admin_site.admin_view(self.whatif_view),  # type: ignore[attr-defined]
                      name="queues_app_queue_whatif")]
        return extra + urls

    def whatif_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if not self.has_change_permission(request):  # type: ignore[attr-defined]
            raise PermissionDenied
        try:
            queue = Queue.objects.prefetch_related("resources").get(pk=int(object_id))
        except (Queue.DoesNotExist, ValueError):
            raise Http404("No such queue") from None
        answer = None
        error = None
        if request.method == "POST":
            form = QueueWhatIfForm(request.POST)
            if form.is_valid():
                try:
                    answer = whatif.preview_queue_edit(queue_id=queue.pk, priority=form.cleaned_data["priority"],
                                                          resources=form.resources())
                except ApplicationError as exc:
                    error = exc.message
                    for field, msgs in exc.extra.items():
                        key = field.replace(".", "_")
                        target = key if key in form.fields else None
                        for m in msgs:
                            form.add_error(target, m)
        else:
            form = QueueWhatIfForm(initial=initial_values(queue))
        context = {
            **self.admin_site.each_context(request),  # type: ignore[attr-defined]
            "title": f"What-if: {queue.name}",
            "opts": Queue._meta,
            "original": queue,
            "queue": queue,
            "form": form,
            "answer": answer,
            "rows": _rows(answer, answer["queue"]) if answer else [],
            "error": error,
            "resources": [(r, UNIT[r]) for r in RESOURCES],
            "form_rows": [(res, [form[f"{res}_{f}"] for f in FIELDS]) for res in RESOURCES],
            "change_url": reverse("admin:queues_app_queue_change", args=[queue.pk]),
        }
        return render(request, "admin/queues_app/queue/whatif.html", context)


# ----------------------------------------------------------------------------- scale-up preview

WAITING_FOR = {
    "capacity": "capacity: no node of the cluster (with these added) has room for it; nodes of another shape might",
    "quota": "its queue's quota for non-preemptible work: more nodes do not help",
    "limit": "its queue's limit: more nodes do not help",
    "gang": "the rest of its gang's pods: more nodes do not help",
}


def _parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for part in (text or "").replace("\n", ",").split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise forms.ValidationError(f"{part!r}: write key=value, separated by commas.")
        labels[key.strip()] = value.strip()
    return labels


class ScaleUpForm(forms.Form):
    """N nodes shaped like an existing node, or of an explicit shape."""

    count = forms.IntegerField(min_value=1, max_value=whatif.MAX_PREVIEW_NODES, initial=1)
    like = forms.ChoiceField(required=False, label="shaped like", help_text="copy this node's capacity and labels")
    gpus = forms.IntegerField(required=False, min_value=0)
    gpu_memory_mib = forms.IntegerField(required=False, min_value=0, label="GPU memory (MiB)")
    cpu_millis = forms.IntegerField(required=False, min_value=0, label="cpu (millicores)")
    memory_bytes = forms.IntegerField(required=False, min_value=0, label="memory (bytes)")
    labels = forms.CharField(required=False, help_text="key=value, comma separated")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = list(Node.objects.order_by("name").values_list("name", flat=True)[:2000])
        self.fields["like"].choices = [("", "(explicit shape below)")] + [(n, n) for n in names]

    def clean_labels(self) -> dict[str, str]:
        return _parse_labels(self.cleaned_data.get("labels") or "")

    def shape(self) -> dict[str, Any]:
        d = self.cleaned_data
        if d.get("like"):
            return {"like": d["like"]}
        node = {k: d[k] for k in ("gpus", "gpu_memory_mib", "cpu_millis", "memory_bytes") if d.get(k) is not None}
        node["labels"] = d.get("labels") or {}
        return {"node": node}


def scale_up_rows(answer: dict[str, Any]) -> dict[str, Any]:
    """The preview answer as tables: queues, workloads that would start, workloads still waiting."""
    wid = answer.get("workloads") or {}
    starts = set(answer.get("starts") or [])
    by_queue: dict[str, list[str]] = {}
    started, waiting = [], []
    for job, j in (answer.get("jobs") or {}).items():
        row = {"job": job, "id": wid.get(job), "queue": j["queue"], "after": j["after"],
               "placed": f"{j['placedBefore']} -> {j['placedAfter']}", "nodes": ", ".join(j["nodes"]),
               "new_nodes": bool(set(j["nodes"]) & set(answer.get("nodesAdded") or [])),
               "waiting": j.get("waitingAfter") or "",
               "waiting_text": WAITING_FOR.get(j.get("waitingAfter") or "", "")}
        if job in starts:
            started.append(row)
            by_queue.setdefault(j["queue"], []).append(job)
        elif j.get("waitingAfter"):
            waiting.append(row)
    queues = []
    for name, q in answer["queues"].items():
        cells = []
        for res in RESOURCES:
            b, a = q["fairShareBefore"][res], q["fairShareAfter"][res]
            cells.append({"before": b, "after": a, "changed": b != a,
                          "alloc_before": q["allocated"][res], "alloc_after": q["allocatedAfter"][res]})
        queues.append({"name": name, "cells": cells, "starts": by_queue.get(name, []),
                       "changed": any(c["changed"] or c["alloc_before"] != c["alloc_after"] for c in cells)})
    return {"queues": queues, "started": started, "waiting": waiting}


class ScaleUpAdminMixin:
    """Adds ``scaleup/`` (the scale-up preview) to the ModelAdmin of :class:`Node`."""

    def get_urls(self):  # type: ignore[override]
        urls = super().get_urls()  # type: ignore[misc]
        extra = [path("scaleup/", self.admin_site.admin_view(self.scaleup_view),  # type: ignore[attr-defined]
                      name="queues_app_node_scaleup")]
        return extra + urls

    def scaleup_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):  # type: ignore[attr-defined]
            raise PermissionDenied
        answer, error = None, None
        if request.method == "POST":
            form = ScaleUpForm(request.POST)
            if form.is_valid():
                try:
                    answer = whatif.preview_scale_up(count=form.cleaned_data["count"], **form.shape())
                except ApplicationError as exc:
                    error = exc.message
                    for field, msgs in exc.extra.items():
                        key = field.split(".", 1)[-1]
                        target = key if key in form.fields else None
                        for m in msgs:
                            form.add_error(target, f"{field}: {m}" if target is None else m)
        else:
            form = ScaleUpForm(initial={"count": 1})
        workload_ids = set((answer or {}).get("workloads", {}).values())
        names = dict(Workload.objects.filter(pk__in=workload_ids).values_list("pk", "name")) if workload_ids else {}
        context = {
            **self.admin_site.each_context(request),  # type: ignore[attr-defined]
            "title": "Scale-up preview",
            "opts": Node._meta,
            "form": form,
            "answer": answer,
            "tables": scale_up_rows(answer) if answer else None,
            "workload_names": names,
            "error": error,
            "resources": RESOURCES,
        }
        return render(request, "admin/queues_app/node/scaleup.html", context)
