"""Hierarchical gangs: a job's tree of subgroups (KAI ``api/podgroup_info/subgroup_info``,
``allocation_info.go``, ``eviction_info.go``; design docs ``hierarchical-podgroup``, ``min-subgroups``).

A job with subgroups is a tree: the job is the root, mid-level subgroups group other subgroups, leaf
subgroups hold the tasks. A leaf is *satisfied* when at least ``minAvailable`` of its tasks are
placed (Running, Binding or Pipelined); a mid-level subgroup, or the job, when at least
``minSubGroups`` of its direct children are (default: all of them). Everything here works on the
snapshot's arrays (:class:`~scheduler_engine.snapshot.SubGroups`, a parent-index array per job) and
on task states; the tree of a job is built once per cycle (:func:`tree_of`).

* :func:`member_order_key` - KAI ``subgrouporder``: which member of a node is served first.
* :func:`tasks_to_allocate` - KAI ``GetTasksToAllocate``: the next attempt of a job (gang phase
  until the root is satisfied, then elastic tasks one child at a time).
* :func:`tasks_to_evict` - KAI ``GetTasksToEvict``: what a victim gives up next (a surplus task of
  a leaf, then a whole surplus member, then everything).
* :func:`place_tree` - KAI ``allocateSubGroupSet``: places an attempt member by member, each
  subgroup inside one domain of its topology level within its parent's domain.
* :func:`job_ready`, :func:`elastic_state`, :func:`is_stale`, :func:`root_satisfied`,
  :func:`job_sub_group_status` (the result's ``subGroups``).

Nothing here imports Django; jobs without subgroups never reach this module.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np

from .snapshot import Snapshot, TaskState
from .task_order import task_order

_PEND = int(TaskState.PENDING)
_RUN = int(TaskState.RUNNING)
_REL = int(TaskState.RELEASING)
_BIND = int(TaskState.BINDING)
_PIPE = int(TaskState.PIPELINED)
_SUCC = int(TaskState.SUCCEEDED)
ACTIVE = (_RUN, _BIND, _PIPE)  # KAI activeAllocatedStatuses
USED = (_RUN, _BIND, _PIPE, _REL)  # the engine's "uses resources" (stale gangs)


class Tree:
    """One job's subgroup tree with local indices: subgroups ``0..S-1`` and the job root ``S``.

    ``children[i]``, ``leaf_tasks[i]`` (tasks of a leaf, input order), ``need[i]`` (``minAvailable``
    of a leaf, ``minSubGroups`` of a mid-level subgroup or the root, all children when unset),
    ``names[i]`` (the root is named after the job), ``topo[i]`` (required, preferred),
    ``post`` (every node, children before parents), ``leaf_of`` task -> local leaf.
    """

    __slots__ = ("job", "base", "size", "root", "names", "parent", "children", "leaf_tasks", "need", "is_leaf",
                 "topo", "post", "leaf_of", "subtree_leaves")

    def __init__(self, snap: Snapshot, j: int) -> None:
        sg, jobs, tasks = snap.sub_groups, snap.jobs, snap.tasks
        a, c = int(jobs.sg_start[j]), int(jobs.sg_count[j])
        self.job, self.base, self.size, self.root = j, a, c, c
        self.names = list(sg.names[a:a + c]) + [jobs.names[j]]
        par = [int(p) - a if int(p) >= 0 else c for p in sg.parent[a:a + c].tolist()]
        self.parent = par + [-1]
        self.children: list[list[int]] = [[] for _ in range(c + 1)]
        for i, p in enumerate(par):
            self.children[p].append(i)
        self.is_leaf = [not self.children[i] for i in range(c)] + [False]
        self.leaf_tasks: list[list[int]] = [[] for _ in range(c + 1)]
        self.leaf_of: dict[int, int] = {}
        t0, tc = int(jobs.task_start[j]), int(jobs.task_count[j])
        for t, g in zip(range(t0, t0 + tc), tasks.sub_group[t0:t0 + tc].tolist()):
            self.leaf_tasks[g - a].append(t)
            self.leaf_of[t] = g - a
        need = []
        for i in range(c):
            if self.is_leaf[i]:
                need.append(int(sg.min_available[a + i]))
            else:
                m = int(sg.min_sub_groups[a + i])
                need.append(m if m >= 0 else len(self.children[i]))
        m = int(jobs.min_sub_groups[j])
        need.append(m if m >= 0 else len(self.children[c]))
        self.need = need
        self.topo = [(sg.topology_required[a + i], sg.topology_preferred[a + i]) for i in range(c)]
        self.topo.append((jobs.topology_required[j], jobs.topology_preferred[j]))
        post: list[int] = []

        def walk(i: int) -> None:
            for k in self.children[i]:
                walk(k)
            post.append(i)

        walk(c)
        self.post = post
        self.subtree_leaves: list[list[int]] = [[] for _ in range(c + 1)]
        for i in post:
            if self.is_leaf[i]:
                self.subtree_leaves[i] = [i]
            else:
                self.subtree_leaves[i] = [x for k in self.children[i] for x in self.subtree_leaves[k]]

    def label(self, i: int) -> str:
        return "the job" if i == self.root else f"subgroup {self.names[i]}"

    def subtree_tasks(self, i: int) -> list[int]:
        return [t for leaf in self.subtree_leaves[i] for t in self.leaf_tasks[leaf]]


def tree_of(state, j: int) -> Tree:
    """The subgroup tree of job j (cached on the state or snapshot for the cycle)."""
    cache = state.__dict__.setdefault("_sg_trees", {})
    tr = cache.get(j)
    if tr is None:
        snap = state.snap if hasattr(state, "snap") else state
        tr = cache[j] = Tree(snap, j)
    return tr


def has_sub_groups(state, j: int) -> bool:
    return bool(state.snap.jobs.sg_count[j])


# ------------------------------------------------------------------------------------ counting
def leaf_counts(tree: Tree, task_state, states: Iterable[int] = ACTIVE, only: Iterable[int] | None = None) -> list[int]:
    """Tasks per leaf whose state is in ``states`` (optionally among ``only`` tasks)."""
    states = set(states)
    counts = [0] * (tree.size + 1)
    if only is None:
        for i in range(tree.size):
            for t in tree.leaf_tasks[i]:
                if int(task_state[t]) in states:
                    counts[i] += 1
    else:
        for t in only:
            if int(task_state[t]) in states and t in tree.leaf_of:
                counts[tree.leaf_of[t]] += 1
    return counts


def satisfaction(tree: Tree, counts: Sequence[int]) -> tuple[list[int], list[bool]]:
    """Per node: its member count (leaf: tasks counted; mid / root: satisfied direct children) and
    whether it is satisfied (KAI ``GetNumActiveAllocatedMembers`` / ``IsMinRequirementSatisfied``)."""
    n = tree.size + 1
    members = [0] * n
    sat = [False] * n
    for i in tree.post:
        if tree.is_leaf[i]:
            members[i] = counts[i]
        else:
            members[i] = sum(1 for k in tree.children[i] if sat[k])
        sat[i] = members[i] >= tree.need[i]
    return members, sat


def root_satisfied(state, j: int, states: Iterable[int] = ACTIVE) -> bool:
    tree = tree_of(state, j)
    return satisfaction(tree, leaf_counts(tree, state.task_state, states))[1][tree.root]


def member_order_key(tree: Tree, i: int, members: Sequence[int], sat: Sequence[bool]) -> tuple:
    """KAI ``subgrouporder`` (``orderByAllocationRatio``), smaller first: members below their
    requirement first (equal among themselves), then satisfied ones by allocated / required (lower
    first), members that require nothing (``minAvailable: 0``) last, fewer allocated first; ties by
    subgroup name (the scenario format's rule)."""
    if not sat[i]:
        return (0, 0.0, tree.names[i])
    need = tree.need[i]
    if need == 0:
        return (2, float(members[i]), tree.names[i])
    return (1, members[i] / need, tree.names[i])


def ordered_members(tree: Tree, i: int, members, sat, reverse: bool = False) -> list[int]:
    return sorted(tree.children[i], key=lambda k: member_order_key(tree, k, members, sat), reverse=reverse)


# ------------------------------------------------------------------------------------ allocation
def tasks_to_allocate(state, j: int, candidates: Callable[[int], bool] | None = None,
                      order: Callable[[list[int]], list[int]] | None = None) -> list[int]:
    """KAI ``GetTasksToAllocate`` on the subgroup tree: the tasks of the job's next attempt.

    Until the root is satisfied (gang phase) each unsatisfied node asks its ``need`` first members in
    subgroup order, a leaf its missing ``minAvailable`` tasks (the attempt is empty - the job is not
    ready - when a leaf has too few); satisfied members ask nothing. Once the root is satisfied
    (elastic phase) the first member in order that has something to place gives it: a leaf at its
    requirement one task, a leaf below it its missing tasks. ``candidates(t)``: which tasks may be
    placed (default: Pending ones); ``order``: task order inside a leaf.
    """
    tree = tree_of(state, j)
    st = state.task_state
    if candidates is None:
        def candidates(t: int) -> bool:
            return st[t] == _PEND
    if order is None:
        def order(ts: list[int]) -> list[int]:
            return task_order(state, ts)
    counts = leaf_counts(tree, st)
    members, sat = satisfaction(tree, counts)

    def leaf(i: int, gang: bool) -> list[int] | None:
        pend = [t for t in tree.leaf_tasks[i] if candidates(t)]
        if not pend:
            return [] if not gang else None
        missing = tree.need[i] - counts[i]
        if missing <= 0:
            return order(pend)[:1]
        if len(pend) < missing:
            return None if gang else []
        return order(pend)[:missing]

    def collect(i: int) -> list[int] | None:
        kids = ordered_members(tree, i, members, sat)
        if not sat[i]:
            out: list[int] = []
            for k in kids[:tree.need[i]]:
                if sat[k]:
                    continue  # already satisfied: asks nothing in its parent's gang phase
                sub = leaf(k, True) if tree.is_leaf[k] else collect(k)
                if sub is None:
                    return None
                out.extend(sub)
            return out
        for k in kids:
            sub = leaf(k, False) if tree.is_leaf[k] else collect(k)
            if sub:
                return sub
        return []

    got = collect(tree.root)
    return got or []


def job_ready(state, j: int) -> bool:
    """KAI ``IsReadyForScheduling``: a leaf has at least ``minAvailable`` placed or pending tasks; a
    node enough ready members."""
    tree = tree_of(state, j)
    counts = leaf_counts(tree, state.task_state, ACTIVE + (_PEND,))
    return satisfaction(tree, counts)[1][tree.root]


def elastic_state(state, j: int, counts: Sequence[int] | None = None) -> int:
    """KAI elastic job order (``minAvailableState``) over the leaves: 0 when a leaf is below its
    ``minAvailable``, 2 when none is and one is above it, 1 when every leaf is exactly at it."""
    tree = tree_of(state, j)
    if counts is None:
        counts = leaf_counts(tree, state.task_state)
    above = False
    for i in range(tree.size):
        if tree.is_leaf[i]:
            if counts[i] < tree.need[i]:
                return 0
            if counts[i] > tree.need[i]:
                above = True
    return 2 if above else 1


def is_elastic(state, j: int) -> bool:
    """KAI ``IsElastic``: some leaf has more tasks than its ``minAvailable``."""
    tree = tree_of(state, j)
    return any(tree.is_leaf[i] and tree.need[i] < len(tree.leaf_tasks[i]) for i in range(tree.size))


def is_stale(state, j: int) -> bool:
    """Uses resources, no task Succeeded, and the root is not satisfied by the tasks that use
    resources (Running, Binding, Pipelined, Releasing)."""
    tree = tree_of(state, j)
    st = state.task_state
    ts = tree.subtree_tasks(tree.root)
    if any(int(st[t]) == _SUCC for t in ts):
        return False
    if not any(int(st[t]) in USED for t in ts):
        return False
    return not satisfaction(tree, leaf_counts(tree, st, USED))[1][tree.root]


def unsatisfied_text(state, j: int, states: Iterable[int] = USED) -> str:
    """Which subgroups are short, e.g. ``subgroup decode-workers has 2 of minAvailable=4``."""
    tree = tree_of(state, j)
    counts = leaf_counts(tree, state.task_state, states)
    members, sat = satisfaction(tree, counts)
    parts = []
    for i in tree.post:
        if sat[i] or i == tree.root:
            continue
        what = "minAvailable" if tree.is_leaf[i] else "minSubGroups"
        unit = "" if tree.is_leaf[i] else " satisfied subgroups"
        parts.append(f"subgroup {tree.names[i]} has {members[i]}{unit} of {what}={tree.need[i]}")
    root = (f"{members[tree.root]} of minSubGroups={tree.need[tree.root]} top-level subgroups are satisfied")
    return "; ".join(parts + [root])


# ------------------------------------------------------------------------------------ eviction
def tasks_to_evict(state, j: int, tasks: Sequence[int]) -> tuple[list[int], bool]:
    """KAI ``GetTasksToEvict`` for a victim holding ``tasks`` (its active ones count).

    Phase 1: one surplus task of a leaf above its ``minAvailable`` (members in reverse subgroup
    order, recursively; the last task in task order). Phase 2: a whole member of a node that has more
    satisfied members than it needs. Phase 3: everything. Returns ``(tasks, more)``: ``more`` says
    the victim keeps active tasks that may be taken later.
    """
    tree = tree_of(state, j)
    st = state.task_state
    active = [t for t in tasks if int(st[t]) in ACTIVE]
    if not active:
        return [], False
    counts = leaf_counts(tree, st, ACTIVE, only=active)
    members, sat = satisfaction(tree, counts)
    act_set = set(active)

    def leaf_active(i: int) -> list[int]:
        return [t for t in tree.leaf_tasks[i] if t in act_set]

    def surplus(i: int) -> bool:
        if tree.is_leaf[i]:
            return counts[i] > tree.need[i]
        return members[i] > tree.need[i] or any(surplus(k) for k in tree.children[i])

    def elastic(i: int) -> list[int]:
        if members[i] == 0:
            return []
        kids = ordered_members(tree, i, members, sat, reverse=True)
        if surplus(i):
            for k in kids:
                if tree.is_leaf[k]:
                    if counts[k] > tree.need[k]:
                        return list(reversed(task_order(state, leaf_active(k))))[:1]
                else:
                    got = elastic(k)
                    if got:
                        return got
        if tree.need[i] < members[i]:
            for k in kids:
                got = [t for leaf in tree.subtree_leaves[k] for t in leaf_active(leaf)]
                if got:
                    return list(reversed(task_order(state, got)))
        return []

    out = elastic(tree.root)
    if not out:
        out = list(reversed(task_order(state, active)))
    return out, len(out) < len(active)


# ------------------------------------------------------------------------------------ placement
class PlaceFailure(Exception):
    """A subgroup attempt that could not be placed; ``message`` names the subgroup that blocks."""

    def __init__(self, message: str, inner: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.inner = inner  # the failure text of the last task that did not fit (its category counts)


Domains = Callable[[Tree, int, list[int], "np.ndarray | None"], "tuple[list[tuple[str, np.ndarray | None]], str]"]
PlaceLeaf = Callable[[int, list[int], "np.ndarray | None"], "tuple[int, str]"]


def place_tree(state, tree: Tree, tasks: Sequence[int], within: np.ndarray | None, domains: Domains,
               place_leaf: PlaceLeaf, rollback: Callable | None = None) -> None:
    """Place ``tasks`` (one attempt of the job) member by member, KAI ``allocateSubGroupSet``.

    At every node with tasks of the attempt: its topology domains inside the parent's node set
    (``domains(tree, node, tasks under it, within)`` -> ``([(description, mask)], why none)``), tried in
    order; inside one, its members in subgroup order, each recursively; a leaf's tasks go through
    ``place_leaf(leaf, tasks, mask)`` -> ``(placed count, failure text)`` which places all or none
    (``(len(tasks), "")`` on success). The first domain in which every member succeeds wins; a domain
    that fails is rolled back (``rollback(checkpoint)``, default ``state.rollback``). Raises
    :class:`PlaceFailure` naming the subgroup that could not be placed and how many of its tasks fit
    at best.
    """
    if rollback is None:
        rollback = state.rollback
    want = set(tasks)
    counts = leaf_counts(tree, state.task_state)
    members, sat = satisfaction(tree, counts)
    best: dict[int, tuple[int, str]] = {}  # leaf -> (most tasks placed in one domain, why the next did not fit)
    inner = [""]

    def under(i: int) -> list[int]:
        return [t for leaf in tree.subtree_leaves[i] for t in tree.leaf_tasks[leaf] if t in want]

    def scope(i: int) -> str:
        """The innermost topology level a leaf is confined to (its own, else an ancestor's)."""
        while i >= 0:
            req, pref = tree.topo[i]
            if req:
                return f" in any {req}"
            i = tree.parent[i]
        return ""

    def node(i: int, ts: list[int], mask) -> str | None:
        """Place ``ts`` under node i inside ``mask``; None on success, else why (rolled back)."""
        if not ts:
            return None
        cands, why = domains(tree, i, ts, mask)
        if not cands:
            return why or f"{tree.label(i)}: no node can hold its {len(ts)} tasks"
        last = ""
        for _desc, dmask in cands:
            cp = state.checkpoint()
            if tree.is_leaf[i]:
                n, why = place_leaf(i, ts, dmask)
                if n == len(ts):
                    return None
                b = best.get(i)
                if b is None or n > b[0]:
                    best[i] = (n, why)
                inner[0] = why
                rollback(cp)
                n, why = best[i]
                last = f"subgroup {tree.names[i]} needs {len(ts)}, {n} fit{scope(i)}" + (f": {why}" if why else "")
                continue
            failed = None
            for k in ordered_members(tree, i, members, sat):
                sub = set(under(k))
                failed = node(k, [t for t in ts if t in sub], dmask)
                if failed is not None:
                    break
            if failed is None:
                return None
            rollback(cp)
            last = failed
        return last

    why = node(tree.root, under(tree.root), within)
    if why is not None:
        raise PlaceFailure(why, inner[0])


# ------------------------------------------------------------------------------------ result
def job_sub_group_status(snap: Snapshot, task_state, j: int) -> dict[str, dict]:
    """``{subgroup: {"placed": active tasks under it, "satisfied": bool}}`` for the result."""
    tree = Tree(snap, j)
    counts = leaf_counts(tree, task_state)
    _, sat = satisfaction(tree, counts)
    out = {}
    for i in range(tree.size):
        placed = sum(counts[leaf] for leaf in tree.subtree_leaves[i])
        out[tree.names[i]] = {"placed": placed, "satisfied": bool(sat[i])}
    return out


def tree_status(parents: Sequence[int], min_available: Sequence[int], min_sub_groups: Sequence[int], root_min: int,
                placed: Sequence[int]) -> tuple[list[int], list[bool], bool]:
    """The satisfaction rules on plain arrays (for callers without a snapshot, e.g. a status page):
    ``parents[i]`` local parent (-1 = the job), ``min_available[i]`` of leaves, ``min_sub_groups[i]`` of
    mid-level subgroups (-1 = all children), ``root_min`` of the job (-1 = all), ``placed[i]`` tasks
    placed in leaf i. Returns (tasks placed under each subgroup, each satisfied, the job satisfied)."""
    n = len(parents)
    kids: list[list[int]] = [[] for _ in range(n + 1)]
    for i, p in enumerate(parents):
        kids[p if p >= 0 else n].append(i)
    sat = [False] * (n + 1)
    under = [0] * (n + 1)

    def visit(i: int) -> None:
        if i < n and not kids[i]:
            under[i] = int(placed[i])
            sat[i] = under[i] >= int(min_available[i])
            return
        for k in kids[i]:
            visit(k)
        under[i] = sum(under[k] for k in kids[i])
        need = (root_min if i == n else int(min_sub_groups[i]))
        need = len(kids[i]) if need < 0 else need
        sat[i] = sum(1 for k in kids[i] if sat[k]) >= need

    visit(n)
    return under[:n], sat[:n], sat[n]


def min_tasks(tree: Tree) -> int:
    """The fewest tasks that satisfy the root (the loader's derived ``minAvailable``)."""
    least = [0] * (tree.size + 1)
    for i in tree.post:
        if tree.is_leaf[i]:
            least[i] = tree.need[i]
        else:
            least[i] = sum(sorted(least[k] for k in tree.children[i])[:tree.need[i]])
    return least[tree.root]

