"""The Dockerfile, the entrypoint and the compose file only use things the project really has.

No Docker engine runs on the CI machines, so these tests check syntax and references: every
instruction is a Dockerfile instruction, every COPY source exists, the image runs as a non-root
user, every role the compose file and the chart ask for is one the entrypoint knows, and every
program the entrypoint starts (the WSGI app, the Celery app, manage.py commands) exists.
"""
from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER",
                "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}


def dockerfile_instructions() -> list[tuple[str, str]]:
    out, buf = [], ""
    for raw in (DEPLOY / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        buf += (" " if buf else "") + line.rstrip("\\").strip()
        if line.endswith("\\"):
            continue
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    assert not buf, "Dockerfile ends inside a continued line"
    return out


def entrypoint_roles() -> set[str]:
    text = (DEPLOY / "entrypoint.sh").read_text()
    block = text.split('case "$role" in', 1)[1]
    return {m.group(1) for m in re.finditer(r"^\s{2}([a-z]+)\)", block, re.M)}


def test_dockerfile_uses_known_instructions_and_existing_sources():
    instrs = dockerfile_instructions()
    assert instrs[0][0] == "FROM"
    for word, rest in instrs:
        assert word in INSTRUCTIONS, f"unknown Dockerfile instruction {word}"
        if word == "COPY" and "--from=" not in rest:
            parts = [p for p in rest.split() if not p.startswith("--")]
            for src in parts[:-1]:
                assert (ROOT / src).exists(), f"COPY source {src} does not exist"


def test_image_runs_as_non_root_with_the_entrypoint():
    instrs = dockerfile_instructions()
    users = [rest for word, rest in instrs if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    entry = [rest for word, rest in instrs if word == "ENTRYPOINT"][-1]
    assert yaml.safe_load(entry) == ["kai-entrypoint"]
    assert yaml.safe_load([rest for word, rest in instrs if word == "CMD"][-1])[0] in entrypoint_roles()
    assert any("collectstatic" in rest for word, rest in instrs if word == "RUN")


def test_entrypoint_is_valid_shell_and_knows_every_role():
    subprocess.run(["sh", "-n", str(DEPLOY / "entrypoint.sh")], check=True)
    assert {"web", "worker", "beat", "dispatcher", "sync", "migrate", "manage"} <= entrypoint_roles()


def test_entrypoint_programs_exist():
    text = (DEPLOY / "entrypoint.sh").read_text()
    wsgi = re.search(r"gunicorn (\S+):(\w+)", text)
    module = importlib.import_module(wsgi.group(1))
    assert callable(getattr(module, wsgi.group(2)))
    for app in set(re.findall(r"celery -A (\S+)", text)):
        celery_mod = importlib.import_module(f"{app}.celery")
        assert celery_mod.app.main == "kaiplatform"
    from django.core.management import get_commands

    commands = get_commands()
    for name in ("migrate", "collectstatic", "healthcheck"):
        assert name in commands


def test_lock_file_pins_every_dependency():
    lock = (DEPLOY / "requirements.lock").read_text().splitlines()
    pins = {re.split(r"==", line)[0].lower().replace("_", "-") for line in lock if line and not line.startswith("#")}
    assert all("==" in line for line in lock if line and not line.startswith("#"))
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in project["dependencies"]:
        name = re.split(r"[<>=\[ ;]", dep, 1)[0].lower().replace("_", "-")
        assert name in pins, f"{name} is not pinned in deploy/requirements.lock"


def test_compose_stack_is_complete_and_uses_real_roles():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "web", "worker", "beat"} <= set(services)
    roles = entrypoint_roles()
    for name, svc in services.items():
        if "build" in svc:
            assert (DEPLOY / svc["build"]["context"] / svc["build"]["dockerfile"]).resolve() == (DEPLOY / "Dockerfile").resolve()
            assert svc["command"][0] in roles, f"{name}: unknown role {svc['command']}"
            env = svc["environment"]
            assert env["DATABASE_URL"].startswith("postgres://") and env["CELERY_BROKER_URL"].startswith("redis://")
            assert env["KAI_ENV"] == "production"


def test_chart_roles_are_entrypoint_roles():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from helm_render import render_chart

    roles = entrypoint_roles()
    values = {"existingSecret": "s"}
    for text in render_chart(DEPLOY / "helm" / "kaiplatform", values=values).values():
        for doc in yaml.safe_load_all(text):
            if doc and doc["kind"] in ("Deployment", "Job"):
                for c in doc["spec"]["template"]["spec"]["containers"]:
                    if c["image"].startswith("kaiplatform"):
                        assert c["args"][0] in roles


@pytest.mark.parametrize("fail_level", ["WARNING"])
def test_check_deploy_passes_under_production_settings(tmp_path, fail_level):
    env = {
        "PATH": "/usr/bin:/bin",
        "KAI_ENV": "production",
        "KAI_VAR_DIR": str(tmp_path),
        "SECRET_KEY": "k" * 20 + "Zq9#xLm2$vB7!pR4@wT6^yU8&iO0*aS3(dF5)gH1-jK",
        "ALLOWED_HOSTS": "kaiplatform.example.com",
        "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3",
    }
    proc = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", fail_level],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_production_refuses_to_start_without_secret_key(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "KAI_ENV": "production", "KAI_VAR_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0 and "SECRET_KEY" in proc.stderr


def test_neither_the_image_nor_the_wheel_ships_test_tooling():
    """The API emulator and the engine's reference are test tooling under tests/support: the image
    copies only the product packages, and the wheel's package list (pyproject) holds no tests."""
    import tomllib

    from setuptools import find_packages

    sources = [src for word, rest in dockerfile_instructions() if word == "COPY" and "--from=" not in rest
               for src in [p for p in rest.split() if not p.startswith("--")][:-1]]
    assert not [s for s in sources if s.startswith("tests") or s == "."], sources
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = find_packages(where=str(ROOT), include=include)
    assert packages and not [p for p in packages if p.split(".")[0] == "tests"], packages
    shipped = [f for p in packages for f in (ROOT / p.replace(".", "/")).glob("*.py")]
    assert not [f for f in shipped if "emulator" in f.stem or "reference" in f.stem]


def _entrypoint(env: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    """The entrypoint with an unknown role: it seeds the kernel cache, then refuses the role (64)."""
    return subprocess.run(["sh", str(DEPLOY / "entrypoint.sh"), "no-such-role"], env={"PATH": "/usr/bin:/bin", **env},
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)


def test_entrypoint_seeds_an_empty_kernel_cache_and_leaves_a_filled_one(tmp_path):
    """Helm mounts an empty volume over the image's NUMBA_CACHE_DIR: the entrypoint copies the
    kernels compiled at build time (KAI_NUMBA_SEED) into it, and never over a cache in use."""
    seed = tmp_path / "seed"
    (seed / "kernels_x").mkdir(parents=True)
    (seed / "kernels_x" / "f-1.py311.nbi").write_bytes(b"index")
    (seed / "kernels_x" / "f-1.py311.1.nbc").write_bytes(b"data")
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "var" / "cache"), "KAI_NUMBA_SEED": str(seed)}
    assert _entrypoint(env, tmp_path).returncode == 64
    assert (tmp_path / "var" / "cache" / "kernels_x" / "f-1.py311.1.nbc").read_bytes() == b"data"
    assert (tmp_path / "var" / "cache" / "kernels_x" / "f-1.py311.nbi").read_bytes() == b"index"

    used = tmp_path / "used"
    (used / "kernels_y").mkdir(parents=True)
    assert _entrypoint({**env, "NUMBA_CACHE_DIR": str(used)}, tmp_path).returncode == 64
    assert sorted(p.name for p in used.iterdir()) == ["kernels_y"]
    # no seed in the image (or none configured): nothing to do, the role still runs
    assert _entrypoint({"NUMBA_CACHE_DIR": str(tmp_path / "other")}, tmp_path).returncode == 64
    assert not (tmp_path / "other").exists()


_LOAD_KERNEL = """
import sys
import numpy as np
from scheduler_engine.kernels.gpu_fit import pack_best_fit
pack_best_fit(np.array([1.0]), np.array([-1]), np.zeros((1, 1), dtype=np.bool_), np.array([0]), np.array([8.0]))
print(len(pack_best_fit.stats.cache_hits), len(pack_best_fit.stats.cache_misses))
"""


def test_a_copied_kernel_cache_is_loaded_not_compiled_again(tmp_path):
    """What the entrypoint's copy relies on: numba keys its cache by the kernel's source file (path,
    mtime, size) and the CPU, not by the cache directory or its files' times, so a compiled
    kernel copied into another NUMBA_CACHE_DIR is loaded there (a cache hit), not compiled again."""
    pytest.importorskip("numba")
    import os
    import shutil

    def run(cache: Path) -> str:
        env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "KAI_KERNEL_COMPILE": "eager"}
        env.pop("NUMBA_DISABLE_JIT", None)
        proc = subprocess.run([sys.executable, "-c", _LOAD_KERNEL], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    assert run(tmp_path / "build") == ["0", "1"]  # compiled (and cached)
    shutil.copytree(tmp_path / "build", tmp_path / "pod")
    for f in (tmp_path / "pod").rglob("*"):
        os.utime(f, (0, 0))
    assert run(tmp_path / "pod") == ["1", "0"]  # loaded


def test_the_image_compiles_kernels_for_any_cpu_of_its_architecture():
    """numba's cache key holds the CPU name and features the code was generated for; the image
    builds its cache on the build machine, so it sets NUMBA_CPU_NAME=generic (build and run time):
    the key's CPU part is then the same on every node ('generic', no features) and a pod on another
    CPU model loads the image's kernels instead of compiling them again."""
    pytest.importorskip("numba")
    import os

    env_lines = " ".join(rest for word, rest in dockerfile_instructions() if word == "ENV")
    assert re.search(r"\bNUMBA_CPU_NAME=generic\b", env_lines)
    assert re.search(r"\bKAI_NUMBA_SEED=\S+", env_lines) and re.search(r"\bNUMBA_CACHE_DIR=\S+", env_lines)
    warm = [rest for word, rest in dockerfile_instructions() if word == "RUN" and "kernels.warm" in rest]
    assert warm and 'NUMBA_CACHE_DIR="$KAI_NUMBA_SEED"' in warm[0]
    probe = "from numba.core.registry import cpu_target; print(repr(cpu_target.target_context.codegen().magic_tuple()))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CPU")}
    out = subprocess.run([sys.executable, "-c", probe], env={**env, "NUMBA_CPU_NAME": "generic"}, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    import ast

    triple, cpu, features = ast.literal_eval(out)
    assert (cpu, features) == ("generic", "")
