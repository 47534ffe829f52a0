"""Numba's on-disk cache keyed by a kernel's source *and every source compiled into it*.

Why: numba checks a cached kernel against its own file only (a hash of that file's bytes). But a
kernel that calls another kernel compiles the callee's code into its own, and module constants
(``from ..snapshot import GPU``) are frozen into the machine code: ``search.run_search`` carries
``run_victims`` (victim_run.py), ``run_scenario`` (scenario.py), the journal, the node index... After
a change to scenario.py alone, numba would load the old ``run_search`` - with the old scenario code
inside - from the cache, and the engine would decide with two versions of one rule at once,
silently (a ``git pull``, a source edit during development, a cache volume kept across an upgrade).

So every kernel's cache stamp is numba's own stamp plus :func:`dependency_key` of its file: a hash of
the kernel modules it imports, transitively, and of the other engine modules they import names from
(constants), by path relative to the engine package and content. A change to any of those makes the
cached versions stale for numba's own check, which then compiles anew and overwrites them; a kernel
whose sources did not change keeps its cache (a copy of the cache to another directory or machine
still hits, as the container image's seed does: content, not times or places).
"""
from __future__ import annotations

import ast
import hashlib
import inspect
from functools import lru_cache
from pathlib import Path

@lru_cache(maxsize=None)
def relative_imports(path: Path) -> tuple[Path, ...]:
    """The engine files ``path`` imports with relative imports (``from .x import y``, ``from . import
    x``, ``from ..x import y``), wherever they stand in it (each file parsed once per process: every
    kernel module's closure walks the shared ones again)."""
    out: list[Path] = []
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        if node.module:
            target = base.joinpath(*node.module.split("."))
            found = [p for p in (target.with_suffix(".py"), target / "__init__.py") if p.is_file()]
            out.extend(found[:1])
        else:  # from . import a, b: submodules, or names of the package itself
            for alias in node.names:
                sub = base / f"{alias.name}.py"
                out.append(sub if sub.is_file() else base / "__init__.py")
    return tuple(p.resolve() for p in out if p.is_file())


def dependencies(path: str | Path) -> list[Path]:
    """``path`` and the files compiled into its kernels: the modules of its own package (the kernels)
    followed transitively, other engine modules (constants such as ``snapshot.GPU``) taken as they
    are, not followed."""
    start = Path(path).resolve()
    seen: set[Path] = set()
    todo = [start]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        if p.parent == start.parent:
            todo.extend(relative_imports(p))
    return sorted(seen)


@lru_cache(maxsize=None)
def _file_digest(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


@lru_cache(maxsize=None)
def dependency_key(path: str) -> str:
    """Hash of :func:`dependencies` of ``path``: each file's path relative to the package above the
    kernel's own (the engine) and its bytes (the same in every copy of the tree)."""
    h = hashlib.sha256()
    for p in dependencies(path):
        try:
            name = p.relative_to(Path(path).resolve().parents[1]).as_posix()
        except ValueError:
            name = p.name
        h.update(name.encode() + b"\0" + _file_digest(p))
    return h.hexdigest()


try:
    from numba.core.caching import CompileResultCacheImpl, FunctionCache
except ImportError:  # no numba: nothing is compiled, nothing cached
    FunctionCache = None

if FunctionCache is not None:
    class _DependencyCacheImpl(CompileResultCacheImpl):
        """numba's cache implementation for a kernel, whose locator's stamp (checked against the one
        saved in the cache index) also carries :func:`dependency_key`."""

        def __init__(self, py_func):
            super().__init__(py_func)
            locator = self.locator
            own = locator.get_source_stamp
            key = dependency_key(inspect.getfile(py_func))
            locator.get_source_stamp = lambda: (own(), key)

    class DependencyFunctionCache(FunctionCache):
        """A kernel's on-disk cache, stale when any source compiled into it changed."""

        _impl_class = _DependencyCacheImpl
else:
    DependencyFunctionCache = None
