#!/usr/bin/env bash
# make install's first step: a virtual environment of the Python the pins are made for.
# Usage: scripts/venv.sh PYTHON VENV. Refuses another interpreter in one line, and rebuilds
# a VENV left by another Python (a retry with PYTHON=python3.11 after a python3.12 venv).
set -euo pipefail
python="$1" venv="$2" want="3.11"
version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true; }
have=""
if command -v "$python" >/dev/null 2>&1; then have="$(version "$python")"; fi
if [[ "$have" != "$want" ]]; then
  if [[ -n "$have" ]]; then found="Python $have"; else found="not a working Python"; fi
  echo "error: imagepipe needs Python $want (its pinned TensorFlow, Airflow and Beam);" \
    "$python is $found: install python$want and run make PYTHON=python$want ..." >&2
  exit 2
fi
if [[ -e "$venv" && "$(version "$venv/bin/python")" != "$want" ]]; then
  echo "$venv is not a Python $want environment: rebuilding it with $python"
  rm -rf "$venv"
fi
if [[ ! -x "$venv/bin/python" ]]; then
  echo "creating $venv (Python $want)"
  "$python" -m venv "$venv"
fi
