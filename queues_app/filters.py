"""FilterSets applied inside the selectors (one per model).  Invalid filter values become an
ApplicationError naming the filter, like every other bad input."""
from __future__ import annotations

from typing import Any, Mapping

import django_filters
from django.db.models import QuerySet

from queues_app.choices import TaskState, WorkloadStatus
from queues_app.errors import ApplicationError
from queues_app.models import Node, Queue, Task, Workload


class QueueFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(label="Exact queue name")
    name__icontains = django_filters.CharFilter(field_name="name", lookup_expr="icontains", label="Name contains")
    parent = django_filters.CharFilter(field_name="parent__name", label="Parent queue name")
    ancestor = django_filters.CharFilter(method="filter_ancestor", label="Queues strictly below this queue (name)")
    leaf = django_filters.BooleanFilter(method="filter_leaf", label="Only leaves (true) or inner queues (false)")
    top_level = django_filters.BooleanFilter(field_name="parent", lookup_expr="isnull", label="Top-level queues")

    class Meta:
        model = Queue
        fields: list[str] = []

    def filter_ancestor(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        path = Queue.objects.filter(name=value).values_list("path", flat=True).first()
        if path is None:
            return queryset.none()
        return queryset.filter(path__startswith=path).exclude(path=path)

    def filter_leaf(self, queryset: QuerySet, name: str, value: bool | None) -> QuerySet:
        if value is None:
            return queryset
        return queryset.filter(children__isnull=True) if value else queryset.filter(children__isnull=False).distinct()


class WorkloadFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(label="Exact workload name")
    name__icontains = django_filters.CharFilter(field_name="name", lookup_expr="icontains", label="Name contains")
    queue = django_filters.CharFilter(field_name="queue__name", label="Queue name")
    ancestor = django_filters.CharFilter(method="filter_ancestor", label="Workloads anywhere below this queue")
    status = django_filters.MultipleChoiceFilter(choices=WorkloadStatus.choices, label="Status (repeatable)")
    tenant = django_filters.CharFilter(field_name="tenant__name", label="Tenant name (operators)")
    priority__gte = django_filters.NumberFilter(field_name="priority", lookup_expr="gte", label="Priority at least")
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte", label="Created after")

    class Meta:
        model = Workload
        fields: list[str] = []

    def filter_ancestor(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        path = Queue.objects.filter(name=value).values_list("path", flat=True).first()
        if path is None:
            return queryset.none()
        return queryset.filter(queue__path__startswith=path)


class TaskFilter(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=TaskState.choices, label="State (repeatable)")
    node = django_filters.CharFilter(field_name="node__name", label="Node name")
    workload = django_filters.NumberFilter(field_name="workload_id", label="Workload id")

    class Meta:
        model = Task
        fields: list[str] = []


class NodeFilter(django_filters.FilterSet):
    name__icontains = django_filters.CharFilter(field_name="name", lookup_expr="icontains", label="Name contains")
    unschedulable = django_filters.BooleanFilter(label="Cordoned")
    ready = django_filters.BooleanFilter(label="Ready")
    label = django_filters.CharFilter(method="filter_label", label="key=value label match")

    class Meta:
        model = Node
        fields: list[str] = []

    def filter_label(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise ApplicationError("Invalid filter.", extra={"label": ["Use key=value."]})
        if "__" in key:
            raise ApplicationError("Invalid filter.", extra={"label": ["Label keys with '__' cannot be filtered."]})
        # One JSON key transform: dots and slashes in the key are kept verbatim (quoted path).
        return queryset.filter(**{f"labels__{key}": val})


def apply_filterset(filterset_class: type[django_filters.FilterSet], queryset: QuerySet,
                    filters: Mapping[str, Any] | None) -> QuerySet:
    if not filters:
        return queryset
    fs = filterset_class(data=filters, queryset=queryset)
    if not fs.is_valid():
        raise ApplicationError("Invalid filter.", extra={k: [str(m) for m in v] for k, v in fs.errors.items()})
    return fs.qs
