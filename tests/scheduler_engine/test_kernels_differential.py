"""The numba kernels decide the same compiled and interpreted (``NUMBA_DISABLE_JIT=1``), on generated
and mutated clusters and on golden files, each engine in its own process.

A bounded sample of :mod:`tests.support.differential` (the full campaign, also against
another tree, is its command line). Compiled and interpreted runs of one source differ only if a
kernel relies on something numba does differently from Python (integer overflow, float
operations, signed zeros, out-of-range indexing).
"""
from __future__ import annotations

import math
import random
import shutil
from pathlib import Path

from scheduler_engine.kernels.victim_keys import round12
from tests.support import differential


def test_compiled_and_interpreted_kernels_decide_the_same(tmp_path: Path):
    paths = differential.generated(24, seed=20261204, workdir=tmp_path) + differential.golden(limit=40)
    diff = differential.compare(paths, (differential.ROOT, {"NUMBA_DISABLE_JIT": "1"}), (differential.ROOT, {}))
    assert diff == []


def test_the_campaign_tells_engines_apart(tmp_path: Path):
    """A changed victim rule shows: the same campaign against a tree whose victim order takes the
    *largest* key first finds differences."""
    other = tmp_path / "other"
    shutil.copytree(differential.ROOT / "scheduler_engine", other / "scheduler_engine",
                    ignore=shutil.ignore_patterns("__pycache__"))
    keys = other / "scheduler_engine" / "kernels" / "victim_keys.py"
    text = keys.read_text()
    assert "            if x < y:\n                less = True" in text
    keys.write_text(text.replace("            if x < y:\n                less = True", "            if x > y:\n                less = True", 1))
    paths = differential.generated(6, seed=5, workdir=tmp_path)
    diff = differential.compare(paths, (other, {"NUMBA_DISABLE_JIT": "1"}), (differential.ROOT, {"NUMBA_DISABLE_JIT": "1"}))
    assert diff


def test_round12_is_pythons_round():
    """The victim keys' rounding equals ``round(x, 12)`` bit for bit (ties, neighbours of
    half-way decimals, dyadic fractions, the range above 4096 where doubles are 2**-40 apart)."""
    rng = random.Random(17)
    vals = [0.0, -0.0, 2.0 ** -13, 3 * 2.0 ** -13, 0.5e-12, 2.5e-12, 4096.0, 4503.6, 5000.1, 8191.99, 8192.5,
            1e300, 1e-300, 5e-324, math.inf]
    for _ in range(20000):
        k = rng.random()
        if k < 0.25:
            v = rng.randint(0, 100) / rng.randint(1, 100)
        elif k < 0.45:
            v = rng.random() * 10 ** rng.randint(-15, 4)
        elif k < 0.55:
            v = rng.uniform(4096, 8192)
        elif k < 0.7:
            v = (rng.randint(0, 10**13) + 0.5) / 1e12
        elif k < 0.85:
            v = math.nextafter((rng.randint(0, 10**13) + 0.5) / 1e12, rng.choice([0.0, 1e9]))
        else:
            v = rng.randint(1, 2**30) * 2.0 ** -rng.randint(1, 60)
        vals += [v, -v]
    bad = [v for v in vals if (round12(v), math.copysign(1, round12(v))) != (round(v, 12), math.copysign(1, round(v, 12)))]
    assert bad == []
