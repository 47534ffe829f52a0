"""Limits and lock keys.  Bounds exist so absurd input (1e30 GPUs) is a field error, not an
overflow 500 or a cluster that the engine cannot represent."""
from __future__ import annotations

from decimal import Decimal

#: The value meaning "unlimited" for quota and limit, and "unset" for over-quota weight.
UNLIMITED = Decimal(-1)

#: Upper bounds for quantities (scenario units: gpu devices, cpu cores, memory bytes).
MAX_QUEUE_QUANTITY = {
    "gpu": Decimal(10**7),
    "cpu": Decimal(10**9),
    "memory": Decimal(2**70),  # 1 ZiB
}
MAX_OVER_QUOTA_WEIGHT = Decimal(10**6)
MAX_PRIORITY = 10**6

#: Node capacity bounds.
MAX_NODE_GPUS = 100_000  # simulation scenarios use one huge node
MAX_GPU_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB per device
MAX_NODE_CPU_MILLIS = 10**9  # one million cores
MAX_NODE_MEMORY_BYTES = 2**60  # 1 EiB

#: Task request bounds (a task fits on one node).
MAX_TASK_GPU = Decimal(MAX_NODE_GPUS)
MAX_TASKS_PER_WORKLOAD = 10_000
MAX_LABELS = 64
MAX_LABEL_LENGTH = 316  # k8s: 253 prefix + "/" + 63 name
MAX_DEVICE_CLASSES = 64  # device classes a node offers / a task claims
MAX_NODE_DEVICES = 100_000  # devices of one class on one node
MAX_SUBGROUPS_PER_WORKLOAD = 1_000
MAX_DURATION_SECONDS = 10 * 365 * 86400

#: Names: letters, digits, '-', '_', '.'; starting and ending with a letter or digit. ``\Z``, not
#: ``$``: ``$`` also matches before a trailing newline, so "abc\n" passed.
NAME_REGEX = r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?\Z"
MAX_NAME_LENGTH = 128

#: PostgreSQL advisory lock keys (one registry, as NetBox does).
ADVISORY_LOCK_KEYS = {
    "queue_tree": 0x4B41_0001,
    "scheduling_cycle": 0x4B41_0002,
}
