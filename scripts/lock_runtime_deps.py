"""Write deploy/requirements.lock: the installed versions of the runtime dependency closure.

Run with the project's venv (``.venv/bin/python scripts/lock_runtime_deps.py``) after changing
pyproject's ``dependencies``; test extras are not part of the image and are left out.
"""
from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: list[str]) -> dict[str, str]:
    seen: dict[str, str] = {}
    todo = [Requirement(r) for r in roots]
    while todo:
        req = todo.pop()
        key = norm(req.name)
        if key in seen:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            sys.exit(f"{req.name} is not installed in this environment")
        seen[key] = f"{dist.metadata['Name']}=={dist.version}"
        for extra in req.extras or {""}:
            for sub in dist.requires or []:
                sr = Requirement(sub)
                env = {"extra": extra} if extra else {"extra": ""}
                if sr.marker is None or sr.marker.evaluate(env):
                    todo.append(sr)
    return seen


def main() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = closure(project["dependencies"])
    lines = ["# Runtime dependency closure pinned from the tested venv by scripts/lock_runtime_deps.py."]
    lines += sorted(pins.values(), key=str.lower)
    (ROOT / "deploy" / "requirements.lock").write_text("\n".join(lines) + "\n")
    print(f"pinned {len(pins)} packages")


if __name__ == "__main__":
    main()
