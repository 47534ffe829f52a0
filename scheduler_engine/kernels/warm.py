"""Compile (or load from the cache) every kernel ahead of the first cycle, so that the first real
cycle of a process or a fresh machine does not pay for compilation.

``python -m scheduler_engine.kernels.warm`` prints how long that took, wall and CPU, and how many
kernels were compiled, loaded from the cache or not reached (with an empty cache: the cold-start
cost; the image build runs it once, see deploy/Dockerfile). The cycles are ordinary generated
clusters, so the kernels are compiled for the very argument types the engine passes: plain, one-GPU,
and with subgroup jobs and a DRA node pool (the paths that reach the victim filters of multi-task
beneficiaries and the claims' Python paths around the kernels).

A kernel that only other kernels call has no entry point of its own to warm: it is compiled into its
callers (numba links the callee's code into each caller) and cached with them. ``tests/scheduler_engine/
test_kernels_warm.py`` checks that every kernel is reached (directly, or through a caller) and that
a cycle on other clusters compiles nothing after this.
"""
from __future__ import annotations

import dis
import importlib
import pkgutil
import time
from dataclasses import dataclass, field

#: (nodes, jobs, queues, shape, subgroups, dra_nodes) of the warm-up cycles; small, but contended
#: enough that every action reaches its victim search and simulated scenarios
CLUSTERS = (
    (24, 200, 12, "mixed", 0.0, 0.0),
    (24, 200, 12, "one-gpu", 0.0, 0.0),
    (24, 200, 12, "mixed", 0.3, 0.25),
)


def kernels() -> dict[str, object]:
    """Every kernel of the package, by ``module.name`` (numba dispatchers; with the JIT disabled or
    without numba: empty, there is nothing to compile)."""
    try:
        from numba.core.dispatcher import Dispatcher
    except ImportError:
        return {}
    from .. import kernels as pkg

    out: dict[str, object] = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name == "warm":
            continue
        mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
        for name, obj in vars(mod).items():
            if isinstance(obj, Dispatcher) and obj.py_func.__module__ == mod.__name__:
                out[f"{info.name}.{name}"] = obj
    return out


def callees(disp) -> list:
    """The kernels ``disp``'s source calls (globals of its module that are kernels, also through a
    module attribute such as ``journal.place``)."""
    from numba.core.dispatcher import Dispatcher

    g = disp.py_func.__globals__
    out, prev = [], None
    for ins in dis.get_instructions(disp.py_func):
        if ins.opname == "LOAD_GLOBAL" and isinstance(g.get(ins.argval), Dispatcher):
            out.append(g[ins.argval])
        elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and prev is not None:
            obj = getattr(prev, ins.argval, None)
            if isinstance(obj, Dispatcher):
                out.append(obj)
        prev = g.get(ins.argval) if ins.opname == "LOAD_GLOBAL" else None
    return out


@dataclass
class Report:
    wall: float
    cpu: float
    compiled: list[str] = field(default_factory=list)  # compiled in this process (cache miss)
    loaded: list[str] = field(default_factory=list)  # loaded from the cache
    inside: list[str] = field(default_factory=list)  # no entry point used: only inside a warmed caller
    missed: list[str] = field(default_factory=list)  # not reached at all

    def text(self) -> str:
        s = (f"{len(self.compiled) + len(self.loaded) + len(self.inside)} kernels ready in {self.wall:.2f} s "
             f"({self.cpu:.2f} s CPU): {len(self.compiled)} compiled, {len(self.loaded)} loaded from the cache, "
             f"{len(self.inside)} only inside other kernels")
        if self.missed:
            s += f"; NOT reached by the warm-up cycles: {', '.join(self.missed)}"
        return s


def report(wall: float = 0.0, cpu: float = 0.0) -> Report:
    """Which kernels this process compiled, loaded, or has only inside other kernels."""
    ks = kernels()
    rep = Report(wall=wall, cpu=cpu)
    ready = set()
    for name, d in ks.items():
        if d.signatures:
            ready.add(d)
            (rep.compiled if d.stats.cache_misses else rep.loaded).append(name)
    # callees of ready kernels, transitively
    todo = list(ready)
    inside = set()
    while todo:
        for c in callees(todo.pop()):
            if c not in ready and c not in inside:
                inside.add(c)
                todo.append(c)
    for name, d in ks.items():
        if d in inside:
            rep.inside.append(name)
        elif d not in ready:
            rep.missed.append(name)
    return rep


def _direct_calls() -> None:
    """Kernels that only a large cluster's Python paths call (more nodes than a warm-up cycle should
    take): called once on tiny arrays of the types those paths pass.

    ``node_index.push_rows``: a shape index without the compiled update (``ShapeIndex.compiled = False``,
    a task sharing a GPU on a cluster without GPU devices) catching up
    on more than 48 and at most N/8 changed nodes (``ShapeIndex._batch``).

    ``journal.unevict`` from Python (``simulation.unevict`` of a victim in a scenario the Python steps
    simulate: subgroups, topology, DRA claims), which the small warm-up cycles may all simulate in
    the scenario kernel (where ``unevict`` is compiled in, not as an entry point): a Running task of
    a small generated cluster evicted and un-evicted."""
    import numpy as np

    from .. import clusters
    from ..snapshot import TaskState
    from ..solvers.simulation import unevict
    from ..state import CycleState
    from .node_index import push_rows

    hk, hn, hs = np.empty(4, dtype=np.float64), np.empty(4, dtype=np.int64), np.zeros(1, dtype=np.int64)
    push_rows(np.arange(2, dtype=np.int64), np.ones(2, dtype=np.bool_), np.zeros(2, dtype=np.float64), hk, hn, hs)
    s = CycleState(clusters.generate(nodes=6, jobs=12, queues=3, seed=3, shape="one-gpu"))
    run = np.flatnonzero((s.task_state == int(TaskState.RUNNING)) & ~s.task_has_claims)
    if run.size:
        t = int(run[0])
        cp = s.checkpoint()
        s.evict(t)
        unevict(s, t)
        s.rollback(cp)


def warm_up() -> Report:
    """Run the small cycles of :data:`CLUSTERS` (and :func:`_direct_calls`); returns what they
    compiled or loaded."""
    from .. import clusters
    from ..cycle import run_cycle

    t0, c0 = time.perf_counter(), time.process_time()
    for nodes, jobs, queues, shape, sub_groups, dra_nodes in CLUSTERS:
        snap = clusters.generate(nodes=nodes, jobs=jobs, queues=queues, seed=3, shape=shape)
        run_cycle(clusters.with_features(snap, sub_groups=sub_groups, dra_nodes=dra_nodes, seed=3))
    _direct_calls()
    return report(time.perf_counter() - t0, time.process_time() - c0)


def compile_all() -> float:
    """Run the warm-up cycles; returns the seconds (wall) it took."""
    return warm_up().wall


if __name__ == "__main__":
    from . import JIT_ENABLED

    rep = warm_up()
    if JIT_ENABLED:
        print(f"kernels: {rep.text()}")
    else:
        print(f"kernels not compiled (NUMBA_DISABLE_JIT=1 or numba not installed); warm-up cycles ran in {rep.wall:.2f} s")
