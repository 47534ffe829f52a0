"""Kubernetes cluster mode (``KAI_CLUSTER_MODE=kubernetes``): what links database rows to cluster
objects, what the cycle asked the cluster to do (the outbox), and where each watch stopped.

Why separate tables rather than columns on Node/Task/Workload: the embedded default has no
cluster; these rows exist only for objects that came from (or act on) a real cluster, so the
engine-facing models stay the same in both modes.
"""
from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone


class KubeNode(models.Model):
    """A node row that mirrors a Kubernetes Node (relist prunes only these)."""

    node = models.OneToOneField("queues_app.Node", on_delete=models.CASCADE, related_name="kube")
    uid = models.CharField(max_length=64, unique=True)
    resource_version = models.CharField(max_length=64, blank=True)
    taints = models.JSONField(default=list, blank=True, help_text="spec.taints as observed.")
    observed_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"node {self.node_id} uid={self.uid}"


class KubeWorkloadRef(models.Model):
    """Which pods make up a workload: a pod-group annotation or the pods' controller owner."""

    workload = models.OneToOneField("queues_app.Workload", on_delete=models.CASCADE, related_name="kube_ref")
    namespace = models.CharField(max_length=253)
    group = models.CharField(max_length=600, help_text="'podgroup/<name>' or '<OwnerKind>/<owner name>' "
                                                       "or 'pod/<name>' for a pod with neither.")
    owner_uid = models.CharField(max_length=64, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=("namespace", "group"), name="kubeworkloadref_unique_group")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.group}"


class KubePod(models.Model):
    """The pod behind a task, as last observed by the sync (never what we wish it to be)."""

    task = models.OneToOneField("queues_app.Task", on_delete=models.CASCADE, related_name="kube_pod")
    uid = models.CharField(max_length=64, unique=True)
    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    resource_version = models.CharField(max_length=64, blank=True)
    node_name = models.CharField(max_length=253, blank=True, help_text="spec.nodeName as observed.")
    phase = models.CharField(max_length=32, blank=True)
    deletion_timestamp = models.DateTimeField(null=True, blank=True)
    last_event_digest = models.CharField(max_length=64, blank=True,
                                         help_text="Digest of the last Kubernetes Event written for this pod "
                                                   "(an unchanged pending reason is not written again).")
    pod_scheduled = models.CharField(
        max_length=120, blank=True,
        help_text="The pod's PodScheduled condition as observed: '<status>:<reason>:<message digest>' "
                  "('' = none). The cycle compares it with the condition it wants (queues_app.kube.conditions).")
    sub_group_name = models.CharField(max_length=253, blank=True,
                                      help_text="The pod's kai.scheduler/subgroup-name label (a leaf of its PodGroup).")
    claims = models.JSONField(default=list, blank=True,
                              help_text="Its ResourceClaims: [[name in the pod, ResourceClaim object name], ...].")
    observed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=("namespace", "name"), name="kubepod_unique_name")]
        indexes = [models.Index(fields=("namespace", "name"))]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class KubeOutboxKind(models.TextChoices):
    BIND = "bind"
    EVICT = "evict"
    EVENT = "event"
    #: a patch of the pod's status subresource (the PodScheduled condition)
    STATUS = "status"


class KubeOutboxStatus(models.TextChoices):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"
    SUPERSEDED = "superseded"


class KubeOutbox(models.Model):
    """One request to the cluster, written in the cycle's apply transaction (so a decision and
    the order to carry it out commit together) and carried out by the dispatcher task."""

    kind = models.CharField(max_length=8, choices=KubeOutboxKind.choices)
    status = models.CharField(max_length=12, choices=KubeOutboxStatus.choices, default=KubeOutboxStatus.PENDING)
    cycle = models.ForeignKey("queues_app.SchedulingCycle", null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="kube_outbox")
    task = models.ForeignKey("queues_app.Task", null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="kube_outbox")
    namespace = models.CharField(max_length=253)
    pod_name = models.CharField(max_length=253)
    pod_uid = models.CharField(max_length=64, blank=True)
    node_name = models.CharField(max_length=253, blank=True, help_text="Bind target.")
    payload = models.JSONField(default=dict, blank=True, help_text="Event: reason, message, type; evict: "
                                                                  "grace_seconds; status: the PodScheduled "
                                                                  "condition (status, reason, message, key).")
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    outcome = models.CharField(max_length=64, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("id",)
        indexes = [models.Index(fields=("status", "next_attempt_at"), name="kubeoutbox_due")]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=KubeOutboxKind.values), name="kubeoutbox_kind_valid"),
            models.CheckConstraint(condition=Q(status__in=KubeOutboxStatus.values), name="kubeoutbox_status_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.pod_name} ({self.status})"


class KubeSyncCursor(models.Model):
    """Where the watch of one resource (``nodes``, ``pods``) stopped: resume from here, relist on 410."""

    resource = models.CharField(max_length=32, unique=True)
    resource_version = models.CharField(max_length=64, blank=True)
    relists = models.PositiveIntegerField(default=0)
    last_relist_at = models.DateTimeField(null=True, blank=True)
    last_event_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.resource}@{self.resource_version}"


class KubeLease(models.Model):
    """A named database lease (leader election of the sync loop); the cycle keeps its own
    lease on SchedulerState."""

    name = models.CharField(max_length=64, unique=True)
    holder = models.CharField(max_length=200, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    renewed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name}: {self.holder or '-'}"


class KubeAutoscaleState(models.Model):
    """What the scale adjuster (``kube/autoscale.py``) keeps between runs: the end of
    its cool-down and its last report.  Everything else it needs is read from the cluster on
    every run (utility pods carry their identity in labels), so a restart loses nothing."""

    name = models.CharField(max_length=64, unique=True)
    cooldown_until = models.DateTimeField(null=True, blank=True,
                                          help_text="No utility pod is created before this time (set when "
                                                    "utility pods that got a node are removed).")
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_report = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name = "Kubernetes scale adjuster"

    def __str__(self) -> str:
        return self.name


class KubePodGroup(models.Model):
    """A KAI PodGroup (``scheduling.run.ai/v2alpha2``) as last observed: the gang (``minMember``) or
    subgroup tree of the workload whose pods name it (``pod-group-name`` annotation)."""

    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64)
    resource_version = models.CharField(max_length=64, blank=True)
    spec = models.JSONField(default=dict, blank=True, help_text="The translated gang: min_member, min_sub_groups, "
                                                               "topology, sub_groups.")
    observed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=("namespace", "name"), name="kubepodgroup_unique_name")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class KubeResourceSlice(models.Model):
    """A ResourceSlice (``resource.k8s.io/v1``): devices a DRA driver publishes for one node. A
    node's devices of a class are the devices of its slices whose driver the class selects, indexed
    in (pool, device name) order -- the indices the engine decides on."""

    name = models.CharField(max_length=253, unique=True)
    uid = models.CharField(max_length=64)
    node_name = models.CharField(max_length=253, blank=True, db_index=True)
    driver = models.CharField(max_length=253)
    pool = models.CharField(max_length=253, blank=True)
    devices = models.JSONField(default=list, blank=True, help_text="Device names, as published.")
    observed_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.name} ({self.driver} on {self.node_name or '-'})"


class KubeResourceClaim(models.Model):
    """A ResourceClaim (``resource.k8s.io/v1``) as last observed: its requests (device class,
    count) make the claims of the pods that reference it; its allocation, the devices they hold."""

    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64)
    resource_version = models.CharField(max_length=64, blank=True)
    requests = models.JSONField(default=list, blank=True, help_text="[[request name, device class, count], ...]")
    allocation = models.JSONField(default=list, blank=True, help_text="[[request, driver, pool, device], ...]")
    reserved_for = models.JSONField(default=list, blank=True, help_text="Pod uids.")
    observed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=("namespace", "name"), name="kuberesourceclaim_unique_name")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"
