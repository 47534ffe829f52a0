"""The invariant checker: plain SQL over the tables, the definition of "correct" (reliability.md 2.0).

Run by ``manage.py check_invariants`` (operators, CI) and at the end of every reliability
test.  SQL only -- no ORM shortcuts, no model methods -- so a bug in the code under test cannot
hide a violation from the checker.  Each check returns the offending rows (at most
``LIMIT`` each):

==================  ===========================================================================
I1.devices          per node: whole-GPU tasks + shared devices in use <= node GPUs
I1.gpu              per node: sum of GPU requests of Running/Binding/Releasing/Stuck tasks <= GPUs
I1.cpu / I1.memory  per node: cpu millicores / memory bytes of those tasks <= capacity
I2.fraction         per shared device (node, gpuGroup): fractions sum <= 1
I2.gpu_memory       per shared device: requested GPU memory <= the device's memory
I3.lost             every workload the caller saw accepted still exists (``expected_workload_ids``)
I3.tasks            every workload has tasks; status agrees with them (a Cancelled workload has
                    nothing pending or running; a Pending one nothing bound or running)
I4.tree             queue tree is a forest: every queue reachable from a top-level queue, depth
                    <= KAI_MAX_QUEUE_DEPTH; workloads only on leaves
I5.allocation       QueueStatus.allocated = sum over the subtree's Running/Binding/Pipelined
                    tasks (queues whose tasks changed after the status was written are skipped:
                    the next cycle rewrites them)
I5.limit            no queue allocated above its hard limit (unless -1)
I6.pipelined        a workload with Pipelined tasks has one on a node where a task is Releasing: a
                    task is pipelined only onto resources being released (issue #18).  Checked
                    against the latest applied cycle's decisions: skipped once the cluster has
                    confirmed a release since (the pipelined task binds in the next cycle), and
                    in Kubernetes mode, where a released pod's row is deleted without a trace
I8.overlap          apply phases of applied cycles never overlap in time
I8.generation       generations increase strictly with apply time; the fencing row holds the latest
==================  ===========================================================================
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from django.conf import settings
from django.db import connection, transaction

LIMIT = 20
HOLDING = "('Running', 'Binding', 'Releasing', 'StuckInReleasing')"
ALLOCATED = "('Running', 'Binding', 'Pipelined')"
TOL = 1e-6


@dataclass
class Violation:
    check: str
    message: str
    rows: list[tuple] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.check, "message": self.message, "rows": [list(map(_plain, r)) for r in self.rows]}


def _plain(x: Any) -> Any:
    return x if isinstance(x, (int, float, str, type(None))) else str(x)


def _group0(col: str = "t.gpu_groups") -> str:
    if connection.vendor == "postgresql":
        return f"({col}->>0)"
    return f"json_extract({col}, '$[0]')"


def _rows(sql: str, params: Iterable[Any] = ()) -> list[tuple]:
    with connection.cursor() as cur:
        cur.execute(sql, list(params))
        return [tuple(r) for r in cur.fetchall()]


def _closure_cte() -> str:
    """``closure(ancestor, descendant)`` over the queue tree (depth-bounded, cycle-safe)."""
    return """
    WITH RECURSIVE closure(ancestor, descendant, depth) AS (
        SELECT id, id, 0 FROM queues_app_queue
        UNION ALL
        SELECT c.ancestor, q.id, c.depth + 1 FROM closure c JOIN queues_app_queue q ON q.parent_id = c.descendant
         WHERE c.depth < 200
    )"""


def _checks() -> dict[str, tuple[str, str, list[Any]]]:
    g0 = _group0()
    shared = "((t.gpu > 0 AND t.gpu < 1) OR (t.gpu = 0 AND t.gpu_memory_mib > 0))"
    return {
        "I1.devices": (
            "node holds more GPU devices than it has (node, gpus, devices in use)",
            f"""SELECT n.name, n.gpus, s.devices FROM queues_app_node n JOIN (
                    SELECT t.node_id, COALESCE(SUM(CASE WHEN t.gpu >= 1 THEN t.gpu ELSE 0 END), 0)
                           + COUNT(DISTINCT CASE WHEN {shared} THEN {g0} END) AS devices
                      FROM queues_app_task t WHERE t.state IN {HOLDING} AND t.node_id IS NOT NULL
                     GROUP BY t.node_id) s ON s.node_id = n.id
                 WHERE s.devices > n.gpus + {TOL} ORDER BY n.name LIMIT {LIMIT}""", []),
        "I1.gpu": (
            "node GPU requests above its GPUs (node, gpus, requested)",
            f"""SELECT n.name, n.gpus, s.used FROM queues_app_node n JOIN (
                    SELECT t.node_id, SUM(t.gpu) AS used FROM queues_app_task t
                     WHERE t.state IN {HOLDING} AND t.node_id IS NOT NULL GROUP BY t.node_id) s ON s.node_id = n.id
                 WHERE s.used > n.gpus + {TOL} ORDER BY n.name LIMIT {LIMIT}""", []),
        "I1.cpu": (
            "node cpu over-committed (node, capacity millicores, requested)",
            f"""SELECT n.name, n.cpu_millis, s.used FROM queues_app_node n JOIN (
                    SELECT t.node_id, SUM(t.cpu_millis) AS used FROM queues_app_task t
                     WHERE t.state IN {HOLDING} AND t.node_id IS NOT NULL GROUP BY t.node_id) s ON s.node_id = n.id
                 WHERE s.used > n.cpu_millis ORDER BY n.name LIMIT {LIMIT}""", []),
        "I1.memory": (
            "node memory over-committed (node, capacity bytes, requested)",
            f"""SELECT n.name, n.memory_bytes, s.used FROM queues_app_node n JOIN (
                    SELECT t.node_id, SUM(t.memory_bytes) AS used FROM queues_app_task t
                     WHERE t.state IN {HOLDING} AND t.node_id IS NOT NULL GROUP BY t.node_id) s ON s.node_id = n.id
                 WHERE s.used > n.memory_bytes ORDER BY n.name LIMIT {LIMIT}""", []),
        "I2.fraction": (
            "shared GPU device over-committed (node, gpuGroup, fraction sum)",
            f"""SELECT n.name, {g0} AS grp, SUM(t.gpu) FROM queues_app_task t JOIN queues_app_node n ON n.id = t.node_id
                 WHERE t.state IN {HOLDING} AND t.gpu > 0 AND t.gpu < 1 AND {g0} IS NOT NULL
                 GROUP BY n.name, {g0} HAVING SUM(t.gpu) > 1 + {TOL} ORDER BY n.name LIMIT {LIMIT}""", []),
        "I2.gpu_memory": (
            "shared GPU device memory over-committed (node, gpuGroup, MiB requested, MiB per device)",
            f"""SELECT n.name, {g0} AS grp, SUM(t.gpu_memory_mib), MAX(n.gpu_memory_mib)
                  FROM queues_app_task t JOIN queues_app_node n ON n.id = t.node_id
                 WHERE t.state IN {HOLDING} AND t.gpu_memory_mib > 0 AND {g0} IS NOT NULL AND n.gpu_memory_mib > 0
                 GROUP BY n.name, {g0} HAVING SUM(t.gpu_memory_mib) > MAX(n.gpu_memory_mib)
                 ORDER BY n.name LIMIT {LIMIT}""", []),
        "I3.tasks": (
            "workload status contradicts its tasks (workload, status, offending task state)",
            f"""SELECT w.name, w.status, COALESCE(t.state, '(no tasks)') FROM queues_app_workload w
                  LEFT JOIN queues_app_task t ON t.workload_id = w.id
                 WHERE t.id IS NULL
                    OR (w.status = 'Cancelled' AND t.state IN ('Pending', 'Pipelined', 'Binding', 'Running'))
                    OR (w.status = 'Pending' AND t.state IN ('Binding', 'Running'))
                    OR (w.status IN ('Succeeded', 'Failed') AND t.state IN ('Pending', 'Pipelined', 'Binding'))
                 ORDER BY w.name LIMIT {LIMIT}""", []),
        "I4.tree": (
            "queue not reachable from a top-level queue, or too deep (queue, depth reached)",
            f"""WITH RECURSIVE reach(id, depth) AS (
                    SELECT id, 1 FROM queues_app_queue WHERE parent_id IS NULL
                    UNION ALL
                    SELECT q.id, r.depth + 1 FROM reach r JOIN queues_app_queue q ON q.parent_id = r.id
                     WHERE r.depth < 200)
                SELECT q.name, MAX(r.depth) FROM queues_app_queue q LEFT JOIN reach r ON r.id = q.id
                 GROUP BY q.name HAVING MAX(r.depth) IS NULL OR MAX(r.depth) > %s
                 ORDER BY q.name LIMIT {LIMIT}""", [int(getattr(settings, "KAI_MAX_QUEUE_DEPTH", 8))]),
        "I4.leaf": (
            "workload on a queue that has children (workload, queue)",
            f"""SELECT w.name, q.name FROM queues_app_workload w JOIN queues_app_queue q ON q.id = w.queue_id
                 WHERE EXISTS (SELECT 1 FROM queues_app_queue c WHERE c.parent_id = q.id)
                 ORDER BY w.name LIMIT {LIMIT}""", []),
        "I5.allocation": (
            "queue status allocation differs from its tasks (queue, resource, status, tasks)",
            _closure_cte() + f""",
                alloc AS (
                    SELECT c.ancestor AS queue_id, COALESCE(SUM(t.gpu + t.dra_gpus), 0) AS gpu,
                           COALESCE(SUM(t.cpu_millis), 0) AS cpu, COALESCE(SUM(t.memory_bytes), 0) AS mem
                      FROM closure c JOIN queues_app_workload w ON w.queue_id = c.descendant
                      JOIN queues_app_task t ON t.workload_id = w.id AND t.state IN {ALLOCATED}
                     GROUP BY c.ancestor),
                changed AS (
                    SELECT c.ancestor AS queue_id, MAX(t.updated_at) AS last
                      FROM closure c JOIN queues_app_workload w ON w.queue_id = c.descendant
                      JOIN queues_app_task t ON t.workload_id = w.id AND t.state <> 'Pending'
                     GROUP BY c.ancestor)
                SELECT q.name, s.allocated_gpu, COALESCE(a.gpu, 0), s.allocated_cpu, COALESCE(a.cpu, 0) / 1000.0,
                       s.allocated_memory, COALESCE(a.mem, 0)
                  FROM queues_app_queuestatus s JOIN queues_app_queue q ON q.id = s.queue_id
                  LEFT JOIN alloc a ON a.queue_id = s.queue_id
                  LEFT JOIN changed ch ON ch.queue_id = s.queue_id
                 WHERE (ch.last IS NULL OR ch.last <= s.updated_at)
                   AND (ABS(s.allocated_gpu - COALESCE(a.gpu, 0)) > 1e-4
                        OR ABS(s.allocated_cpu - COALESCE(a.cpu, 0) / 1000.0) > 1e-3
                        OR ABS(s.allocated_memory - COALESCE(a.mem, 0)) > 1)
                 ORDER BY q.name LIMIT {LIMIT}""", []),
        "I5.limit": (
            "queue allocated above its hard limit (queue, resource, allocated, limit)",
            _closure_cte() + f""",
                alloc AS (
                    SELECT c.ancestor AS queue_id, COALESCE(SUM(t.gpu + t.dra_gpus), 0) AS gpu,
                           COALESCE(SUM(t.cpu_millis), 0) / 1000.0 AS cpu, COALESCE(SUM(t.memory_bytes), 0) AS memory
                      FROM closure c JOIN queues_app_workload w ON w.queue_id = c.descendant
                      JOIN queues_app_task t ON t.workload_id = w.id AND t.state IN {ALLOCATED}
                     GROUP BY c.ancestor)
                SELECT q.name, r.resource,
                       CASE r.resource WHEN 'gpu' THEN a.gpu WHEN 'cpu' THEN a.cpu ELSE a.memory END, r."limit"
                  FROM queues_app_queueresource r JOIN queues_app_queue q ON q.id = r.queue_id
                  JOIN alloc a ON a.queue_id = r.queue_id
                 WHERE r."limit" <> -1
                   AND CASE r.resource WHEN 'gpu' THEN a.gpu WHEN 'cpu' THEN a.cpu ELSE a.memory END > r."limit" + {TOL}
                 ORDER BY q.name LIMIT {LIMIT}""", []),
        "I6.pipelined": (
            "workload pipelined where nothing is releasing (workload, task, node)",
            f"""WITH last AS (
                    SELECT apply_finished_at FROM queues_app_schedulingcycle
                     WHERE status = 'applied' AND apply_finished_at IS NOT NULL
                     ORDER BY generation DESC LIMIT 1)
                SELECT w.name, t.name, n.name FROM queues_app_task t
                  JOIN queues_app_workload w ON w.id = t.workload_id
                  JOIN queues_app_node n ON n.id = t.node_id
                 WHERE t.state = 'Pipelined'
                   AND NOT EXISTS (
                       SELECT 1 FROM queues_app_task p JOIN queues_app_task r
                           ON r.node_id = p.node_id AND r.state = 'Releasing'
                        WHERE p.workload_id = t.workload_id AND p.state = 'Pipelined')
                   AND NOT EXISTS (
                       SELECT 1 FROM queues_app_task x, last
                        WHERE x.node_id IS NULL AND x.version > 1 AND x.updated_at > last.apply_finished_at
                          AND x.state IN ('Pending', 'Failed', 'Succeeded'))
                 ORDER BY w.name, t.name LIMIT {LIMIT}""", []),
        "I8.overlap": (
            "apply phases overlap (generation, apply start, previous generation, previous apply end)",
            f"""SELECT generation, apply_started_at, prev_gen, prev_end FROM (
                    SELECT generation, apply_started_at,
                           LAG(generation) OVER (ORDER BY apply_started_at, generation) AS prev_gen,
                           LAG(apply_finished_at) OVER (ORDER BY apply_started_at, generation) AS prev_end
                      FROM queues_app_schedulingcycle WHERE status = 'applied' AND apply_started_at IS NOT NULL) x
                 WHERE prev_end IS NOT NULL AND apply_started_at < prev_end LIMIT {LIMIT}""", []),
        "I8.generation": (
            "generations do not increase with apply time, or the fencing row is behind (generation, previous)",
            f"""SELECT generation, prev_gen FROM (
                    SELECT generation, LAG(generation) OVER (ORDER BY apply_started_at, generation) AS prev_gen
                      FROM queues_app_schedulingcycle WHERE status = 'applied' AND apply_started_at IS NOT NULL) x
                 WHERE prev_gen IS NOT NULL AND generation <= prev_gen
                UNION ALL
                SELECT s.generation, m.g FROM queues_app_schedulerstate s,
                       (SELECT MAX(generation) AS g FROM queues_app_schedulingcycle WHERE status = 'applied') m
                 WHERE m.g IS NOT NULL AND s.generation <> m.g
                LIMIT {LIMIT}""", []),
    }


CHECKS = (
    "I1.devices", "I1.gpu", "I1.cpu", "I1.memory", "I2.fraction", "I2.gpu_memory", "I3.lost", "I3.tasks",
    "I4.tree", "I4.leaf", "I5.allocation", "I5.limit", "I6.pipelined", "I8.overlap", "I8.generation",
)


def check_invariants(*, expected_workload_ids: Iterable[int] | None = None,
                     only: Iterable[str] | None = None, skip: Iterable[str] = ()) -> list[Violation]:
    """Run the checks (all, or ``only``; minus ``skip``) on one consistent view of the database
    (REPEATABLE READ on PostgreSQL) and return the violations; empty = correct."""
    wanted = [c for c in (list(only) if only else CHECKS) if c not in set(skip)]
    unknown = sorted(set(wanted) - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown check(s): {', '.join(unknown)}; known: {', '.join(CHECKS)}")
    out: list[Violation] = []
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if connection.vendor == "postgresql" and outermost:
            with connection.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        checks = _checks()
        for name in wanted:
            if name == "I3.lost":
                if expected_workload_ids is None:
                    continue
                ids = sorted({int(i) for i in expected_workload_ids})
                present: set[int] = set()
                for i in range(0, len(ids), 900):
                    chunk = ids[i:i + 900]
                    marks = ", ".join(["%s"] * len(chunk))
                    present.update(r[0] for r in _rows(f"SELECT id FROM queues_app_workload WHERE id IN ({marks})",
                                                       chunk))
                missing = [i for i in ids if i not in present]
                if missing:
                    out.append(Violation("I3.lost", f"{len(missing)} accepted workload(s) missing (ids)",
                                         [(i,) for i in missing[:LIMIT]]))
                continue
            if name == "I6.pipelined" and getattr(settings, "KAI_CLUSTER_MODE", "embedded") == "kubernetes":
                # the reconciler deletes a released pod's task row between two cycles (nothing
                # left to see that a release was confirmed); the cycle checks its own decisions
                # before applying them (queues_app.cycle.apply._pipelined_problems)
                continue
            message, sql, params = checks[name]
            rows = _rows(sql, params)
            if rows:
                out.append(Violation(name, message, rows))
    return out
