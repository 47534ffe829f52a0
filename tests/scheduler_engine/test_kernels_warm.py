"""``python -m scheduler_engine.kernels.warm`` (what the image build runs) reaches every kernel, and
after it a cycle compiles nothing: a kernel it does not reach is compiled by the first real cycle of
every fresh machine or pod (0.1-3 s each, inside the Celery cycle's time limits).

Runs in a child process with an empty ``NUMBA_CACHE_DIR`` (a cold compile, 20-25 s of CPU), then
cycles on clusters other than the warm-up's (sizes, seeds, subgroups, a DRA pool, a cluster large
enough for the index's batched catch-up) and golden scenarios, listening to numba's compile events.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler_engine.kernels import JIT_ENABLED

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT.parent / "shared" / "scenarios" / "reclaim_preempt"

_CHILD = """
import json, sys
from numba.core import event
from scheduler_engine.kernels import warm

rep = warm.warm_up()
after = []


class Listener(event.Listener):
    def on_start(self, ev):
        f = ev.data["dispatcher"].py_func
        after.append(f.__module__ + "." + f.__name__)

    def on_end(self, ev):
        pass


event.register("numba:compile", Listener())
from scheduler_engine import bench
from scheduler_engine.cli import main
from scheduler_engine.cycle import run_cycle

for nodes, jobs, queues, shape, sub, dra, seed in [(40, 400, 20, "mixed", 0.0, 0.0, 5), (40, 300, 20, "one-gpu", 0.0, 0.0, 6),
                                                   (40, 400, 20, "mixed", 0.2, 0.3, 7), (400, 700, 30, "mixed", 0.1, 0.3, 8)]:
    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    run_cycle(bench.with_features(snap, sub_groups=sub, dra_nodes=dra, seed=seed))
if len(sys.argv) > 1:
    main(["check", sys.argv[1]])
print(json.dumps({"missed": rep.missed, "compiled": rep.compiled, "inside": rep.inside, "after": after,
                  "kernels": sorted(warm.kernels())}))
"""


@pytest.mark.skipif(not JIT_ENABLED, reason="nothing is compiled with the JIT disabled")
def test_warm_reaches_every_kernel_and_a_cycle_after_it_compiles_nothing(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    args = [str(GOLDEN)] if GOLDEN.is_dir() else []
    proc = subprocess.run([sys.executable, "-c", _CHILD, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(out["kernels"]) > 30
    assert out["missed"] == [], f"kernels.warm does not reach {out['missed']}: add a warm-up that does"
    assert sorted(out["compiled"] + out["inside"]) == out["kernels"]
    assert out["after"] == [], f"compiled after kernels.warm (a signature or path it does not warm): {out['after']}"
