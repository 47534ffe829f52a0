"""Differential campaign: two engines (a source tree + environment each) run the same scenarios in
separate processes; every decision they print must be equal.

Used by ``test_kernels_differential.py`` to compare the compiled kernels with the same source run
as plain Python (``NUMBA_DISABLE_JIT=1``) on a bounded sample; as a command line it runs the full
campaign, also against another tree (e.g. a worktree of the commit before a speed change):

    python -m tests.support.differential --generated 200 --golden all [--other /path/to/tree]

Scenarios: golden files (with their own config and rounds) and generated clusters
(:func:`scheduler_engine.bench.generate`, mixed and one-GPU shapes, some with subgroup jobs and DRA
device pools) whose config is mutated (placement, consolidation preemptees, search budgets, min
runtimes). What is compared per scenario: the result JSON of every cycle (task states and nodes,
devices, queues, nodes, every event) plus the bench decision digest for single cycles.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (tests/support/ is two levels down)
GOLDEN = ROOT.parent / "shared" / "scenarios"
GOLDEN_DIRS = ("allocate", "reclaim_preempt", "fairshare")


def golden(limit: int | None = None) -> list[Path]:
    """Golden scenario files in a fixed order; ``limit``: an evenly spread sample of that many."""
    files = sorted(p for d in GOLDEN_DIRS for p in (GOLDEN / d).glob("*") if p.suffix in (".yaml", ".yml", ".json"))
    if limit is not None and len(files) > limit:
        step = len(files) / limit
        files = [files[int(i * step)] for i in range(limit)]
    return files


def generated(n: int, *, seed: int, workdir: Path) -> list[Path]:
    """``n`` generated and mutated clusters written as scenario files under ``workdir``."""
    import numpy as np

    from scheduler_engine import bench
    from scheduler_engine.loader import snapshot_to_dict

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        nodes = int(rng.integers(8, 61))
        snap = bench.generate(nodes=nodes, jobs=int(nodes * rng.uniform(4, 9)), queues=int(rng.integers(3, 31)),
                              seed=int(rng.integers(1, 10**6)), shape=str(rng.choice(["mixed", "one-gpu"])))
        sg = float(rng.choice([0.0, 0.0, 0.3]))
        dra = float(rng.choice([0.0, 0.0, 0.3]))
        snap = bench.with_features(snap, sub_groups=sg, dra_nodes=dra, seed=i + 1)
        d = snapshot_to_dict(snap)
        cfg = d.setdefault("config", {})
        cfg["placement"] = {"gpu": str(rng.choice(["binpack", "spread"]))}
        if rng.random() < 0.5:
            cfg["maxConsolidationPreemptees"] = int(rng.choice([-1, 0, 1, 4]))
        if rng.random() < 0.5:
            cfg["scenarioSearchBudget"] = int(rng.choice([10, 100, 1000, -1]))
        if rng.random() < 0.3:
            cfg["defaultReclaimMinRuntime"] = str(rng.choice(["0s", "10m", "2h"]))
        d.pop("expect", None)
        p = workdir / f"gen-{seed}-{i:03d}.json"
        p.write_text(json.dumps(d))
        out.append(p)
    return out


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run(paths: list[str]) -> dict[str, list[str]]:
    """This process's engine on every scenario: per file the digests of what each cycle decided."""
    from scheduler_engine.bench import decision_digest
    from scheduler_engine.cycle import run_cycle_with_state, run_rounds, uses_rounds
    from scheduler_engine.loader import load_scenario

    out: dict[str, list[str]] = {}
    for p in paths:
        snap = load_scenario(p)
        if uses_rounds(snap):
            rr = run_rounds(snap)
            out[p] = [_digest(r.to_json()) for r in rr.cycles + [rr.final] + rr.stable]
        else:
            state, result = run_cycle_with_state(snap)
            out[p] = [decision_digest(state), _digest(result.to_json())]
    return out


def _run_in(tree: Path, env: dict[str, str], paths: list[Path]) -> dict[str, list[str]]:
    full = dict(os.environ)
    full.update(env)
    # the tree's engine first on the path (an installed copy of the project comes later)
    full["PYTHONPATH"] = os.pathsep.join([str(tree), str(ROOT)] + ([full["PYTHONPATH"]] if full.get("PYTHONPATH") else []))
    proc = subprocess.run([sys.executable, "-m", "tests.support.differential", "--run", *map(str, paths)],
                          cwd=str(tree), env=full, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise RuntimeError(f"engine in {tree} ({env}) failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(paths: list[Path], a: tuple[Path, dict[str, str]], b: tuple[Path, dict[str, str]]) -> list[str]:
    """Scenarios on which engine ``a`` and engine ``b`` (each ``(tree, env)``) decide differently."""
    ra, rb = _run_in(a[0], a[1], paths), _run_in(b[0], b[1], paths)
    return [p for p in map(str, paths) if ra.get(p) != rb.get(p)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--generated", type=int, default=50, help="generated clusters (default 50)")
    ap.add_argument("--golden", default="all", help="'all' or how many golden files (evenly spread)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--other", type=Path, help="compare this tree (compiled) with ours (compiled) instead of "
                    "compiled vs NUMBA_DISABLE_JIT=1")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/kai-differential"))
    args = ap.parse_args(argv)
    if args.run is not None:
        print(json.dumps(run(args.run)))
        return 0
    args.workdir.mkdir(parents=True, exist_ok=True)
    paths = generated(args.generated, seed=args.seed, workdir=args.workdir) + golden(
        None if args.golden == "all" else int(args.golden))
    if args.other:
        diff = compare(paths, (args.other, {}), (ROOT, {}))
    else:
        diff = compare(paths, (ROOT, {"NUMBA_DISABLE_JIT": "1"}), (ROOT, {}))
    print(f"{len(paths)} scenarios, {len(diff)} differ")
    for p in diff:
        print("  differs:", p)
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
