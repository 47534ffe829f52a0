"""Admin what-if preview: what a queue edit would do in the next cycle, before saving it.

Hooked into ``QueueAdmin`` through :class:`WhatIfAdminMixin` (an extra URL
``<id>/whatif/``) and a button on the queue change form
(``templates/admin/queues_app/queue/change_form.html``).  The page offers the queue's
priority and per-resource quota / over-quota weight / limit, prefilled with the current
values; "Preview" runs the engine on the live snapshot with and without the edit
(``engine_io.preview_queue_edit``) and shows, per queue, the fair share before and after, and
which running workloads the next cycle would reclaim or preempt.  Nothing is stored: the
operator saves the change on the normal change form.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path, reverse

from queues_app import engine_io
from queues_app.errors import ApplicationError
from queues_app.models import Queue
from queues_app.models.validators import validate_unlimited_or_nonnegative

RESOURCES = ("gpu", "cpu", "memory")
FIELDS = ("quota", "over_quota_weight", "limit")
UNITS = {"gpu": "devices", "cpu": "cores", "memory": "bytes"}


class QueueWhatIfForm(forms.Form):
    """The editable fairness knobs of one queue (QueueResource units; -1 = unlimited / unset)."""

    priority = forms.IntegerField(min_value=-(2**31 - 1), max_value=2**31 - 1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for res in RESOURCES:
            for f in FIELDS:
                self.fields[f"{res}_{f}"] = forms.DecimalField(
                    label=f"{res} {f.replace('_', ' ')}", max_digits=28, decimal_places=4,
                    max_value=Decimal(2**70), validators=[validate_unlimited_or_nonnegative],
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
            row["cells"].append({"before": b, "after": a, "allocated": q["allocated"][res], "changed": b != a})
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
                    answer = engine_io.preview_queue_edit(queue_id=queue.pk, priority=form.cleaned_data["priority"],
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
            "resources": RESOURCES,
            "form_rows": [(res, [form[f"{res}_{f}"] for f in FIELDS]) for res in RESOURCES],
            "change_url": reverse("admin:queues_app_queue_change", args=[queue.pk]),
        }
        return render(request, "admin/queues_app/queue/whatif.html", context)
