"""Input and output shapes of the API.

Plain ``Serializer`` classes with explicit fields (never ``__all__``), so a client can set
nothing the API does not list: ``tenant``, ``status``, ``node``, task states and the
allocations are output only (OWASP API3).  Every number has explicit bounds and every string
and collection a maximum length, so absurd input is a 400 naming the field before it reaches
a service (which validates again: the services are the authority).  Unknown fields are
rejected instead of ignored, so a typo (``min_avaliable``) is not silently dropped.
"""
from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from queues_app import constants, selectors
from queues_app.choices import PendingCategory, Resource
from queues_app.cycle import contract, rollup

name_validator = RegexValidator(constants.NAME_REGEX, "Use letters, digits, '-', '_' or '.', starting and ending "
                                                      "with a letter or digit.")

#: Named priority classes (KAI's defaults); ``priority`` may also be given as a number.
PRIORITY_CLASSES = {"train": 50, "interactive-preemptible": 75, "build": 100, "inference": 125}
MAX_LABEL_VALUE_LENGTH = 63
NO_SUCH_QUEUE = "No queue with this name is available to you."
UNKNOWN_FIELD = "Unknown field."


class StrictSerializer(serializers.Serializer):
    """Rejects keys that are not declared fields (DRF ignores them by default)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({str(k)[:100]: [UNKNOWN_FIELD] for k in unknown[:20]})
        return super().to_internal_value(data)


class LabelMapField(serializers.DictField):
    """``{label key: value}`` with the Kubernetes length limits and at most MAX_LABELS entries."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("child", serializers.CharField(max_length=MAX_LABEL_VALUE_LENGTH, allow_blank=True))
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> dict[str, str]:
        if isinstance(data, dict):
            if len(data) > constants.MAX_LABELS:
                raise serializers.ValidationError(f"At most {constants.MAX_LABELS} labels.")
            for key in data:
                if not isinstance(key, str) or not key or len(key) > constants.MAX_LABEL_LENGTH:
                    raise serializers.ValidationError(
                        f"Label keys must be 1 to {constants.MAX_LABEL_LENGTH} characters.")
        return super().to_internal_value(data)


def quantity(*, max_value: Decimal | int, min_value: Decimal | int = 0, max_digits: int = 28, places: int = 4,
             **kwargs: Any) -> serializers.DecimalField:
    """A finite decimal quantity (DecimalField rejects NaN and infinities), JSON number in and out."""
    return serializers.DecimalField(max_digits=max_digits, decimal_places=places, min_value=Decimal(min_value),
                                    max_value=Decimal(max_value), coerce_to_string=False, **kwargs)


def name_field(*, max_length: int = constants.MAX_NAME_LENGTH, **kwargs: Any) -> serializers.CharField:
    """A name as typed: whitespace is refused, not stripped ("abc\\n" is not "abc")."""
    return serializers.CharField(max_length=max_length, validators=[name_validator], trim_whitespace=False, **kwargs)


def bounded_int(*, min_value: int, max_value: int, **kwargs: Any) -> serializers.IntegerField:
    return serializers.IntegerField(min_value=min_value, max_value=max_value, **kwargs)


# ============================================================================ auth


class TokenInputSerializer(StrictSerializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=1000, trim_whitespace=False, style={"input_type": "password"})


class TokenOutputSerializer(serializers.Serializer):
    token = serializers.CharField()


class MeOutputSerializer(serializers.Serializer):
    username = serializers.CharField()
    is_operator = serializers.BooleanField()
    tenant = serializers.CharField(allow_null=True, help_text="The tenant this request acts for (null: operator).")
    tenants = serializers.ListField(child=serializers.CharField(), help_text="Tenants the user is a member of.")


class ErrorSerializer(serializers.Serializer):
    """Every error response: a summary and the offending fields with their reasons."""

    message = serializers.CharField()
    extra = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))


# ============================================================================ workloads


@extend_schema_field(OpenApiTypes.STR)
class TenantQueueField(serializers.SlugRelatedField):
    """A queue by name, looked up only among the queues the caller may submit to.

    The error does not echo the value: a tenant probing another tenant's queue names gets the
    same answer whether the queue exists or not.
    """

    default_error_messages = {
        "does_not_exist": NO_SUCH_QUEUE,
        "invalid": NO_SUCH_QUEUE,
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="name", **kwargs)

    def get_queryset(self):
        # (the lookup needs no quota rows: without the list's prefetch it is one query)
        return selectors.queue_list(tenant=self.context["tenant"]).prefetch_related(None)

    def to_internal_value(self, data: Any):
        if not isinstance(data, str) or len(data) > constants.MAX_NAME_LENGTH:
            self.fail("invalid")
        return super().to_internal_value(data)


class ClaimInputSerializer(StrictSerializer):
    """One ResourceClaim request: ``count`` devices of a device class (all-or-nothing with the task)."""

    device_class = serializers.CharField(max_length=253, help_text="A declared device class, e.g. gpu.nvidia.com.")
    count = bounded_int(min_value=1, max_value=constants.MAX_NODE_DEVICES, required=False, default=1)


class SubGroupInputSerializer(StrictSerializer):
    """One subgroup of a hierarchical gang: a leaf sets ``min_available``, a subgroup with children
    ``min_sub_groups`` (default all); ``parent`` names another subgroup (empty: the workload)."""

    name = name_field()
    parent = serializers.CharField(max_length=constants.MAX_NAME_LENGTH, required=False, allow_null=True,
                                   default=None)
    min_available = bounded_int(min_value=0, max_value=constants.MAX_TASKS_PER_WORKLOAD, required=False,
                                allow_null=True, help_text="Leaf: tasks placed together (default: all its tasks).")
    min_sub_groups = bounded_int(min_value=1, max_value=constants.MAX_SUBGROUPS_PER_WORKLOAD, required=False,
                                 allow_null=True, help_text="Mid-level: children that must be satisfied (default all).")
    topology_required = serializers.CharField(max_length=constants.MAX_LABEL_LENGTH, required=False,
                                              allow_blank=True, default="",
                                              help_text="Node label: the subgroup's tasks in one domain of it.")
    topology_preferred = serializers.CharField(max_length=constants.MAX_LABEL_LENGTH, required=False,
                                               allow_blank=True, default="")


class TaskInputSerializer(StrictSerializer):
    name = name_field(max_length=constants.MAX_NAME_LENGTH + 12, required=False)
    gpu = quantity(max_value=constants.MAX_TASK_GPU, max_digits=12, required=False, default=Decimal(0),
                   help_text="GPU devices; below 1 = a fraction of one shared device.")
    gpu_memory_mib = bounded_int(min_value=0, max_value=constants.MAX_GPU_MEMORY_MIB, required=False,
                                 allow_null=True, help_text="MiB of one shared device (alternative to a fraction).")
    cpu_millis = bounded_int(min_value=0, max_value=constants.MAX_NODE_CPU_MILLIS, required=False, default=0)
    memory_bytes = bounded_int(min_value=0, max_value=constants.MAX_NODE_MEMORY_BYTES, required=False, default=0)
    priority = bounded_int(min_value=-constants.MAX_PRIORITY, max_value=constants.MAX_PRIORITY, required=False,
                           allow_null=True)
    node_selector = LabelMapField()
    sub_group = serializers.CharField(max_length=constants.MAX_NAME_LENGTH, required=False, allow_null=True,
                                      help_text="The leaf subgroup this task belongs to (workloads with sub_groups).")
    claims = serializers.ListField(child=ClaimInputSerializer(), required=False,
                                   max_length=constants.MAX_DEVICE_CLASSES,
                                   help_text="Devices claimed (dynamic resource allocation).")


class WorkloadCreateInputSerializer(StrictSerializer):
    """A submission: ``tasks`` (one spec per task) or ``replicas`` copies of one ``task``."""

    name = name_field()
    queue = TenantQueueField(help_text="Name of a leaf queue granted to your tenant.")
    priority = bounded_int(min_value=-constants.MAX_PRIORITY, max_value=constants.MAX_PRIORITY, required=False,
                           help_text="Number; or give priority_class.")
    priority_class = serializers.ChoiceField(choices=sorted(PRIORITY_CLASSES), required=False,
                                             help_text="train=50, interactive-preemptible=75, build=100, "
                                                       "inference=125.")
    preemptible = serializers.BooleanField(required=False, allow_null=True, default=None,
                                           help_text="Default: priority below 100.")
    tasks = serializers.ListField(child=TaskInputSerializer(), required=False, min_length=1,
                                  max_length=constants.MAX_TASKS_PER_WORKLOAD)
    replicas = bounded_int(min_value=1, max_value=constants.MAX_TASKS_PER_WORKLOAD, required=False)
    task = TaskInputSerializer(required=False)
    min_available = bounded_int(min_value=1, max_value=constants.MAX_TASKS_PER_WORKLOAD, required=False,
                                help_text="Gang size (default: all tasks).")
    topology_required = serializers.CharField(max_length=constants.MAX_LABEL_LENGTH, required=False,
                                              allow_blank=True, default="")
    topology_preferred = serializers.CharField(max_length=constants.MAX_LABEL_LENGTH, required=False,
                                               allow_blank=True, default="")
    node_selector = LabelMapField()
    preemption_delay_seconds = bounded_int(min_value=0, max_value=constants.MAX_DURATION_SECONDS, required=False,
                                           allow_null=True)
    staleness_grace_period_seconds = bounded_int(min_value=-constants.MAX_DURATION_SECONDS,
                                                 max_value=constants.MAX_DURATION_SECONDS, required=False,
                                                 allow_null=True, help_text="Negative = never evict when stale.")
    sub_groups = serializers.ListField(child=SubGroupInputSerializer(), required=False,
                                       max_length=constants.MAX_SUBGROUPS_PER_WORKLOAD,
                                       help_text="A hierarchical gang: the tree of subgroups (each task names a leaf).")
    min_sub_groups = bounded_int(min_value=1, max_value=constants.MAX_SUBGROUPS_PER_WORKLOAD, required=False,
                                 allow_null=True, help_text="With sub_groups: top-level subgroups that must be "
                                                            "satisfied (default all).")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "tasks" in attrs and ("replicas" in attrs or "task" in attrs):
            raise serializers.ValidationError({"tasks": ["Give either tasks, or replicas with a task."]})
        if "tasks" not in attrs and "task" not in attrs:
            raise serializers.ValidationError({"tasks": ["A workload needs at least one task."]})
        pclass = attrs.pop("priority_class", None)
        if pclass is not None:
            value = PRIORITY_CLASSES[pclass]
            if "priority" in attrs and attrs["priority"] != value:
                raise serializers.ValidationError({"priority": [
                    f"Conflicts with priority_class {pclass!r} ({value})."]})
            attrs["priority"] = value
        count = len(attrs["tasks"]) if "tasks" in attrs else attrs.get("replicas", 1)
        if attrs.get("min_available") is not None and attrs["min_available"] > count:
            raise serializers.ValidationError({"min_available": [f"At most the number of tasks ({count})."]})
        self._check_engine(attrs)
        return attrs

    @staticmethod
    def _check_engine(attrs: dict[str, Any]) -> None:
        """The scheduling engine's own input rules (``gpu`` above 1 in whole devices, ``gpu`` or
        ``gpu_memory_mib`` but not both, Kubernetes label keys, the subgroup tree, claims of declared
        device classes, ...), the same check the service,
        the admin and the cycle apply: what this accepts, the engine schedules."""
        def seconds(key: str) -> timedelta | None:
            return None if attrs.get(key) is None else timedelta(seconds=attrs[key])

        form = {"tasks": [dict(t) for t in attrs["tasks"]]} if "tasks" in attrs else {
            "task": dict(attrs["task"]), "replicas": attrs.get("replicas", 1)}
        problems = contract.workload_problems(
            queue=attrs["queue"].name, name=attrs["name"], priority=attrs.get("priority", 50),
            preemptible=attrs.get("preemptible"), min_available=attrs.get("min_available"),
            node_selector=attrs.get("node_selector") or {}, topology_required=attrs.get("topology_required", ""),
            topology_preferred=attrs.get("topology_preferred", ""),
            preemption_delay=seconds("preemption_delay_seconds"),
            staleness_grace_period=seconds("staleness_grace_period_seconds"),
            sub_groups=[dict(g) for g in attrs.get("sub_groups") or []] or None,
            min_sub_groups=attrs.get("min_sub_groups"), **form)
        if problems:
            renamed = {"preemption_delay": "preemption_delay_seconds",
                       "staleness_grace_period": "staleness_grace_period_seconds"}
            raise serializers.ValidationError({renamed.get(k, k): v for k, v in problems.items()})


class TaskOutputSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    name = serializers.CharField()
    gpu = serializers.DecimalField(max_digits=12, decimal_places=4, coerce_to_string=False)
    gpu_memory_mib = serializers.IntegerField(allow_null=True)
    cpu_millis = serializers.IntegerField()
    memory_bytes = serializers.IntegerField()
    priority = serializers.IntegerField(allow_null=True)
    node_selector = serializers.DictField(child=serializers.CharField())
    state = serializers.CharField()
    node = serializers.CharField(source="node.name", allow_null=True, default=None)
    sub_group = serializers.CharField(source="sub_group.name", allow_null=True, default=None)
    claims = serializers.ListField(child=serializers.DictField())
    devices = serializers.DictField(child=serializers.ListField(child=serializers.IntegerField()),
                                    help_text="Claimed devices held on its node: {device class: [index, ...]}.")


class WorkloadOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    queue = serializers.CharField(source="queue.name")
    tenant = serializers.CharField(source="tenant.name", allow_null=True, default=None)
    owner = serializers.CharField(source="owner.username", allow_null=True, default=None)
    priority = serializers.IntegerField()
    preemptible = serializers.BooleanField()
    min_available = serializers.IntegerField()
    min_sub_groups = serializers.IntegerField(allow_null=True)
    topology_required = serializers.CharField()
    topology_preferred = serializers.CharField()
    node_selector = serializers.DictField(child=serializers.CharField())
    status = serializers.CharField()
    status_message = serializers.CharField()
    task_count = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    @extend_schema_field(OpenApiTypes.INT)
    def get_task_count(self, obj) -> int:
        count = getattr(obj, "task_count", None)
        return int(count) if count is not None else obj.tasks.count()


class SubGroupStatusSerializer(serializers.Serializer):
    """One subgroup with what is placed under it and what it requires (the engine's rules)."""

    name = serializers.CharField()
    parent = serializers.CharField(allow_null=True)
    depth = serializers.IntegerField()
    required = serializers.IntegerField(help_text="min_available (leaf: tasks) or min_sub_groups (children).")
    required_kind = serializers.CharField(help_text="tasks | subgroups")
    placed = serializers.IntegerField(help_text="Running, Binding or Pipelined tasks under it.")
    satisfied = serializers.BooleanField()
    topology_required = serializers.CharField()


class WorkloadDetailOutputSerializer(WorkloadOutputSerializer):
    tasks = TaskOutputSerializer(many=True, source="tasks.all")
    sub_groups = serializers.SerializerMethodField()

    @extend_schema_field(SubGroupStatusSerializer(many=True))
    def get_sub_groups(self, obj) -> list[dict[str, Any]]:
        return SubGroupStatusSerializer(rollup.sub_group_status(obj), many=True).data


class DryRunTaskSerializer(serializers.Serializer):
    name = serializers.CharField()
    status = serializers.CharField()
    node = serializers.CharField(allow_null=True)


class DryRunEventSerializer(serializers.Serializer):
    reason = serializers.CharField()
    message = serializers.CharField()
    task = serializers.CharField(required=False)


class DryRunOutputSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    valid = serializers.BooleanField()
    could_run_now = serializers.BooleanField(help_text="Every task would be bound in the next cycle.")
    status = serializers.CharField(help_text="Binding: starts now; Pipelined: after evictions; Pending: blocked.")
    tasks = DryRunTaskSerializer(many=True)
    blocked_by = DryRunEventSerializer(many=True, help_text="What the engine reported for the candidate.")
    waiting_for = serializers.ChoiceField(
        choices=PendingCategory.choices, allow_null=True,
        help_text="When it would stay Pending: what it would wait for ('capacity' = more nodes would help).")
    queue_fair_share = serializers.DictField(child=serializers.FloatField())
    queue_allocated = serializers.DictField(child=serializers.FloatField())
    skipped_actions = serializers.ListField(child=serializers.CharField())


class EventOutputSerializer(serializers.Serializer):
    reason = serializers.CharField()
    message = serializers.CharField()
    task = serializers.CharField(allow_null=True)
    cycle = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()


class WhyOutputSerializer(serializers.Serializer):
    """Why a workload is pending (or was evicted), in words and numbers."""

    workload = serializers.IntegerField()
    status = serializers.CharField()
    summary = serializers.CharField(help_text="The latest reason in one sentence.")
    position_in_queue = serializers.IntegerField(allow_null=True, help_text="1 = next in its queue (Pending only).")
    pending_in_queue = serializers.IntegerField()
    estimated_start = serializers.DateTimeField(allow_null=True)
    estimated_start_note = serializers.CharField()
    last_cycle_at = serializers.DateTimeField(allow_null=True)
    waiting_for = serializers.ChoiceField(
        choices=PendingCategory.choices, allow_null=True,
        help_text="Pending only: what it waits for. 'capacity' is the only one more nodes (a cluster autoscaler) "
                  "can fix; 'quota' / 'limit' are its queue's, 'gang' its missing pods, 'invalid' its configuration.")
    waiting_for_note = serializers.CharField(help_text="waiting_for in one sentence ('' when not pending).")
    last_eviction = EventOutputSerializer(allow_null=True)
    events = EventOutputSerializer(many=True)
    sub_groups = SubGroupStatusSerializer(many=True, help_text="Per subgroup: placed / required and whether it is "
                                                               "satisfied (empty without subgroups).")


# ============================================================================ queues


class ResourceStatementSerializer(serializers.Serializer):
    quota = serializers.FloatField(help_text="Deserved amount; -1 = unlimited.")
    limit = serializers.FloatField(help_text="Hard cap; -1 = none.")
    over_quota_weight = serializers.FloatField(help_text="-1 = unset (treated as 1).")
    allocated = serializers.FloatField()
    fair_share = serializers.FloatField()
    decayed_usage = serializers.FloatField(help_text="Decayed historical usage (0..1 of the cluster) from "
                                                     "fairshare_app; 0 when usage accounting is off.")


class QueueResourcesSerializer(serializers.Serializer):
    gpu = ResourceStatementSerializer(help_text="GPU devices.")
    cpu = ResourceStatementSerializer(help_text="CPU cores.")
    memory = ResourceStatementSerializer(help_text="Memory bytes.")


class QueueOutputSerializer(serializers.Serializer):
    """A queue's fairness statement."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    parent = serializers.CharField(allow_null=True)
    description = serializers.CharField()
    depth = serializers.IntegerField()
    priority = serializers.IntegerField()
    resources = QueueResourcesSerializer()
    pending_workloads = serializers.IntegerField()
    running_workloads = serializers.IntegerField()
    usage_source = serializers.CharField(help_text="Where decayed_usage comes from ('unavailable' = 0).")
    status_updated_at = serializers.DateTimeField(allow_null=True, help_text="When a cycle last wrote allocations.")
    version = serializers.IntegerField()
    warnings = serializers.ListField(
        child=serializers.CharField(),
        help_text="Quota overcommit of this queue's children, or of its siblings under its parent: allowed "
                  "(as in KAI), but the children cannot all get their quota at once.")


#: Largest quota / limit the API accepts (about 4.5e15: 4 PiB of memory in bytes, far beyond any
#: GPU or core count).  Below 2**53 so every accepted value is exact as a JSON number; -1 means
#: unlimited.  The services check the per-resource bounds (constants.MAX_QUEUE_QUANTITY) too.
MAX_API_QUANTITY = 2**52


class QuotaValuesInputSerializer(StrictSerializer):
    """-1 or a finite number >= 0 (the service rejects other negatives with the field name)."""

    quota = quantity(min_value=-1, max_value=MAX_API_QUANTITY, required=False)
    over_quota_weight = quantity(min_value=-1, max_value=constants.MAX_OVER_QUOTA_WEIGHT, required=False)
    limit = quantity(min_value=-1, max_value=MAX_API_QUANTITY, required=False)


class QuotasInputSerializer(StrictSerializer):
    gpu = QuotaValuesInputSerializer(required=False)
    cpu = QuotaValuesInputSerializer(required=False)
    memory = QuotaValuesInputSerializer(required=False)


class QueueCreateInputSerializer(StrictSerializer):
    name = name_field()
    parent = serializers.CharField(max_length=constants.MAX_NAME_LENGTH, required=False, allow_null=True,
                                   help_text="Parent queue name; empty for a top-level queue.")
    priority = bounded_int(min_value=-constants.MAX_PRIORITY, max_value=constants.MAX_PRIORITY, required=False)
    description = serializers.CharField(max_length=500, required=False, allow_blank=True)
    reclaim_min_runtime_seconds = bounded_int(min_value=0, max_value=constants.MAX_DURATION_SECONDS,
                                              required=False, allow_null=True)
    preempt_min_runtime_seconds = bounded_int(min_value=0, max_value=constants.MAX_DURATION_SECONDS,
                                              required=False, allow_null=True)
    quotas = QuotasInputSerializer(required=False)


class QueueUpdateInputSerializer(StrictSerializer):
    name = name_field(required=False)
    parent = serializers.CharField(max_length=constants.MAX_NAME_LENGTH, required=False, allow_null=True)
    priority = bounded_int(min_value=-constants.MAX_PRIORITY, max_value=constants.MAX_PRIORITY, required=False)
    description = serializers.CharField(max_length=500, required=False, allow_blank=True)
    reclaim_min_runtime_seconds = bounded_int(min_value=0, max_value=constants.MAX_DURATION_SECONDS,
                                              required=False, allow_null=True)
    preempt_min_runtime_seconds = bounded_int(min_value=0, max_value=constants.MAX_DURATION_SECONDS,
                                              required=False, allow_null=True)


class QuotaChangeOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    queue = serializers.CharField(source="queue_name")
    resource = serializers.ChoiceField(choices=Resource.values)
    field = serializers.CharField()
    old_value = serializers.DecimalField(max_digits=28, decimal_places=4, coerce_to_string=False, allow_null=True)
    new_value = serializers.DecimalField(max_digits=28, decimal_places=4, coerce_to_string=False, allow_null=True)
    changed_by = serializers.CharField(source="changed_by_name")
    source = serializers.CharField()
    changed_at = serializers.DateTimeField()


# ============================================================================ nodes and cycles


class NodeInputSerializer(StrictSerializer):
    """Create or update a node (PUT/POST carry a name; PATCH may omit every field)."""

    name = name_field(max_length=253)
    gpus = bounded_int(min_value=0, max_value=constants.MAX_NODE_GPUS, required=False)
    gpu_memory_mib = bounded_int(min_value=0, max_value=constants.MAX_GPU_MEMORY_MIB, required=False)
    cpu_millis = bounded_int(min_value=0, max_value=constants.MAX_NODE_CPU_MILLIS, required=False)
    memory_bytes = bounded_int(min_value=0, max_value=constants.MAX_NODE_MEMORY_BYTES, required=False)
    labels = LabelMapField()
    unschedulable = serializers.BooleanField(required=False)
    ready = serializers.BooleanField(required=False)
    reserved_gpus = quantity(max_value=constants.MAX_NODE_GPUS, max_digits=12, required=False)
    reserved_cpu_millis = bounded_int(min_value=0, max_value=constants.MAX_NODE_CPU_MILLIS, required=False)
    reserved_memory_bytes = bounded_int(min_value=0, max_value=constants.MAX_NODE_MEMORY_BYTES, required=False)
    devices = serializers.DictField(child=bounded_int(min_value=0, max_value=constants.MAX_NODE_DEVICES),
                                    required=False, allow_empty=True,
                                    help_text="DRA devices offered: {device class: count}.")


class NodeUpdateInputSerializer(NodeInputSerializer):
    name = None  # a node is renamed by deleting and re-creating it (the cluster names it)


class NodeOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    gpus = serializers.IntegerField()
    gpu_memory_mib = serializers.IntegerField()
    cpu_millis = serializers.IntegerField()
    memory_bytes = serializers.IntegerField()
    labels = serializers.DictField(child=serializers.CharField())
    unschedulable = serializers.BooleanField()
    ready = serializers.BooleanField()
    reserved_gpus = serializers.DecimalField(max_digits=12, decimal_places=4, coerce_to_string=False)
    reserved_cpu_millis = serializers.IntegerField()
    reserved_memory_bytes = serializers.IntegerField()
    devices = serializers.DictField(child=serializers.IntegerField())
    allocated_gpus = serializers.FloatField()
    allocated_cpu_millis = serializers.FloatField()
    allocated_memory_bytes = serializers.FloatField()
    version = serializers.IntegerField()


@extend_schema_field({
    "type": "object",
    "description": "Seconds per phase (lease, statistics, snapshot, load, compute, plan, apply, total); "
                   "``engine`` holds the engine's own phases (open, allocate, ..., total).",
    "additionalProperties": {"oneOf": [{"type": "number"},
                                       {"type": "object", "additionalProperties": {"type": "number"}}]},
})
class PhaseDurationsField(serializers.Field):
    """``{phase: seconds}`` with one nested level (``engine``); anything else is left out, so an
    odd value in a stored record can never turn the list into a 500."""

    def to_representation(self, value: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, item in (value or {}).items() if isinstance(value, dict) else ():
            if isinstance(item, dict):
                out[str(key)] = {str(k): float(v) for k, v in item.items()
                                 if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
            elif isinstance(item, (int, float)) and not isinstance(item, bool) and math.isfinite(item):
                out[str(key)] = float(item)
        return out


class CycleOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    generation = serializers.IntegerField(allow_null=True)
    status = serializers.CharField()
    trigger = serializers.CharField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    bound_count = serializers.IntegerField()
    pipelined_count = serializers.IntegerField()
    evicted_count = serializers.IntegerField()
    quarantined_count = serializers.IntegerField(help_text="Workloads the engine refused (left Pending, Invalid).")
    phase_durations = PhaseDurationsField()
    error = serializers.CharField(help_text="Why the cycle failed / was skipped; for an applied cycle, what was "
                                            "quarantined.")


class CycleTriggerOutputSerializer(serializers.Serializer):
    queued = serializers.BooleanField()
    task = serializers.CharField(help_text="Celery task name that was enqueued.")
