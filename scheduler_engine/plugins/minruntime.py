"""Min-runtime protection of victims (KAI ``plugins/minruntime``: the resolver and the validator).

Spec d. A victim job that started less than its min-runtime ago is protected: a non-elastic one is
no candidate at all (:func:`protected_non_elastic`, applied by the actions' candidate filters), an
elastic one may give up surplus tasks but must keep ``minAvailable`` active ones
(:func:`min_runtime_elastic`, a scenario validator). ``preemptMinRuntime`` is resolved from the
victim's leaf upwards; ``reclaimMinRuntime`` by ``config.reclaimMinRuntimeResolution`` (lca | queue).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .. import subgroups
from ..state import CycleState
from .elastic import is_elastic


def _started_seconds_ago(state: CycleState, j: int) -> float:
    v = float(state.jobs.started_minutes_ago[j])
    return v * 60.0 if not math.isnan(v) else math.nan


def min_runtime_protected(state: CycleState, j: int, min_runtime: float) -> bool:
    """``now < lastStart + minRuntime``; a job that never started is not protected."""
    ago = _started_seconds_ago(state, j)
    if math.isnan(ago) or not min_runtime or min_runtime <= 0:
        return False
    return ago < min_runtime


def protected_non_elastic(state: CycleState, min_runtime: float) -> np.ndarray:
    """(J,) bool: non-elastic jobs started less than ``min_runtime`` seconds ago (vectorised filter)."""
    ago = np.asarray(state.jobs.started_minutes_ago, dtype=float) * 60.0
    elastic = _elastic_jobs(state)
    with np.errstate(invalid="ignore"):
        young = ago < min_runtime
    return young & ~np.isnan(ago) & ~elastic & (min_runtime > 0)


def _elastic_jobs(state: CycleState) -> np.ndarray:
    """(J,) bool: elastic jobs (more tasks than minAvailable; with subgroups, some leaf is)."""
    elastic = state.job_min_available < state.job_count
    if state.any_sg:
        elastic = elastic.copy()
        for j in np.flatnonzero(state.job_has_sg).tolist():
            elastic[j] = is_elastic(state, j)
    return elastic


def protected_non_elastic_by(state: CycleState, min_runtime: np.ndarray) -> np.ndarray:
    """(J,) bool: :func:`protected_non_elastic` with a per-job ``min_runtime`` (J,) array."""
    ago = np.asarray(state.jobs.started_minutes_ago, dtype=float) * 60.0
    elastic = _elastic_jobs(state)
    with np.errstate(invalid="ignore"):
        young = ago < min_runtime
    return young & ~np.isnan(ago) & ~elastic & (min_runtime > 0)


def _walk_up(state: CycleState, q: int, field_values: np.ndarray) -> float:
    for a in state.queue_path[q]:
        v = float(field_values[int(a)])
        if not math.isnan(v):
            return v
    return math.nan


def preempt_min_runtime(state: CycleState, victim_leaf: int) -> float:
    """Spec d: from the victim's leaf up to the root, the first ``preemptMinRuntime`` set; else default."""
    v = _walk_up(state, victim_leaf, state.queues.preempt_min_runtime)
    return float(state.config.default_preempt_min_runtime or 0.0) if math.isnan(v) else v


def reclaim_min_runtime(state: CycleState, reclaimer_leaf: int, victim_leaf: int) -> float:
    """Spec d: ``reclaimMinRuntime`` by ``config.reclaimMinRuntimeResolution`` (lca | queue)."""
    field_values = state.queues.reclaim_min_runtime
    default = float(state.config.default_reclaim_min_runtime or 0.0)
    method = (state.config.reclaim_min_runtime_resolution or "lca").lower()
    if method == "queue":
        v = _walk_up(state, victim_leaf, field_values)
        return default if math.isnan(v) else v
    rpath = [int(x) for x in state.queue_path[reclaimer_leaf]][::-1]  # top .. leaf
    vpath = [int(x) for x in state.queue_path[victim_leaf]][::-1]
    if rpath[0] != vpath[0]:
        v = float(field_values[vpath[0]])
        return default if math.isnan(v) else v
    depth = 0
    while depth < min(len(rpath), len(vpath)) and rpath[depth] == vpath[depth]:
        depth += 1
    # vpath[depth - 1] is the lowest common ancestor; one level down toward the victim
    start = vpath[depth] if depth < len(vpath) else vpath[-1]
    v = _walk_up(state, start, field_values)
    return default if math.isnan(v) else v



def min_runtime_elastic(state: CycleState, released: list[int], min_runtime_of: Callable[[int], float]) -> str | None:
    """Min-runtime validator: a protected elastic victim keeps at least ``minAvailable`` active tasks.

    ``released``: the scenario's victim tasks that end released; ``min_runtime_of(job)`` its min-runtime.
    """
    jobs = {int(state.task_job[t]) for t in released}
    for vj in jobs:
        if not is_elastic(state, vj):
            continue
        mr = min_runtime_of(vj)
        if not min_runtime_protected(state, vj, mr):
            continue
        if state._sg_list[vj]:
            if not subgroups.root_satisfied(state, vj):
                return (f"job {state.jobs.names[vj]} is protected by a min-runtime of {mr:g}s and would no "
                        f"longer satisfy its subgroups ({subgroups.unsatisfied_text(state, vj, subgroups.ACTIVE)})")
            continue
        if state.job_num_active(vj) < int(state.job_min_available[vj]):
            return (f"job {state.jobs.names[vj]} is protected by a min-runtime of {mr:g}s and would keep fewer "
                    f"than minAvailable={int(state.job_min_available[vj])} tasks")
    return None
