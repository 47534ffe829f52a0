#!/usr/bin/env bash
# The README's test command: create/refresh .venv, install the project with its test extras,
# run the whole suite (engine golden scenarios from ../shared included).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
exec .venv/bin/python -m pytest "$@"
