"""A cached kernel is stale when any source compiled into it changed (:mod:`scheduler_engine.kernels.
source_stamp`), not only its own file (numba's own check): else a cache kept across a change to
scenario.py would load a ``run_search`` that still carries the old scenario code."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scheduler_engine.kernels import source_stamp

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "scheduler_engine" / "kernels"


def test_search_depends_on_what_it_compiles_in():
    names = {p.relative_to(REPO / "scheduler_engine").as_posix() for p in source_stamp.dependencies(KERNELS / "search.py")}
    assert {"kernels/search.py", "kernels/scenario.py", "kernels/victim_run.py", "kernels/journal.py",
            "kernels/node_index.py", "kernels/victim_keys.py", "snapshot.py"} <= names
    assert "kernels/allocate.py" not in names and "kernels/warm.py" not in names  # (not compiled into it)


def test_key_follows_kernel_modules_transitively_and_constants_one_level(tmp_path):
    k = tmp_path / "eng" / "k"
    k.mkdir(parents=True)
    (tmp_path / "eng" / "__init__.py").write_text("")
    (tmp_path / "eng" / "consts.py").write_text("from .other import X\nGPU = 0\n")
    (tmp_path / "eng" / "other.py").write_text("X = 1\n")
    (k / "__init__.py").write_text("")
    (k / "a.py").write_text("from .b import g\n")
    (k / "b.py").write_text("from . import c\nfrom ..consts import GPU\n")
    (k / "c.py").write_text("Y = 1\n")
    (k / "unrelated.py").write_text("Z = 1\n")

    def key():
        for f in (source_stamp.dependency_key, source_stamp.relative_imports, source_stamp._file_digest):
            f.cache_clear()
        return source_stamp.dependency_key(str(k / "a.py"))

    k0 = key()
    (k / "unrelated.py").write_text("Z = 2\n")
    (tmp_path / "eng" / "other.py").write_text("X = 2\n")  # (an engine module's own imports: not followed)
    assert key() == k0
    for f, text in ((k / "c.py", "Y = 2\n"), (tmp_path / "eng" / "consts.py", "from .other import X\nGPU = 1\n")):
        before = key()
        f.write_text(text)
        assert key() != before, f


def test_every_kernel_uses_the_dependency_cache():
    numba = pytest.importorskip("numba")
    if numba.config.DISABLE_JIT:
        pytest.skip("the JIT is disabled: no dispatchers")
    from scheduler_engine.kernels import warm

    ks = warm.kernels()
    assert ks
    wrong = [n for n, d in ks.items() if not isinstance(d._cache, source_stamp.DependencyFunctionCache)]
    assert not wrong


def test_a_cached_caller_is_recompiled_when_its_callee_changes(tmp_path):
    """Two processes on one cache directory: the second, after the callee's file changed, must run the
    new callee inside the cached caller (numba's own cache check loads the old caller: 7, not 10)."""
    pytest.importorskip("numba")
    pkg = tmp_path / "pkg" / "k"
    pkg.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        import numba
        from scheduler_engine.kernels.source_stamp import DependencyFunctionCache
        def kern(f):
            d = numba.njit(f)
            d._cache = DependencyFunctionCache(d.py_func)
            return d
    """))
    (pkg / "a.py").write_text("from . import kern\nfrom .b import g\n@kern\ndef f(x):\n    return g(x) + 1\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    env.pop("NUMBA_DISABLE_JIT", None)

    def run(factor: int) -> int:
        (pkg / "b.py").write_text(f"from . import kern\n@kern\ndef g(x):\n    return x * {factor}\n")
        proc = subprocess.run([sys.executable, "-c", "from pkg.k.a import f; print(f(3))"], env=env,
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return int(proc.stdout.strip())

    assert run(2) == 7
    assert list((tmp_path / "cache").rglob("a.f-*.nbi")), "the caller was not cached"
    assert run(3) == 10
