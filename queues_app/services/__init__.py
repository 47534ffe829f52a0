"""Every domain write to queues_app goes through these functions (keyword-only, typed, atomic):
queues and quotas, workloads, nodes, devices, tenants.

Import from the sub-modules (``queues_app.services.queues`` ...) or from here.  May import: models,
choices, errors, ``queues_app.cycle.contract`` (the engine contract every door checks) and
``queues_app.cycle.config``.  Must not import: the rest of the cycle, ``kube``, ``tasks``, the API.
"""
from queues_app.services.nodes import node_delete, node_set_schedulable, node_upsert
from queues_app.services.queues import (
    queue_create,
    queue_delete,
    queue_set_quota,
    queue_update,
)
from queues_app.services.system import heartbeat_record
from queues_app.services.tenants import (
    tenant_create,
    tenant_grant_queue,
    tenant_revoke_queue,
    tenant_set_members,
    tenant_update,
)
from queues_app.services.workloads import workload_cancel, workload_import, workload_submit

__all__ = [
    "heartbeat_record",
    "node_delete",
    "node_set_schedulable",
    "node_upsert",
    "queue_create",
    "queue_delete",
    "queue_set_quota",
    "queue_update",
    "tenant_create",
    "tenant_grant_queue",
    "tenant_revoke_queue",
    "tenant_set_members",
    "tenant_update",
    "workload_cancel",
    "workload_import",
    "workload_submit",
]
