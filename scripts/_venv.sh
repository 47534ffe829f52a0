# Sourced by the scripts in this directory: create .venv if missing and install the project into
# it (extras as the first argument, e.g. "[test]"), from the repository root.
cd "$(dirname "${BASH_SOURCE[1]:-$0}")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".${1:-}"
