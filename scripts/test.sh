#!/usr/bin/env bash
# The README's test command: create/refresh .venv, install the project with its test extras,
# run the whole suite (engine golden scenarios from ../shared included).
set -euo pipefail
source "$(dirname "$0")/_venv.sh" "[test]"
exec .venv/bin/python -m pytest "$@"
