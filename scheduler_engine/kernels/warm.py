"""Compile (or load from the cache) every kernel by running small cycles, so that the first real
cycle of a process or a fresh machine does not pay for compilation.

``python -m scheduler_engine.kernels.warm`` prints how long that took (with an empty cache: the
cold-start cost; the image build runs it once, see deploy/Dockerfile). The cycles are ordinary
generated clusters, so the kernels are compiled for the very argument types the engine passes.
"""
from __future__ import annotations

import time


def compile_all() -> float:
    """Run a few small cycles that reach every kernel; returns the seconds it took."""
    from .. import bench
    from ..cycle import run_cycle

    t0 = time.perf_counter()
    for shape in ("mixed", "one-gpu"):
        run_cycle(bench.generate(nodes=24, jobs=200, queues=12, seed=3, shape=shape))
    return time.perf_counter() - t0


if __name__ == "__main__":
    from . import JIT_ENABLED

    secs = compile_all()
    print(f"kernels {'compiled or loaded' if JIT_ENABLED else 'not compiled (NUMBA_DISABLE_JIT=1 or numba not installed)'} "
          f"in {secs:.2f} s")
