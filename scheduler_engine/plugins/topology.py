"""Topology domains of a placement (KAI ``plugins/topology``).

A job with a required topology label places all tasks of an attempt inside one domain of that
label (nodes sharing its value); a preferred label is tried domain by domain before falling back.
:func:`allocation_domains` gives the node sets allocate tries, in order, with the domains that
cannot hold the job's total request left out; :func:`simulation_domains` gives those a victim
simulation tries.
"""
from __future__ import annotations

import numpy as np

from ..snapshot import CPU, GPU, MEM
from ..state import EPS, CycleState, fmt_amount


def fmt_vec(v) -> str:
    return f"gpu={fmt_amount(GPU, v[GPU])}, cpu={fmt_amount(CPU, v[CPU])}, memory={fmt_amount(MEM, v[MEM])}"


def allocation_domains(state: CycleState, j: int, tasks: list[int], required: str | None,
                       preferred: str | None, within: np.ndarray | None = None,
                       active: list[int] | None = None) -> tuple[list[tuple[str, np.ndarray | None]], str]:
    """Node sets to try, in KAI's order: every preferred-level domain (inside the required
    domains when both are set), then the required-level domains (or, with only a preference,
    the whole cluster). Domains are sorted by how packed the job would leave them (largest
    job-to-free ratio first, then name) and those that cannot hold the job's total request
    (free + releasing, whole GPUs) are skipped. A required domain must contain the job's
    active tasks, if it has any.

    Subgroups (KAI ``SubsetNodesFn`` per subgroup): ``within`` is the parent's domain (node mask),
    ``active`` the running tasks of the subtree (instead of the job's); the fallback of a preference
    is then ``within``."""
    s = state
    total = s.task_order_req[tasks].sum(axis=0)  # GPU memory as a fraction of the smallest device
    out: list[tuple[str, np.ndarray | None]] = []
    if required:
        allowed = None
        if active is None:
            active = s.job_active_tasks(j)
        if active:
            vals = s.label_values(required)
            allowed = {vals[int(s.task_node[t])] for t in active if s.task_node[t] >= 0}
        req_domains = _fitting_domains(s, required, within, total, allowed)
        if not req_domains:
            where = " that holds the job's running tasks" if allowed else ""
            return [], (f"topology: no domain of {required}{where} has room for the job's "
                        f"{len(tasks)} tasks ({fmt_vec(total)} in total)")
        if preferred:
            for rname, rmask in req_domains:
                for pname, pmask in _fitting_domains(s, preferred, rmask, total, None):
                    out.append((f"{required}={rname}/{preferred}={pname}", pmask))
        out.extend((f"{required}={name}", mask) for name, mask in req_domains)
        return out, ""
    for name, mask in _fitting_domains(s, preferred, within, total, None):
        out.append((f"{preferred}={name}", mask))
    out.append(("whole cluster" if within is None else "", within))
    return out, ""


def _fitting_domains(state: CycleState, label: str, within: np.ndarray | None, total: np.ndarray,
                     allowed: set | None) -> list[tuple[str, np.ndarray]]:
    """Domains of ``label`` (node masks) that can hold ``total``, most packed first."""
    s = state
    values = s.label_values(label)
    groups: dict[str, list[int]] = {}
    for n, v in enumerate(values):
        if v is None or not s.node_schedulable[n] or (within is not None and not within[n]):
            continue
        if allowed is not None and v not in allowed:
            continue
        groups.setdefault(v, []).append(n)
    scored = []
    for v, ns in groups.items():
        ns_a = np.asarray(ns)
        free = (s.node_idle[ns_a] + s.node_releasing[ns_a]).sum(axis=0)
        if s.G:
            free[GPU] = float(((s.dev_free[ns_a] + s.dev_rel[ns_a] >= 1 - EPS) & s.dev_valid[ns_a]).sum())
        ratio = 0.0
        for r in range(3):
            if total[r] > EPS:
                ratio = max(ratio, total[r] / free[r] if free[r] > 0 else 1000.0)
        if ratio > 1.0 + EPS:
            continue
        mask = np.zeros(s.N, dtype=bool)
        mask[ns_a] = True
        scored.append((-ratio, v, mask))
    scored.sort(key=lambda x: (x[0], x[1]))
    return [(v, mask) for _, v, mask in scored]


def simulation_domains(state: CycleState, placement: dict, label: str, within, tasks) -> list[np.ndarray]:
    """Domains of ``label`` (node masks) for a simulated placement, inside ``within`` if given:
    binpack = least available (free plus releasing, on GPU for a GPU job, else CPU) first, spread =
    most available first; ties by domain value."""
    s = state
    values = s.label_values(label)
    groups: dict[str, list[int]] = {}
    for n, v in enumerate(values):
        if v is None or not s.node_schedulable[n] or (within is not None and not within[n]):
            continue
        groups.setdefault(v, []).append(n)
    gpu_job = bool(s.task_request[list(tasks), GPU].sum() > 0 or s.task_gpu_memory[list(tasks)].sum() > 0)
    col = GPU if gpu_job else CPU
    spread = placement.get("gpu" if gpu_job else "cpu", "binpack") == "spread"
    out = []
    for v, ns in sorted(groups.items()):
        mask = np.zeros(s.N, dtype=bool)
        mask[ns] = True
        avail = float((s.node_idle[ns, col] + s.node_releasing[ns, col]).sum())
        out.append((-avail if spread else avail, mask))
    out.sort(key=lambda x: x[0])
    return [m for _, m in out]
