#!/usr/bin/env bash
# Installs what the test suites need: a Python virtual environment with the pinned packages of
# requirements-test.txt, and the Debian packages the RESP listener's tests and the quick benchmark
# comparison run. Safe to run again; it only adds what is missing.
set -euo pipefail
venv=${1:-.venv}
cd "$(dirname "$0")/.."

# Debian packages: redis-cli (redis-tools) for the RESP listener's tests; redis-server,
# redis-benchmark (redis-tools) and memcached for `bench/compare --quick` (make test-bench); the C
# toolchain, valgrind and pkg-config for the C client's tests (make test-c); iproute2, nftables and
# util-linux for the cluster test harness.
missing=""
command -v redis-cli >/dev/null 2>&1 && command -v redis-benchmark >/dev/null 2>&1 || missing="$missing redis-tools"
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v memcached >/dev/null 2>&1 || missing="$missing memcached"
# The C client's tests (make test-c): compilers, valgrind, pkg-config and openssl.
command -v gcc >/dev/null 2>&1 || missing="$missing gcc"
command -v g++ >/dev/null 2>&1 || missing="$missing g++"
command -v valgrind >/dev/null 2>&1 || missing="$missing valgrind"
command -v pkg-config >/dev/null 2>&1 || missing="$missing pkg-config"
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
# The cluster tests' harness: ip (network namespaces, veth, bridge), nft (partitions), setpriv
# (nodes die with the test process), python3 (the harness self-test's stand-in server).
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
command -v nft >/dev/null 2>&1 || missing="$missing nftables"
command -v setpriv >/dev/null 2>&1 || missing="$missing util-linux"
command -v python3 >/dev/null 2>&1 || missing="$missing python3"
if [ -n "$missing" ]; then
    echo "installing$missing from Debian"
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo="sudo"
    fi
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
    # shellcheck disable=SC2086 # one word per package
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
fi

if [ ! -x "$venv/bin/python" ]; then
    echo "creating Python virtual environment in $venv"
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
echo "test dependencies installed in $venv"
