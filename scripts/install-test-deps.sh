#!/usr/bin/env bash
# Installs what the test suites need: a Python virtual environment with the pinned packages of
# requirements-test.txt, and redis-cli (Debian's redis-tools) for the RESP listener's tests. Safe
# to run again; it only adds what is missing.
set -euo pipefail
venv=${1:-.venv}
cd "$(dirname "$0")/.."

if ! command -v redis-cli >/dev/null 2>&1; then
    echo "installing redis-cli (redis-tools)"
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo="sudo"
    fi
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-tools
fi

if [ ! -x "$venv/bin/python" ]; then
    echo "creating Python virtual environment in $venv"
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
echo "test dependencies installed in $venv"
