"""The first-party import graph: no circles, and the engine never imports Django.

Why a test: an import circle is how sub-domains grow into one another unnoticed (the cycle calling
the dispatcher calling the Celery tasks calling the cycle), and the engine's promise -- snapshot in,
decisions out, no Django -- is only a promise until something checks it.  The graph is read with
``ast``, not by importing, so an import written inside a function counts exactly like one at the
top of the module: moving an import into a function hides the dependency from Python's loader, not
from this test.  ``importlib.import_module("dotted.name")`` with a literal name counts too.

What is *not* an edge (and why):
- imports under ``if TYPE_CHECKING:`` -- never executed, annotations only;
- the implicit execution of parent packages (``import a.b.c`` runs ``a/__init__``): counting it
  would make every package ``__init__`` that re-exports a submodule a circle with that submodule;
  an explicit ``from a import name`` is an edge to ``a`` (or to ``a.name`` if that is a module);
- migrations (Django loads them by name, they import models by app label).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("queues_app", "fairshare_app", "kaiplatform", "scheduler_engine")

def first_party_modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if "migrations" in rel.parts:
                continue
            name = ".".join(rel.with_suffix("").parts)
            if name.endswith(".__init__"):
                name = name[: -len(".__init__")]
            mods[name] = path
    return mods


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of every node under an ``if TYPE_CHECKING:`` block."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else None
            if name == "TYPE_CHECKING":
                for child in node.body:
                    skipped.update(id(n) for n in ast.walk(child))
    return skipped


def imported_names(module: str, path: Path) -> list[str]:
    """Every dotted name ``module`` imports, wherever the import statement sits."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped = _type_checking_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.extend(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if fname in ("import_module", "__import__"):
                names.append(node.args[0].value)
    return names


def import_graph() -> dict[str, set[str]]:
    mods = first_party_modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        for name in imported_names(module, path):
            parts = name.split(".")
            while parts and ".".join(parts) not in mods:
                parts.pop()  # ``from a.b import func`` -> a.b; ``import a.b.c`` -> a.b.c
            target = ".".join(parts)
            if target and target != module:
                graph[module].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's algorithm, iterative; components of more than one module are circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        comp.add(member)
                        if member == node:
                            break
                    if len(comp) > 1:
                        out.append(frozenset(comp))
    return out


def describe(graph: dict[str, set[str]], comp: frozenset[str]) -> str:
    edges = [f"  {a} -> {b}" for a in sorted(comp) for b in sorted(graph[a] & comp)]
    return "circle of {} modules:\n{}".format(len(comp), "\n".join(edges))


def test_the_walker_sees_imports_inside_functions_and_relative_ones(tmp_path):
    """The walker itself: a function-level import and a relative import are both edges."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.b import g\n    return g\n")
    (pkg / "b.py").write_text("from . import a\nfrom typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from pkg import c\n")
    assert imported_names("pkg.a", pkg / "a.py") == ["pkg.b.g"]
    assert imported_names("pkg.b", pkg / "b.py") == ["pkg.a", "typing.TYPE_CHECKING"]
    graph = {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": set()}
    assert strongly_connected(graph) == [frozenset({"pkg.a", "pkg.b"})]


def test_no_import_circles_between_first_party_modules():
    graph = import_graph()
    circles = strongly_connected(graph)
    assert not circles, "import circles:\n" + "\n".join(describe(graph, c) for c in circles)


def _importers(prefix: str, *, of: str) -> list[str]:
    """Modules under ``prefix`` that import ``of`` (or anything under it)."""
    mods = first_party_modules()
    return sorted(f"{module} imports {name}" for module, path in mods.items()
                  if module == prefix or module.startswith(prefix + ".")
                  for name in imported_names(module, path) if name == of or name.startswith(of + "."))


def test_queues_app_never_imports_fairshare_app():
    """fairshare_app depends on queues_app (its models, the engine boundary) and registers itself as
    the usage provider the cycle asks for; the other direction would make the two one app."""
    assert not _importers("queues_app", of="fairshare_app")


def test_on_the_django_side_only_engine_io_imports_the_engine():
    bad = [line for pkg in ("queues_app", "fairshare_app", "kaiplatform")
           for line in _importers(pkg, of="scheduler_engine")
           if not line.startswith("queues_app.cycle.engine_io imports")]
    assert not bad, bad


@pytest.mark.parametrize("package", ["queues_app.services", "queues_app.cycle", "queues_app.kube"])
def test_tasks_are_enqueued_by_name_not_imported(package):
    """Celery tasks call services; services, the cycle and the outbox enqueue tasks by name."""
    assert not _importers(package, of="queues_app.tasks")


@pytest.mark.parametrize("forbidden", ["django", "rest_framework", "celery", "queues_app", "fairshare_app",
                                       "kaiplatform"])
def test_the_engine_imports_no_django_and_nothing_of_the_control_plane(forbidden):
    mods = first_party_modules()
    bad = sorted(
        f"{module} imports {name}"
        for module, path in mods.items() if module.split(".")[0] == "scheduler_engine"
        for name in imported_names(module, path)
        if name == forbidden or name.startswith(forbidden + ".")
    )
    assert not bad, bad


# Development tools of a source checkout that use test tooling: each imports it inside a function and
# says clearly, when it is missing (wheel, image), that it needs the checkout.
CHECKOUT_ONLY_IMPORTS = {
    ("queues_app.management.commands.kube_demo", "tests.support.kube_emulator.KubeEmulator"),
    ("scheduler_engine.bench", "tests.support.engine_reference"),
}


def test_product_code_imports_test_tooling_only_in_the_checkout_only_tools():
    mods = first_party_modules()
    found = {(module, name) for module, path in mods.items() for name in imported_names(module, path)
             if name == "tests" or name.startswith("tests.")}
    assert found == CHECKOUT_ONLY_IMPORTS


def test_no_test_tooling_in_a_product_package():
    """Emulators, fakes, mocks and oracles live under tests/ (the wheel and the image ship the four
    product packages only)."""
    words = ("emulator", "fake", "mock", "stub", "reference", "oracle")
    bad = sorted(str(path.relative_to(ROOT)) for path in first_party_modules().values()
                 if any(w in path.stem.lower() for w in words))
    assert not bad, bad
