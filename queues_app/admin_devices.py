"""Admin pieces for hierarchical gangs and dynamic resource allocation: device classes, a node's
devices, a workload's subgroup tree with what is placed against what is required.

Registered from ``admin.py``; writes go through ``services.devices`` (derived GPU counts stay
right), reads through ``rollup.sub_group_status`` (the engine's satisfaction rules).
"""
from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from queues_app.admin_mixins import ServiceErrorsMixin
from queues_app.cycle import rollup
from queues_app.models import DeviceClass, Node, Workload
from queues_app.services.devices import device_class_delete, device_class_upsert


@admin.register(DeviceClass)
class DeviceClassAdmin(ServiceErrorsMixin, admin.ModelAdmin):
    """Kubernetes DeviceClasses: what nodes offer and tasks claim. In Kubernetes mode the sync
    keeps them; here an operator may declare them for the embedded cluster."""

    list_display = ("name", "counts_as", "gpu", "description", "updated_at")
    search_fields = ("name",)
    readonly_fields = ("created_at", "updated_at", "version")

    @admin.display(description="counts as GPU", boolean=True)
    def gpu(self, obj: DeviceClass) -> bool:
        return obj.counts_as_gpu

    def save_model(self, request: HttpRequest, obj: DeviceClass, form: Any, change: bool) -> None:
        saved, _ = device_class_upsert(name=form.cleaned_data.get("name", obj.name),
                                       counts_as=form.cleaned_data.get("counts_as", ""),
                                       description=form.cleaned_data.get("description", ""))
        obj.pk = saved.pk
        obj.refresh_from_db()

    def delete_model(self, request: HttpRequest, obj: DeviceClass) -> None:
        device_class_delete(device_class=obj)

    def delete_queryset(self, request: HttpRequest, queryset) -> None:
        for dc in queryset:
            device_class_delete(device_class=dc)


def devices_summary(obj: Node) -> str:
    """``gpu.nvidia.com x4, compute-domain.nvidia.com x1`` (empty: no DRA devices)."""
    return ", ".join(f"{c} x{n}" for c, n in sorted((obj.devices or {}).items()) if n)


def sub_group_tree(obj: Workload) -> str:
    """The workload's subgroup tree as an indented table: placed / required and satisfied."""
    rows = rollup.sub_group_status(obj) if obj and obj.pk else []
    if not rows:
        return "-"
    body = format_html_join(
        "", '<tr><td style="padding-left:{}em">{}</td><td>{} / {} {}</td><td>{}</td><td>{}</td></tr>',
        ((1 + 1.5 * r["depth"], r["name"], r["placed"] if r["required_kind"] == "tasks" else
          sum(1 for c in rows if c["parent"] == r["name"] and c["satisfied"]), r["required"], r["required_kind"],
          "satisfied" if r["satisfied"] else "not satisfied", r["topology_required"] or "") for r in rows))
    root = obj.min_sub_groups if obj.min_sub_groups is not None else sum(1 for r in rows if r["parent"] is None)
    return format_html(
        '<table class="kai-subgroups"><thead><tr><th>subgroup</th><th>placed / required</th><th>gang</th>'
        '<th>topology</th></tr></thead><tbody>{}</tbody></table><p>The workload needs {} top-level subgroup(s) '
        'satisfied; tasks placed under a subgroup count Running, Binding and Pipelined ones.</p>', body, root)
