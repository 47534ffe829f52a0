"""Invariants of a cycle's result, checked against the snapshot it came from.

``result_problems(snapshot, result)`` lists every violation as a readable line (empty = none).
The checks look only at the result and the input snapshot (not at the engine's internal state),
so they hold for any engine and are what the control plane checks before it applies a cycle.

* **Pipelined waits for something releasing** (issue #18). A task is ``Pipelined`` only onto
  resources that are releasing in that result. KAI pipelines a job as a whole once one of its
  tasks waits (``PodGroupInfo.ShouldPipelineJob``), so the check is per job: a job with newly
  placed ``Pipelined`` tasks has at least one of them on a node where something is releasing in
  the result: a task ending ``Releasing`` there (evicted now, or already terminating in the
  input; ``StuckInReleasing`` does not count, its resources are not releasing), or a task that
  ran there and was moved (``Pipelined`` elsewhere; its pod on that node is going away). Tasks
  moved from where they ran are themselves exempt: their own pod must go first.
"""
from __future__ import annotations

from typing import Any

from .snapshot import Snapshot, TaskState

__all__ = ["result_problems", "pipelined_problems"]

_RUN = int(TaskState.RUNNING)


def releasing_nodes(snapshot: Snapshot, result: Any) -> set[str]:
    """Nodes on which something is releasing in ``result`` (see the module docstring)."""
    tasks = snapshot.tasks
    node_names = snapshot.nodes.names
    out: set[str] = set()
    for i, name in enumerate(tasks.names):
        r = result.tasks.get(name)
        if r is None:
            continue
        st = r.get("status")
        if st == "Releasing" and r.get("node") is not None:
            out.add(r["node"])
        elif st == "Pipelined" and int(tasks.state[i]) == _RUN and int(tasks.node[i]) >= 0:
            out.add(node_names[int(tasks.node[i])])
    return out


def pipelined_problems(snapshot: Snapshot, result: Any) -> list[str]:
    """Jobs whose new ``Pipelined`` tasks wait on nodes where nothing is releasing."""
    tasks = snapshot.tasks
    rel = releasing_nodes(snapshot, result)
    fresh: dict[int, list[tuple[str, str | None]]] = {}
    for i, name in enumerate(tasks.names):
        r = result.tasks.get(name)
        if r is None or r.get("status") != "Pipelined" or int(tasks.state[i]) == _RUN:
            continue
        fresh.setdefault(int(tasks.job[i]), []).append((name, r.get("node")))
    out = []
    for j, placed in fresh.items():
        if any(node in rel for _, node in placed):
            continue
        nodes = sorted({str(node) for _, node in placed})
        out.append(f"job {snapshot.jobs.names[j]}: {len(placed)} task(s) Pipelined on {', '.join(nodes)} "
                   f"where nothing is releasing in this result")
    return out


def result_problems(snapshot: Snapshot, result: Any) -> list[str]:
    """Every invariant violation of ``result`` (a :class:`~scheduler_engine.result.CycleResult`)."""
    return pipelined_problems(snapshot, result)
