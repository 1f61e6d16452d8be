#!/usr/bin/env bash
# Installs what the test suites need: a Python virtual environment with the pinned packages of
# requirements-test.txt. Safe to run again; it only adds what is missing.
set -euo pipefail
venv=${1:-.venv}
cd "$(dirname "$0")/.."

if [ ! -x "$venv/bin/python" ]; then
    echo "creating Python virtual environment in $venv"
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
echo "test dependencies installed in $venv"
