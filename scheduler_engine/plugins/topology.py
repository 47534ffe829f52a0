"""Topology domains of a placement (KAI ``plugins/topology``).

A job with a required topology label places all tasks of an attempt inside one domain of that
label (nodes sharing its value); a preferred label is tried domain by domain before falling back.

One ranking for real and simulated placement, as in KAI, where allocate and the victim solvers
both reach the plugin's ``subSetNodesFn`` through ``common.AllocateJob``: :func:`allocation_domains`
gives the node sets to try, domains ranked by :func:`rank_domains` (KAI ``sortTree`` /
``getJobRatioToFreeResources``: the job's dominant request-to-free ratio, highest first, then the
domain name; domains the job cannot fit, ratio above 1, left out as ``checkJobDomainFit`` does).
:func:`preferred_tiers` is KAI's topology node score (``calculateNodeScores``): when the tasks of
a job with a preferred level are spread over several domains of that level (the preference cannot
be met), its nodes are tried domain tier by domain tier.
"""
from __future__ import annotations

import math

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


def _domain_ratio(state: CycleState, ns_a: np.ndarray, total: np.ndarray) -> float:
    """KAI ``getJobRatioToFreeResources``: the largest request / (free + releasing) over the
    resources the job requests (1000 where the domain has none); whole GPU devices."""
    s = state
    free = (s.node_idle[ns_a] + s.node_releasing[ns_a]).sum(axis=0)
    if s.G:
        free[GPU] = float(((s.dev_free[ns_a] + s.dev_rel[ns_a] >= 1 - EPS) & s.dev_valid[ns_a]).sum())
    ratio = 0.0
    for r in range(3):
        if total[r] > EPS:
            ratio = max(ratio, total[r] / free[r] if free[r] > 0 else 1000.0)
    return ratio


def domain_nodes(state: CycleState, label: str, within: np.ndarray | None, allowed: set | None) -> dict[str, list[int]]:
    """The schedulable nodes (inside ``within``) of each domain of ``label`` (its label values;
    only those in ``allowed`` when given), by node index: the domains real and probing placements
    try, in one place so that both see the same ones."""
    s = state
    values = s.label_values(label)
    groups: dict[str, list[int]] = {}
    for n, v in enumerate(values):
        if v is None or not s.node_schedulable[n] or (within is not None and not within[n]):
            continue
        if allowed is not None and v not in allowed:
            continue
        groups.setdefault(v, []).append(n)
    return groups


def rank_domains(state: CycleState, label: str, within: np.ndarray | None, total: np.ndarray,
                 allowed: set | None = None, fitting: bool = True) -> list[tuple[str, np.ndarray, float]]:
    """Domains of ``label`` (``(value, node mask, ratio)``), most packed first (KAI ``sortTree``:
    highest job-to-free ratio first, ties by domain name); with ``fitting`` those the job cannot
    fit (ratio above 1) are left out. The one ranking of real and simulated placement."""
    s = state
    scored = []
    for v, ns in domain_nodes(s, label, within, allowed).items():
        ns_a = np.asarray(ns)
        ratio = _domain_ratio(s, ns_a, total)
        if fitting and ratio > 1.0 + EPS:
            continue
        mask = np.zeros(s.N, dtype=bool)
        mask[ns_a] = True
        scored.append((-ratio, v, mask))
    scored.sort(key=lambda x: (x[0], x[1]))
    return [(v, mask, -r) for r, v, mask in scored]


def _fitting_domains(state: CycleState, label: str, within: np.ndarray | None, total: np.ndarray,
                     allowed: set | None) -> list[tuple[str, np.ndarray]]:
    """Domains of ``label`` (node masks) that can hold ``total``, most packed first."""
    return [(v, mask) for v, mask, _ in rank_domains(state, label, within, total, allowed)]


def preferred_tiers(state: CycleState, label: str, within: np.ndarray | None, tasks) -> list[np.ndarray]:
    """Node masks in the order KAI's topology node score tries them (``calculateNodeScores``).

    Every domain of the preferred ``label`` (inside ``within``) in :func:`rank_domains` order, fitting
    or not, scores ``floor((i + 1) / count * 10)``: the domain with the most room for the job scores
    highest, and that score (``scores.Topology``) outweighs every other node score. So tasks that
    cannot share one domain fill the roomiest domain first, then the next. Domains with equal scores
    form one tier (ordered inside by the usual node order); nodes without the label come last."""
    s = state
    total = s.task_order_req[list(tasks)].sum(axis=0)
    ranked = rank_domains(s, label, within, total, fitting=False)
    if not ranked:
        return []
    tiers: dict[int, np.ndarray] = {}
    count = len(ranked)
    for i, (_v, mask, _r) in enumerate(ranked):
        score = int(math.floor((i + 1) / count * 10 + 1e-9))
        if score in tiers:
            tiers[score] |= mask
        else:
            tiers[score] = mask.copy()
    out = [tiers[k] for k in sorted(tiers, reverse=True)]
    rest = s.node_schedulable.copy() if within is None else (s.node_schedulable & within)
    for m in out:
        rest &= ~m
    if rest.any():
        out.append(rest)
    return out
