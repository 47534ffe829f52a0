"""The queue tree, its per-resource quotas, quota audit history and the cycle-written status."""
from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from queues_app import constants
from queues_app.choices import QuotaField, Resource
from queues_app.models.validators import (
    name_validator,
    validate_duration_bounds,
    validate_unlimited_or_nonnegative,
)
from queues_app.models.workloads import Workload

QUANTITY_DIGITS = 28
QUANTITY_PLACES = 4


class Queue(models.Model):
    """A node of the queue tree.  Only leaves take workloads.

    ``path`` (ancestor ids, fixed width) and ``depth`` are denormalised by the services so the
    admin can list the tree depth-first with one ORDER BY and selectors can filter a subtree
    with ``path__startswith``; ``parent`` stays the source of truth (the engine reads it).
    ``version`` is bumped by every write so a cycle can detect quota edits made after its
    snapshot (reliability.md 2.10).
    """

    PATH_SEGMENT_WIDTH = 12

    name = models.CharField(max_length=constants.MAX_NAME_LENGTH, unique=True, validators=[name_validator])
    description = models.CharField(max_length=500, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children",
        help_text="Empty for a top-level queue.",
    )
    priority = models.IntegerField(
        default=100, validators=[MinValueValidator(-constants.MAX_PRIORITY), MaxValueValidator(constants.MAX_PRIORITY)],
        help_text="Over-quota priority: higher is served first.",
    )
    created_at = models.DateTimeField(default=timezone.now, help_text="Queue age is the last ordering tie-breaker.")
    updated_at = models.DateTimeField(auto_now=True)
    reclaim_min_runtime = models.DurationField(
        null=True, blank=True, validators=[validate_duration_bounds],
        help_text="A running job younger than this is not reclaimed from this queue; empty inherits.",
    )
    preempt_min_runtime = models.DurationField(
        null=True, blank=True, validators=[validate_duration_bounds],
        help_text="A running job younger than this is not preempted inside this queue; empty inherits.",
    )
    path = models.CharField(max_length=1000, editable=False, db_index=True, default="")
    depth = models.PositiveSmallIntegerField(editable=False, default=1)
    version = models.PositiveBigIntegerField(editable=False, default=1)

    class Meta:
        ordering = ("path", "name")
        constraints = [
            models.CheckConstraint(condition=~Q(parent=F("id")), name="queue_not_own_parent"),
            models.CheckConstraint(
                condition=Q(priority__gte=-constants.MAX_PRIORITY) & Q(priority__lte=constants.MAX_PRIORITY),
                name="queue_priority_bounded",
            ),
            models.CheckConstraint(condition=Q(depth__gte=1), name="queue_depth_positive"),
        ]

    def __str__(self) -> str:
        return self.name

    # ------------------------------------------------------------------ tree helpers
    def ancestor_ids(self, *, limit: int = 1000) -> list[int]:
        """Ids from the parent up to the top level, read through ``parent_id`` (not ``path``).

        Stops at ``limit`` steps, so a corrupt cyclic tree inserted by raw SQL cannot hang.
        """
        out: list[int] = []
        current = self.parent_id
        parents = dict(Queue.objects.values_list("id", "parent_id"))
        while current is not None and len(out) < limit:
            out.append(current)
            current = parents.get(current)
        return out

    @property
    def is_leaf(self) -> bool:
        return not self.children.exists() if self.pk else True

    def clean(self) -> None:
        """Tree invariants: no cycles, bounded depth, workloads only on leaves."""
        super().clean()
        if self.parent_id is None:
            return
        if self.pk is not None and self.parent_id == self.pk:
            raise ValidationError({"parent": "A queue cannot be its own parent."})
        max_depth = settings.KAI_MAX_QUEUE_DEPTH
        parents = dict(Queue.objects.values_list("id", "parent_id"))
        if self.parent_id not in parents:
            return  # the FK validation reports the missing parent
        chain, current = [], self.parent_id
        while current is not None:
            if self.pk is not None and current == self.pk:
                raise ValidationError({"parent": "This parent is a descendant of the queue: it would form a cycle."})
            if current in chain:
                raise ValidationError({"parent": "The parent's ancestry already contains a cycle."})
            chain.append(current)
            current = parents.get(current)
        depth = len(chain) + 1 + self._subtree_height(parents)
        if depth > max_depth:
            raise ValidationError({"parent": f"The tree would be {depth} levels deep; at most {max_depth} allowed."})

        if Workload.objects.filter(queue_id=self.parent_id).exists():
            raise ValidationError({"parent": "The parent queue has workloads; only leaf queues take workloads, "
                                             "so it cannot get children."})
        if self.__class__.objects.filter(pk=self.parent_id, tenants__isnull=False).exists():
            raise ValidationError({"parent": "The parent queue is granted to tenants as a leaf; revoke the grants "
                                             "before adding children."})

    def _subtree_height(self, parents: dict[int, int | None]) -> int:
        """Levels below this queue (0 for a leaf or a new queue)."""
        if self.pk is None:
            return 0
        children: dict[int | None, list[int]] = {}
        for qid, pid in parents.items():
            children.setdefault(pid, []).append(qid)
        height, frontier, seen = 0, [self.pk], {self.pk}
        while True:
            nxt = [c for q in frontier for c in children.get(q, []) if c not in seen]
            if not nxt:
                return height
            seen.update(nxt)
            height += 1
            frontier = nxt


class QueueResource(models.Model):
    """Per-resource quota (deserved), over-quota weight and limit of one queue.

    Units are the scenario format's numeric units: gpu devices, cpu cores, memory bytes.
    ``-1`` means unlimited (quota, limit) or unset (weight, treated as 1).  Edited only
    through ``queue_set_quota`` so every change lands in :class:`QuotaChange`.
    """

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="resources")
    resource = models.CharField(max_length=8, choices=Resource.choices)
    quota = models.DecimalField(
        max_digits=QUANTITY_DIGITS, decimal_places=QUANTITY_PLACES, default=Decimal(0),
        validators=[validate_unlimited_or_nonnegative],
        help_text="Deserved amount; -1 = everything the queue requests is deserved.",
    )
    over_quota_weight = models.DecimalField(
        max_digits=QUANTITY_DIGITS, decimal_places=QUANTITY_PLACES, default=Decimal(1),
        validators=[validate_unlimited_or_nonnegative],
        help_text="Share of the over-quota remainder; -1 = unset (treated as 1).",
    )
    limit = models.DecimalField(
        max_digits=QUANTITY_DIGITS, decimal_places=QUANTITY_PLACES, default=constants.UNLIMITED,
        validators=[validate_unlimited_or_nonnegative],
        help_text="Hard cap; -1 = no cap.",
    )

    class Meta:
        ordering = ("queue_id", "resource")
        constraints = [
            models.UniqueConstraint(fields=("queue", "resource"), name="queueresource_unique_per_queue"),
            models.CheckConstraint(condition=Q(resource__in=Resource.values), name="queueresource_resource_valid"),
            models.CheckConstraint(condition=Q(quota=-1) | Q(quota__gte=0), name="queueresource_quota_valid"),
            models.CheckConstraint(condition=Q(limit=-1) | Q(limit__gte=0), name="queueresource_limit_valid"),
            models.CheckConstraint(
                condition=Q(over_quota_weight=-1) | Q(over_quota_weight__gte=0), name="queueresource_weight_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue_id}:{self.resource}"

    def clean(self) -> None:
        super().clean()
        bound = constants.MAX_QUEUE_QUANTITY.get(self.resource)
        errors: dict[str, str] = {}
        for fname in ("quota", "limit"):
            value = getattr(self, fname)
            if bound is not None and value is not None and value.is_finite() and value > bound:
                errors[fname] = f"{value} is absurdly large for {self.resource}; at most {bound}."
        w = self.over_quota_weight
        if w is not None and w.is_finite() and w > constants.MAX_OVER_QUOTA_WEIGHT:
            errors["over_quota_weight"] = f"At most {constants.MAX_OVER_QUOTA_WEIGHT}."
        if errors:
            raise ValidationError(errors)


class QuotaChange(models.Model):
    """Audit history of quota edits: who, when, old -> new.  Written by ``queue_set_quota``
    in the same transaction as the edit, so an edit without its history row cannot commit."""

    queue = models.ForeignKey(Queue, null=True, on_delete=models.SET_NULL, related_name="quota_changes")
    queue_name = models.CharField(max_length=constants.MAX_NAME_LENGTH, help_text="Kept if the queue is deleted.")
    resource = models.CharField(max_length=8, choices=Resource.choices)
    field = models.CharField(max_length=20, choices=QuotaField.choices)
    old_value = models.DecimalField(max_digits=QUANTITY_DIGITS, decimal_places=QUANTITY_PLACES, null=True)
    new_value = models.DecimalField(max_digits=QUANTITY_DIGITS, decimal_places=QUANTITY_PLACES, null=True)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    changed_by_name = models.CharField(max_length=150, blank=True, help_text="Username at the time of the change.")
    source = models.CharField(max_length=32, default="service", help_text="admin, api, command, ...")
    changed_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ("-changed_at", "-id")

    def __str__(self) -> str:
        return f"{self.queue_name}.{self.resource}.{self.field}: {self.old_value} -> {self.new_value}"


class QueueStatus(models.Model):
    """What the latest applied cycle computed for a queue: allocation and fair share.

    Written by the scheduling cycle (issue #4); read by the admin and the API.  Units as in
    :class:`QueueResource` (gpu devices, cpu cores, memory bytes).
    """

    queue = models.OneToOneField(Queue, on_delete=models.CASCADE, related_name="status", primary_key=True)
    cycle = models.ForeignKey("queues_app.SchedulingCycle", null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    allocated_gpu = models.FloatField(default=0.0)
    allocated_cpu = models.FloatField(default=0.0)
    allocated_memory = models.FloatField(default=0.0)
    fair_share_gpu = models.FloatField(default=0.0)
    fair_share_cpu = models.FloatField(default=0.0)
    fair_share_memory = models.FloatField(default=0.0)
    pending_workloads = models.PositiveIntegerField(default=0)
    running_workloads = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "queue statuses"
        constraints = [
            models.CheckConstraint(
                condition=Q(allocated_gpu__gte=0) & Q(allocated_cpu__gte=0) & Q(allocated_memory__gte=0),
                name="queuestatus_allocated_nonnegative",
            ),
        ]

    def __str__(self) -> str:
        return f"status of {self.queue_id}"
