#!/usr/bin/env bash
# Small operations, Ferrite against Redis: 8-byte keys, 16-byte values, one client connection,
# 1, 16 and 128 requests in flight, put/SET and get/GET.
#
# Builds the release binaries, installs redis-server and redis-tools with apt-get if they are
# missing, starts both servers on free loopback ports, runs `ferrite bench` and `redis-benchmark`
# at each point, and writes bench/results/<YYYY-MM-DD>-small-ops.md and .json (assembled by
# bench/small_ops_report.py).
#
# Environment:
#   BENCH_SECONDS  seconds per point (default 10)
#   BENCH_QUICK=1  one second per point, results named <date>-small-ops-quick.* (smoke test)
#   BENCH_PIN      1: servers on CPU 0, load generators on CPU 1, ferrite bench with one runtime
#                  thread, so each side has a core of its own and runs are repeatable (default
#                  when there are at least 2 CPUs and taskset exists). 0: no pinning, the client
#                  runtime uses every core; results named <date>-small-ops-shared.*
#   BENCH_RESULTS  directory for the results (default bench/results)
#   BENCH_COMMIT   what to record as the measured commit when the tree has no .git
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

SECONDS_PER_POINT=${BENCH_SECONDS:-10}
SUFFIX=""
if [[ "${BENCH_QUICK:-0}" == 1 ]]; then
    SECONDS_PER_POINT=1
    SUFFIX="-quick"
fi
if ! [[ "$SECONDS_PER_POINT" =~ ^[0-9]+$ ]] || ((SECONDS_PER_POINT < 1)); then
    echo "error: BENCH_SECONDS must be a whole number of seconds >= 1, got '$SECONDS_PER_POINT'" >&2
    exit 2
fi

# Where the processes run. Unpinned, the scheduler sometimes puts client and server on one CPU
# and sometimes on two, and on this kind of virtual machine a cross-CPU wake-up costs tens of
# microseconds, so unpinned figures swing by 2x from run to run.
PIN=${BENCH_PIN:-auto}
if [[ "$PIN" == auto ]]; then
    if (($(nproc) >= 2)) && command -v taskset >/dev/null; then PIN=1; else PIN=0; fi
fi
if [[ "$PIN" == 1 ]]; then
    SERVER_WRAP=(taskset -c 0)
    CLIENT_WRAP=(taskset -c 1)
    # One runtime thread: two would only take turns on the one CPU the client has.
    FERRITE_CLIENT_WRAP=(env TOKIO_WORKER_THREADS=1 taskset -c 1)
    PLACEMENT="pinned"
else
    SERVER_WRAP=()
    CLIENT_WRAP=()
    FERRITE_CLIENT_WRAP=()
    PLACEMENT="shared"
    SUFFIX="$SUFFIX-shared"
fi

OUTSTANDING_LEVELS=(1 16 128)
KEYS=100000
KEY_SIZE=8
VALUE_SIZE=16
RESULTS_DIR=${BENCH_RESULTS:-$ROOT/bench/results}
OUT_BASE="$RESULTS_DIR/$(date +%F)-small-ops$SUFFIX"

WORK=$(mktemp -d -t ferrite-small-ops.XXXXXX)
SERVER_PIDS=()

cleanup() {
    local status=$?
    # Stop only the servers this script started, by the PIDs it recorded.
    for pid in "${SERVER_PIDS[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 50); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
            wait "$pid" 2>/dev/null || true
        fi
    done
    if ((status != 0)); then
        echo "small-ops: failed (status $status); logs kept in $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

log() { echo "small-ops: $*" >&2; }

# A command quoted as it would be typed.
quote() {
    local quoted
    quoted=$(printf '%q ' "$@")
    quoted=${quoted% }
    # printf %q escapes commas, which need no quoting; keep the record readable.
    echo "${quoted//\\,/,}"
}

# Appends a command to the results' "commands" section.
record() {
    quote "$@" >>"$WORK/commands.txt"
}

run_logged() {
    record "$@"
    "$@"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

wait_for() {
    local what=$1 pid=$2
    shift 2
    for _ in $(seq 100); do
        if "$@" >/dev/null 2>&1; then
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            log "$what exited before it was ready"
            return 1
        fi
        sleep 0.1
    done
    log "$what not ready after 10 s"
    return 1
}

# What was measured: the commit, and whether the tree differed from it. A copy of the tree without
# .git (an export) can name its commit in BENCH_COMMIT.
if COMMIT=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null); then
    git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || COMMIT="$COMMIT (with uncommitted changes)"
else
    COMMIT=${BENCH_COMMIT:-unknown}
fi

# --- build and tools ------------------------------------------------------------------------
log "building release binaries"
run_logged cargo build --release -p ferrite-server -p ferrite-cli
# Relative to the repository root (the working directory), so the recorded commands read as they
# would be typed.
TARGET_DIR=${CARGO_TARGET_DIR:-target}
FERRITE_SERVER="$TARGET_DIR/release/ferrite-server"
FERRITE="$TARGET_DIR/release/ferrite"

if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null ||
    ! command -v redis-cli >/dev/null; then
    log "installing redis-server and redis-tools"
    SUDO=()
    if [[ $(id -u) -ne 0 ]]; then SUDO=(sudo); fi
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        redis-server redis-tools
fi

# --- servers --------------------------------------------------------------------------------
FERRITE_PORT=$(free_port)
REDIS_PORT=$(free_port)
while [[ "$REDIS_PORT" == "$FERRITE_PORT" ]]; do REDIS_PORT=$(free_port); done
FERRITE_ADDR="127.0.0.1:$FERRITE_PORT"

log "starting ferrite-server on $FERRITE_ADDR ($PLACEMENT)"
FERRITE_SERVER_CMD=("${SERVER_WRAP[@]}" "$FERRITE_SERVER" --listen "$FERRITE_ADDR"
    --data-dir "$WORK/ferrite-data" --log-level warn)
echo "$(quote "${FERRITE_SERVER_CMD[@]}") &" >>"$WORK/commands.txt"
# taskset execs the server, so $! is the server's own PID.
"${FERRITE_SERVER_CMD[@]}" >"$WORK/ferrite-server.log" 2>&1 &
FERRITE_PID=$!
SERVER_PIDS+=("$FERRITE_PID")
wait_for ferrite-server "$FERRITE_PID" grep -q '^ready\.' "$WORK/ferrite-server.log"

log "starting redis-server on 127.0.0.1:$REDIS_PORT ($PLACEMENT)"
REDIS_SERVER_CMD=("${SERVER_WRAP[@]}" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save ''
    --appendonly no --daemonize no)
echo "$(quote "${REDIS_SERVER_CMD[@]}") &" >>"$WORK/commands.txt"
# Started from the work directory so nothing it might write lands in the repository.
(cd "$WORK" && exec "${REDIS_SERVER_CMD[@]}" >"$WORK/redis-server.log" 2>&1) &
REDIS_PID=$!
SERVER_PIDS+=("$REDIS_PID")
wait_for redis-server "$REDIS_PID" redis-cli -p "$REDIS_PORT" ping

# Anything else running (a build, a test suite) skews every figure; the report shows the load.
cp /proc/loadavg "$WORK/loadavg-start" 2>/dev/null || true

# --- the points -----------------------------------------------------------------------------
# Both stores hold every key of the key space before any measured request, so every get hits and
# every put replaces a value, in both. Redis gets exactly redis-benchmark's key names
# (`key:` + 12 digits) through redis-cli --pipe; Ferrite's get run preloads its pool and keeps it
# for the put run that follows, and the pool is deleted after that.
log "preloading redis with $KEYS keys"
python3 - "$KEYS" "$VALUE_SIZE" >"$WORK/redis-preload.resp" <<'PY'
import sys
keys, value_size = int(sys.argv[1]), int(sys.argv[2])
value = "x" * value_size
out = sys.stdout
for n in range(keys):
    key = f"key:{n:012d}"
    out.write(f"*3\r\n$3\r\nSET\r\n${len(key)}\r\n{key}\r\n${value_size}\r\n{value}\r\n")
PY
echo "python3 (writes SET key:000000000000 .. key:$(printf '%012d' $((KEYS - 1))) as RESP) | redis-cli -p $REDIS_PORT --pipe" >>"$WORK/commands.txt"
redis-cli -p "$REDIS_PORT" --pipe <"$WORK/redis-preload.resp" >"$WORK/redis-preload.log"

ferrite_point() {
    local workload=$1 outstanding=$2
    shift 2
    log "ferrite: $workload, $outstanding outstanding, ${SECONDS_PER_POINT}s"
    run_logged "${FERRITE_CLIENT_WRAP[@]}" "$FERRITE" --addr "$FERRITE_ADDR" --json bench \
        --workload "$workload" --key-size "$KEY_SIZE" --value-size "$VALUE_SIZE" --keys "$KEYS" \
        --clients 1 --outstanding "$outstanding" --duration "$SECONDS_PER_POINT" --pool small-ops "$@" \
        >"$WORK/ferrite-$workload-$outstanding.json" 2>"$WORK/ferrite-$workload-$outstanding.log"
}

# redis-benchmark has no duration option, only a request count. A short calibration run measures
# the rate at this point, and the real run asks for rate × seconds requests.
redis_requests_for() {
    local outstanding=$1 calibration rate
    calibration=$((5000 * outstanding))
    if ((calibration > 500000)); then calibration=500000; fi
    rate=$("${CLIENT_WRAP[@]}" redis-benchmark -p "$REDIS_PORT" -c 1 -P "$outstanding" -t set,get \
        -d "$VALUE_SIZE" -r "$KEYS" -n "$calibration" --csv |
        python3 -c 'import csv, sys
rates = [float(row["rps"]) for row in csv.DictReader(sys.stdin)]
print(int(sum(rates) / len(rates)))')
    echo $((rate * SECONDS_PER_POINT))
}

for outstanding in "${OUTSTANDING_LEVELS[@]}"; do
    ferrite_point get "$outstanding" --keep-pool
    ferrite_point put "$outstanding"
    run_logged "$FERRITE" --addr "$FERRITE_ADDR" pool delete small-ops >/dev/null
    requests=$(redis_requests_for "$outstanding")
    log "redis: SET and GET, pipeline $outstanding, $requests requests each"
    run_logged "${CLIENT_WRAP[@]}" redis-benchmark -p "$REDIS_PORT" -c 1 -P "$outstanding" -t set,get \
        -d "$VALUE_SIZE" -r "$KEYS" -n "$requests" --csv >"$WORK/redis-$outstanding.csv"
done

# --- report ---------------------------------------------------------------------------------
mkdir -p "$RESULTS_DIR"
python3 "$ROOT/bench/small_ops_report.py" --work "$WORK" --seconds "$SECONDS_PER_POINT" \
    --outstanding "${OUTSTANDING_LEVELS[@]}" --key-size "$KEY_SIZE" --value-size "$VALUE_SIZE" \
    --keys "$KEYS" --quick "${BENCH_QUICK:-0}" --placement "$PLACEMENT" --commit "$COMMIT" \
    --out "$OUT_BASE"
log "wrote $OUT_BASE.md and $OUT_BASE.json"
