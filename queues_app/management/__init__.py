"""``manage.py`` commands of queues_app: operations (run_cycle, kube_sync, run_embedded, healthcheck,
check_invariants), scenario import/export and replay, demos and benchmarks.

May import: anything of queues_app and ``tests.support`` only from the development commands of a
source checkout (``kube_demo``), never ``scheduler_engine`` directly (``cycle.engine_io``).
"""
