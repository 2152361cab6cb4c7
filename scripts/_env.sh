#!/usr/bin/env bash
# Sourced by the other scripts: creates ./.venv and installs scalebench into it
# with the pinned versions of constraints.txt. Re-installs only when
# pyproject.toml or constraints.txt changed. Usage: source scripts/_env.sh [extras]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
VENV=${SCALEBENCH_VENV:-.venv}
EXTRAS=${1:-}

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "scalebench needs Python 3.11 or newer; set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "creating virtual environment $VENV"
  "$PYTHON" -m venv "$VENV"
fi
wanted=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
stamp="$VENV/.scalebench-installed${EXTRAS:+-$EXTRAS}"
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  echo "installing scalebench${EXTRAS:+[$EXTRAS]} and pinned dependencies (first time: a few minutes)"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -c constraints.txt -e ".${EXTRAS:+[$EXTRAS]}"
  echo "$wanted" > "$stamp"
fi
export PATH="$PWD/$VENV/bin:$PATH"
