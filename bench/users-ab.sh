#!/bin/bash
# What a users file costs per request: in turn, twice, a fresh one-shard release server pinned to
# CPU 0 without and with `--users` (one user granted `all` on `*`), and `ferrite bench` native gets
# at 1 and 64 connections (one request each in flight) on CPU 1. Prints one line per point.
# Build first: cargo build --release -p ferrite-server -p ferrite-cli. See docs/benchmarks.md.
set -euo pipefail
bin="$(cd "$(dirname "$0")/.." && pwd)/target/release"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export FERRITE_PASSWORD='a benchmark password'
printf '%s\n' "$FERRITE_PASSWORD" | "$bin/ferrite" user add bench --file "$work/users.toml" >/dev/null
"$bin/ferrite" user grant bench '*' all --file "$work/users.toml" >/dev/null

run() { # label, server arguments, client arguments
  rm -rf "$work/data"
  taskset -c 0 "$bin/ferrite-server" --listen 127.0.0.1:0 --data-dir "$work/data" $2 >"$work/out" 2>"$work/err" &
  local pid=$!
  for _ in $(seq 100); do grep -q "native" "$work/out" && break; sleep 0.1; done
  local addr
  addr=$(grep -o "native [^ ]*" "$work/out" | head -1 | cut -d' ' -f2)
  for clients in 1 64; do
    taskset -c 1 "$bin/ferrite" --addr "$addr" $3 bench --workload get --clients "$clients" --outstanding 1 \
      --duration 5 --json 2>/dev/null | python3 -c "
import json, sys
d = json.load(sys.stdin)
print('$1', 'clients=$clients', round(d['ops_per_s']), 'gets/s, p50', d['by_op']['get']['latency_us']['p50'], 'us')"
  done
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

for _ in 1 2; do
  run "without users" "" ""
  run "with users" "--users $work/users.toml" "--user bench"
done
