"""Compiled array kernels of the engine's hot loops (numba).

Kernels take and return plain numpy arrays and scalars; the Python layer (``solvers/``,
``plugins/``) keeps KAI's control flow and the explanations. Every kernel is decorated with
:data:`kernel` (``numba.njit`` with its on-disk cache): compiled once per machine and cached beside the source
(``__pycache__``), then loaded in a few milliseconds; a cached kernel is stale when its file or any file
compiled into it changed (:mod:`.source_stamp`). With ``NUMBA_DISABLE_JIT=1`` (or without numba installed) the kernels stay
plain functions, so the very same source runs as plain Python (CI runs the engine tests that
way too, and ``tests/scheduler_engine/test_kernels_differential.py`` compares both on whole cycles).

Rules for kernel code, so that compiled and interpreted runs decide the same: float64 arithmetic
in the same order as the reference expression (no fastmath, no reassociation), explicit loops
instead of reductions whose order numba may change, int64 indices, no out-of-range reads.

* :mod:`.gpu_fit`: the idle-GPU filter's best-fit packing of a beneficiary's GPU tasks.
* :mod:`.victim_keys`: rules 1-6 of the victim order per queue and the per-parent winner search.
* :mod:`.node_index`: the per-shape node index (fit + placement key of changed nodes, lazy heap);
  its query (``query_whole`` / ``query_shared``, and their ``_dra`` forms with the DRA GPU term of
  the key and the device claims' fit) is callable from other kernels.
* :mod:`.devices`: the whole-device choice of a placement (``CycleState.choose_devices``).
* :mod:`.journal`: the state's undo journal as arrays (record, backward replay), the task-device
  mirror (each task's devices and device takes in (T, G) rows), and the compiled evict / place /
  un-evict of tasks without DRA claims.
* :mod:`.scenario`: the queue capacity check, one simulated placement of a victim scenario
  (shape-index query, device choice, journaled placement) in one call, and a whole scenario of
  plain jobs (evictions, each job's tasks, the leaf tournament, gangs with their rollback) in one call.
* :mod:`.victim_run`: the victim search's pop-and-accumulate loop (victim order over per-leaf candidate
  arrays, per-node sums, GPU-count filters, node-local sets) up to the next scenario to simulate.
* :mod:`.search`: that loop with the scenarios that do not place the beneficiary simulated, rolled back
  and pruned in the same call (Python gets the placing ones, for the validator).
* :mod:`.warm`: compile (or load) every kernel ahead of the first cycle.

Layout for what is still Python: per-node arrays are (N, ...) with devices in (N, G) rows and DRA
devices in (N, D, M) rows (the choice, charge and release of claimed devices and subgroup trees keep
their Python paths); queue arrays are (Q, ...) with the tree as CSR children and padded path rows.

Reference counting (``@leaf_kernel``): a compiled function takes a reference to every array argument
on entry and drops it on exit (an atomic increment and decrement of the array's reference count
each), and numba's pruning of those pairs gives up on a function that calls another. The scenario
kernel's callees take 20-50 arrays each (the journal's and the shape index's), so a simulated
scenario made thousands of such atomic operations: most of the kernel's time went to
``NRT_incref`` / ``NRT_decref`` (perf, 2,000 nodes). A kernel compiled without numba's runtime
(``_nrt=False``) borrows its caller's references, which is safe exactly when it allocates no array
(numba refuses to compile that without the runtime) and returns none (its caller would drop a
reference that was never taken): the journal primitives, the node index, the device choice, the
victim keys, the scenario's placement steps and the scenario kernel itself (its scratch lent by its
caller) are such leaves. Arithmetic and control flow are the
same either way, so the decisions are too.
"""
from __future__ import annotations

try:
    import numba
except ImportError:  # an interpreter without the package: the same source runs as plain Python
    numba = None

if numba is not None:
    from .source_stamp import DependencyFunctionCache

    def _cached_njit(**options):
        """numba's ``njit`` with the on-disk cache keyed by the kernel's source and every source
        compiled into it (:mod:`.source_stamp`: numba's own key is the kernel's file only)."""
        jit = numba.njit(**options)

        def decorate(func):
            disp = jit(func)
            if hasattr(disp, "enable_caching"):  # (a dispatcher; a plain function under NUMBA_DISABLE_JIT=1)
                disp._cache = DependencyFunctionCache(disp.py_func)
            return disp

        return decorate

    #: ``@kernel``: numba's ``njit`` with the on-disk cache; a plain function under ``NUMBA_DISABLE_JIT=1``.
    kernel = _cached_njit()
    #: ``@leaf_kernel``: ``@kernel`` compiled without numba's reference counting (``_nrt=False``), for
    #: kernels that allocate no array and return none (module docstring).
    leaf_kernel = _cached_njit(_nrt=False)
    JIT_ENABLED = not numba.config.DISABLE_JIT
else:
    def kernel(func):
        """Without numba installed, a kernel is its own Python function, exactly as under
        ``NUMBA_DISABLE_JIT=1``: same decisions, interpreted speed (the engine stays usable from a
        bare numpy environment; ``pip install`` of the project brings numba)."""
        return func

    leaf_kernel = kernel
    JIT_ENABLED = False
