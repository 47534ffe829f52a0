"""Every domain write to queues_app goes through these functions (keyword-only, typed, atomic):
queues and quotas, workloads, nodes, devices, tenants.

Import from the sub-modules (``queues_app.services.queues`` ...) or from here.  May import: models,
choices, errors, ``queues_app.cycle.contract`` (the engine contract every door checks) and
``queues_app.cycle.config``.  Must not import: the rest of the cycle, ``kube``, ``tasks``, the API.
"""
from queues_app.services.nodes import node_delete, node_set_schedulable, node_upsert, nodes_delete, nodes_set_schedulable
from queues_app.services.queues import (
    queue_create,
    queue_delete,
    queue_set_quota,
    queue_set_quotas,
    queue_update,
)
from queues_app.services.system import CYCLE_TASK_NAME, cycle_trigger, heartbeat_record
from queues_app.services.tenants import (
    api_token_issue,
    tenant_create,
    tenant_grant_queue,
    tenant_revoke_queue,
    tenant_set_members,
    tenant_update,
)
from queues_app.services.workloads import (
    IdempotencyConflict,
    idempotency_scope,
    request_fingerprint,
    workload_cancel,
    workload_import,
    workload_submit,
    workload_submit_idempotent,
    workloads_cancel,
)

__all__ = [
    "CYCLE_TASK_NAME",
    "IdempotencyConflict",
    "api_token_issue",
    "cycle_trigger",
    "heartbeat_record",
    "idempotency_scope",
    "node_delete",
    "node_set_schedulable",
    "node_upsert",
    "nodes_delete",
    "nodes_set_schedulable",
    "queue_create",
    "queue_delete",
    "queue_set_quota",
    "queue_set_quotas",
    "queue_update",
    "request_fingerprint",
    "tenant_create",
    "tenant_grant_queue",
    "tenant_revoke_queue",
    "tenant_set_members",
    "tenant_update",
    "workload_cancel",
    "workload_import",
    "workload_submit",
    "workload_submit_idempotent",
    "workloads_cancel",
]
