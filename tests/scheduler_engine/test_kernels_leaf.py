"""Kernels compiled without numba's reference counting (``@leaf_kernel``, see ``scheduler_engine.kernels``).

Such a kernel borrows its caller's references to the arrays it is given. That is safe only while it
returns no array (its compiled caller would drop a reference the leaf never took: the array's
memory could be freed under a live view); numba itself refuses a leaf that allocates. These tests
hold both halves of that contract for every compiled version a cycle makes, and keep the scenario
kernel's hot callees leaves (each one back under reference counting costs an atomic increment and
decrement per array argument per call: most of a scenario's time).
"""
from __future__ import annotations

import pytest

from scheduler_engine.kernels import JIT_ENABLED

pytestmark = pytest.mark.skipif(not JIT_ENABLED, reason="nothing is compiled with the JIT disabled")

#: the scenario kernel's callees per placement and eviction (and the victim keys its tournament uses), the
#: victim search's loop and its callees
HOT_LEAVES = {
    "journal.record", "journal.undo", "journal.evict", "journal.place", "journal.place_dev", "journal.unevict",
    "journal.evict_many", "node_index.query_whole_dra", "node_index.query_shared_dra", "node_index.best",
    "node_index.offer", "node_index.query_span",
    "devices.choose_whole", "devices.choose_shared", "scenario.place_one_whole", "scenario._try_shared",
    "scenario.over_capacity", "scenario.evict_moved", "scenario.old_node_key", "scenario.old_node_key_shared",
    "scenario._place_task", "scenario.distinct_nodes", "scenario.stable_order_into", "victim_keys.build",
    "victim_keys.rekey_path", "victim_run.good_step", "victim_run.drop_one",
    # the compiled victim loop, called from Python once per scenario (as a leaf its arrays are unboxed
    # without a reference-counted wrapper each), its callees per victim examined, the prunings
    "victim_run.run_victims", "victim_run.node_local", "victim_run.tried_add", "victim_run._gpu_filter",
    "victim_run.all_filter", "gpu_fit.pack_best_fit", "victim_run.drop_served", "victim_run.drop_under",
    "scenario.run_scenario",  # (the scenario itself: ~80 array arguments, once per simulated scenario)
    "victim_bound.member_gpu", "victim_bound.move_tasks",  # (reclaim's bound per search, its task lists per commit)
    # the victim search with its failed scenarios (~120 arrays, once per return to Python) and its rollback
    "search.run_search", "journal.undo_log",
    "victim_run.sorted_pack",  # (the packing filters' best fit on the sorted base)
    "victim_run.overlay_recorded",  # (the packing filters: the recorded nodes join the overlay)
    "scenario.build_paths", "scenario.job_order_into",  # (the scenario's tournament keys, its pop order)
}


def _is_leaf(disp) -> bool:
    return disp.targetoptions.get("_nrt", True) is False


def holds_array(ty) -> bool:
    """Whether numba type ``ty`` is or holds an array (what a leaf must not return)."""
    from numba.core import types

    if isinstance(ty, (types.Array, types.Buffer)):
        return True
    if isinstance(ty, types.BaseTuple):
        return any(holds_array(x) for x in ty.types)
    if isinstance(ty, types.Optional):
        return holds_array(ty.type)
    return False


def test_hot_callees_are_leaves():
    from scheduler_engine.kernels import warm

    ks = warm.kernels()
    missing = sorted(name for name in HOT_LEAVES if name not in ks)
    assert not missing, missing
    counted = sorted(name for name in HOT_LEAVES if not _is_leaf(ks[name]))
    assert not counted, f"compiled with reference counting again: {counted}"
    # (the check can fail: a kernel with the runtime is not taken for a leaf)
    from scheduler_engine.kernels import kernel, leaf_kernel

    def first(a):
        return a[0]

    assert not _is_leaf(kernel(first)) and _is_leaf(leaf_kernel(first))


_CHILD = """
import json
from scheduler_engine import clusters
from scheduler_engine.cycle import run_cycle
from scheduler_engine.kernels import warm
from tests.scheduler_engine.test_kernels_leaf import holds_array

warm.warm_up()
run_cycle(clusters.with_features(clusters.generate(nodes=40, jobs=400, queues=20, seed=3, shape="mixed"),
                                 sub_groups=0.2, dra_nodes=0.3, seed=3))
out = {}
for name, d in warm.kernels().items():
    if d.targetoptions.get("_nrt", True) is False:
        out[name] = [[str(c.signature.return_type), holds_array(c.signature.return_type)]
                     for c in d.overloads.values()]
print(json.dumps(out))
"""


def test_no_leaf_version_returns_an_array(tmp_path):
    """Every compiled version of every leaf returns no array. Run cold (empty ``NUMBA_CACHE_DIR``) in a
    child process: a kernel loaded from the cache inside its caller has no versions of its own to look at,
    a cold compile types each callee on its own."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(root)}
    r = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    leaves = json.loads(r.stdout.strip().splitlines()[-1])
    assert HOT_LEAVES <= set(leaves)
    versions = [(name, ty) for name, vs in leaves.items() for ty, arr in vs]
    returning = [(name, ty) for name, vs in leaves.items() for ty, arr in vs if arr]
    assert not returning, returning
    assert all(leaves[name] for name in HOT_LEAVES), [n for n in HOT_LEAVES if not leaves[n]]
    assert len(versions) >= len(HOT_LEAVES)


def test_holds_array_sees_arrays_in_return_types():
    """The child's check can fail: a return type with an array in it is seen as one."""
    from numba.core import types

    arr = types.Array(types.float64, 1, "C")
    assert holds_array(arr)
    assert holds_array(types.Tuple((types.int64, arr)))
    assert holds_array(types.UniTuple(arr, 2))
    assert holds_array(types.Optional(arr))
    assert not holds_array(types.int64)
    assert not holds_array(types.Tuple((types.int64, types.float64)))


def test_numba_refuses_a_leaf_that_allocates():
    """The other half of the contract is numba's: a kernel compiled without its runtime cannot make an
    array (if a numba version ever compiled one, its memory would never be freed, or freed under a
    live view; this test would then fail)."""
    import numpy as np
    from numba.core.errors import TypingError

    from scheduler_engine.kernels import leaf_kernel

    @leaf_kernel
    def makes_one(n):
        a = np.zeros(n)
        return a[0]

    with pytest.raises(TypingError, match="Only accept returning of array passed into the function"):
        makes_one(3)
