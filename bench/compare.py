#!/usr/bin/env python3
"""Ferrite against Redis and memcached: every scenario of docs/benchmarks.md, one command.

Run through `bench/compare`, which installs the Debian packages and the Python environment this
needs. This program builds the binaries, starts each server on free loopback ports (pinned to CPU 0
when the machine has two CPUs, the load generators on CPU 1), runs the scenarios, stops every server
by its own process id, and writes <out>/<date>.json (everything, raw figures included),
<out>/<date>.md (the tables) and <out>/<date>-*.png (the plots, drawn by bench/plots.py).

Scenarios:
  small-ops  put/get of small values at 1, 16 and 128 outstanding: Ferrite native (ferrite bench),
             Ferrite RESP and Redis without persistence, with AOF everysec and with AOF always
             (redis-benchmark), memcached (ferrite bench --target memcache), and the limit rows
  ycsb       YCSB A-F, uniform and zipfian, all through `ferrite bench` (native and --target resp)
  values     put/get from 16 B to 64 KiB: Ferrite native, Redis, memcached, limit
  shards     throughput against shard count (MCAS figure 12), with the limit at each count
  durability sync puts (8-byte keys, 16-byte values, one shard) at 1, 8, 64 and 256 outstanding:
             Ferrite sync and async against Redis with appendfsync always and without persistence,
             all through `ferrite bench` (--target resp for Redis); then SET only from
             redis-benchmark at 1, 8, 64 and 256 connections, pipeline 1 and 16: Ferrite RESP
             (sync) against the same two Redis, with Ferrite's puts per fdatasync
  poll       polling after a batch: GET and SET from redis-benchmark (16-byte values, pipeline 1) at 1,
             8, 64 and 256 connections against Ferrite RESP with polling on (the default) and off
             (`poll_us = 0`), Redis without persistence and, for SET, Redis with appendfsync always,
             in turn at each point; the Ferrite servers' CPU time during each run, and every
             server's CPU time over 1 s of idleness after the points
  restart    load 1 and 10 million keys, then: DRAM bytes per key, log bytes per put, and the time
             a restart after kill -9 takes until the server is ready
  ado        Active Data Objects on one shard at 1, 16 and 128 requests in flight on one connection
             and over 16 and 128 connections with one each: `ferrite bench --workload invoke --plugin
             passthru` against `--workload get`, and counter increments (`add 1`) against puts, both
             sync; needs the ferrite-ado host and the shipped plugins beside ferrite-server
  metrics    what the Prometheus endpoint costs: GET and SET from redis-benchmark at 64 connections,
             pipeline 1 and 16, against Ferrite RESP scraped every second and against the same
             server without the endpoint, in turn at each point
  memory     bytes per key at 1, 4 and 10 million keys, each system fresh per count: Ferrite's
             RESP default pool and Redis (no persistence) loaded with the same pipelined MSETs of
             16-byte keys and 16-byte values; a native pool sized for the keys (8-byte keys,
             16-byte values, loaded by `ferrite bench`) against Redis with the same keys. Resident
             memory before and after, the peak during the load, INFO memory for Redis, and
             Ferrite's shard statistics and pool listing after the load
  large-values
             put and get throughput (GiB/s) of 4 KiB, 64 KiB, 1 MiB, 64 MiB and 1 GiB values on one
             shard, one connection with one request in flight (and 4 connections up to 64 KiB): Ferrite
             inline (up to 2 MiB) and direct (`ferrite bench --transfer`), each with async and sync
             durability, against the echo inline and direct and Redis without persistence (through
             `ferrite bench --target resp`, up to 64 MiB); the log's write amplification (`wal_bytes` and
             the server's disk writes per value byte stored, checkpoints) of every put run; the
             inline/direct crossover at 64 KiB to 2 MiB with 1 and 8 requests in flight; and, once, the
             latency of 16-byte gets beside a loop of 1 GiB direct puts, then gets, on the same shard
             (and beside the same loops against the echo, as a control). The 1 GiB points are measured
             in the first repetition only; --skip-1gib leaves them out (about 13 minutes with them)
  cluster    a three-node cluster (`ferrite cluster local --nodes 3`, one shard per node, so one
             Raft group; sync writes, the default) against a single server and Redis with appendfsync
             always: SET only from redis-benchmark (16-byte values, random keys) at 64 connections
             with pipeline 1 and 16 and at 1 connection, against group 0's leader (redis-benchmark
             --cluster refuses a cluster of one master), the three systems in turn at each point. Each
             point keeps what bounds it: the CPU seconds of every server process, the disk's flushes
             (/proc/diskstats) and each Ferrite node's log commits (fdatasyncs). Then, in the first
             repetition, on a fresh cluster, 50 failovers (3 with --quick) under a light write load:
             kill -9 of the leader, the time until the survivors agree on a new leader (cluster
             status polled every 15 ms) and until a SET sent after the kill is acknowledged; the node
             is started again from its command line and caught up before the next round. Every
             server is started and stopped (by its pid) in each repetition, its data deleted
The limit rows come from `ferrite-echo`, which answers without storing anything: what the protocol
and the loopback transport allow at the same concurrency, with the same tool.
"""

import argparse
import datetime
import json
import mmap
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import report  # noqa: E402  (bench/report.py, beside this file)

# What each scenario runs, full and quick. Seconds are per measured point; every point is measured
# `repeat` times (the repetitions of the whole scenario follow one another, so a burst of
# interference from outside lands on one repetition of many points, not on every repetition of
# one) and the report keeps the best.
REPEAT_FULL = 2
REPEAT_QUICK = 1
FULL = {
    "small-ops": {"seconds": 2.5, "outstanding": [1, 16, 128], "keys": 100_000, "key_size": 16, "value_size": 16},
    "ycsb": {
        "seconds": 2,
        "workloads": ["a", "b", "c", "d", "e", "f"],
        "distributions": ["uniform", "zipfian"],
        "resp_workloads": ["a", "b", "c", "d", "f"],
        "keys": 100_000,
        "key_size": 16,
        "value_size": 1000,
        "clients": 4,
        "outstanding": 8,
    },
    "values": {
        "seconds": 1.5,
        "sizes": [16, 64, 256, 1024, 4096, 16384, 65536],
        "outstanding": 16,
        "key_size": 16,
        "data_bytes": 64 << 20,
        "keys_max": 100_000,
        "keys_min": 1000,
    },
    "shards": {
        "seconds": 2.5,
        "shards": [1, 2],
        "ops": ["put", "get"],
        "pools": 4,
        "clients": 2,
        "outstanding": 32,
        "keys": 100_000,
        "key_size": 16,
        "value_size": 16,
    },
}
FULL["durability"] = {"seconds": 3, "outstanding": [1, 8, 64, 256], "clients_max": 8, "keys": 100_000,
                      "key_size": 8, "value_size": 16, "connections": [1, 8, 64, 256], "pipelines": [1, 16]}
# Polling after a batch: redis-benchmark GET and SET at pipeline 1 over `connections`, Ferrite RESP
# with `[[shards]] poll_us` at its default and at 0, Redis without persistence (and with appendfsync
# always, for SET) in turn at each point. After a repetition's points, every server's CPU time over
# `idle_s` seconds of idleness, `idle_settle_s` after the last request (past any polling window).
FULL["poll"] = {"seconds": 3, "keys": 100_000, "value_size": 16, "connections": [1, 8, 64, 256],
                "idle_settle_s": 0.3, "idle_s": 1.0}
# Active Data Objects: at each point, `in_flight` requests on one connection or `connections`
# connections with one request each, a get run and a passthru invocation run, then counter
# increments and puts, both sync. Every run uses 8-byte values (a counter's), so the four differ
# only in what the shard does with a request.
FULL["ado"] = {"seconds": 3, "in_flight": [1, 16, 128], "connections": [16, 128], "keys": 100_000, "key_size": 8,
               "value_size": 8}
FULL["restart"] = {"keys": [1_000_000, 10_000_000], "key_size": 8, "value_size": 16}
# What the metrics endpoint costs: redis-benchmark GET and SET over `connections` at each of
# `pipelines`, against two Ferrite RESP servers of the default configuration, one also serving
# metrics and scraped every `scrape_s` seconds while it is measured, one without the endpoint, in
# turn at each point.
FULL["metrics"] = {"seconds": 3, "keys": 100_000, "value_size": 16, "connections": [64], "pipelines": [1, 16],
                   "scrape_s": 1.0}
# Memory per key. Measured once (`repeat`): a byte count does not improve with another try, and
# every point loads millions of keys into a fresh server. The RESP path loads `resp_key_size`-byte
# keys (redis-benchmark's `key:` and 12 digits) by pipelined MSETs of `batch` pairs with
# `in_flight` of them outstanding; the native path `native_key_size`-byte keys into a pool sized
# for exactly the keys, and Redis the same keys through the same loader.
FULL["memory"] = {"keys": [1_000_000, 4_000_000, 10_000_000], "resp_key_size": 16, "native_key_size": 8,
                  "value_size": 16, "batch": 1000, "in_flight": 8, "settle_s": 1.0, "repeat": 1}
# Large values: put and get throughput (value bytes per second) at each of `sizes`, one connection
# with one request in flight (and `many_clients` connections with one each up to
# `many_clients_size_max`): Ferrite inline (up to `inline_max`) and direct, each with async and
# sync durability, the echo inline and direct, Redis (no persistence, through `ferrite bench
# --target resp`) up to `redis_max`. Then the inline/direct crossover at `crossover_sizes` with
# `crossover_outstanding` requests in flight on one connection, async, Ferrite and the echo. Runs
# last `seconds` (`seconds_large` from `large_from` bytes); at `once_from` bytes and up a run is
# `once_ops` operations and the point is measured in the first repetition only (and skipped with
# --skip-1gib). Each store holds `data_bytes` of values (between 1 and `keys_max` keys). Every
# size gets a fresh Ferrite server (every point, from `large_from`), whose data directory is
# deleted after it. Last, once: the small-get probe, `probe_seconds` of 16-byte gets on one
# connection, one at a time, on an idle one-shard server and while a loop of `probe_loop_size`
# direct puts, then gets (async), runs on another connection of the same shard; and, as a control,
# while the same loops run against the echo instead.
# First of all, in the first repetition, durable large puts against the disk: the disk's own
# sequential durable write bandwidth (`disk_probe_bytes` written to a new file on the work
# directory's file system with O_DIRECT and one fdatasync, best of `disk_probe_runs`; then the
# same bytes over the same file with an fdatasync after each value of every size measured below:
# the most one-at-a-time durable puts of that size can get from the disk), then at
# each of `durable_sizes` a fresh one-shard server taking `durable_bytes` of sync direct puts over
# `data_bytes` of keys twice, fresh and once it has run a while (checkpoints taken, the log's held
# segments recycled), each with the bytes the server wrote to the disk per value byte; then sync
# SETs through RESP at `resp_sizes` for `resp_seconds`, Ferrite against Redis appendfsync always
# (past Ferrite's 2 MiB inline limit its SETs stream the value into the pool as it arrives).
FULL["large-values"] = {
    "sizes": [4 << 10, 64 << 10, 1 << 20, 64 << 20, 1 << 30],
    "crossover_sizes": [64 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20],
    "crossover_outstanding": [1, 8],
    "many_clients": 4, "many_clients_size_max": 64 << 10,
    "inline_max": 2 << 20, "redis_max": 64 << 20,
    "seconds": 1.5, "seconds_large": 3, "large_from": 16 << 20, "once_from": 1 << 30, "once_ops": 3,
    "data_bytes": 256 << 20, "keys_max": 65536, "key_size": 16,
    "probe_seconds": 5, "probe_keys": 1000, "probe_value_size": 16, "probe_loop_size": 1 << 30,
    "disk_probe_bytes": 1 << 30, "disk_probe_runs": 2, "durable_sizes": [1 << 20, 64 << 20, 1 << 30],
    "durable_bytes": 4 << 30, "resp_sizes": [1 << 20, 2 << 20, 4 << 20, 16 << 20, 64 << 20], "resp_seconds": 3,
}
# Cluster: redis-benchmark SETs (`value_size`-byte values, random keys over `keys`) at each
# (connections, pipeline) of `points` against a `nodes`-node cluster of one shard per node (its
# leader's RESP port), a single server and Redis AOF always, in turn at each point; then, in the
# first repetition only, `failovers` kill -9s of the leader under a SET every `write_interval_s`,
# cluster status polled every `poll_s`, each wait bounded by `failover_timeout_s` (election, write
# accepted) or `resync_timeout_s` (the killed node started again until at most `max_lag` entries
# behind).
FULL["cluster"] = {"seconds": 3, "keys": 100_000, "value_size": 16, "points": [[64, 1], [64, 16], [1, 1]], "nodes": 3,
                   "failovers": 50, "write_interval_s": 0.01, "poll_s": 0.015, "failover_timeout_s": 10,
                   "resync_timeout_s": 60, "max_lag": 16}
QUICK = {
    "small-ops": dict(FULL["small-ops"], seconds=0.5, outstanding=[1, 16], keys=10_000),
    "ycsb": dict(
        FULL["ycsb"],
        seconds=0.5,
        workloads=["a", "d", "e"],
        distributions=["zipfian"],
        resp_workloads=["a"],
        keys=10_000,
        clients=2,
        outstanding=4,
    ),
    "values": dict(FULL["values"], seconds=0.5, sizes=[16, 4096], data_bytes=8 << 20, keys_max=10_000),
    "shards": dict(FULL["shards"], seconds=0.5, ops=["put"], keys=10_000),
    "durability": dict(FULL["durability"], seconds=0.5, outstanding=[1, 64], keys=10_000, connections=[1, 64],
                       pipelines=[1]),
    "poll": dict(FULL["poll"], seconds=0.5, keys=10_000, connections=[1, 64]),
    "restart": dict(FULL["restart"], keys=[20_000]),
    "memory": dict(FULL["memory"], keys=[20_000]),
    "ado": dict(FULL["ado"], seconds=0.5, in_flight=[1, 16], connections=[16], keys=5_000),
    "metrics": dict(FULL["metrics"], seconds=0.5, keys=10_000, pipelines=[1], scrape_s=0.2),
    # A debug cluster commits a few hundred SETs per second: fewer requests than elsewhere (50 per
    # connection and batch, at most 2,000).
    "cluster": dict(FULL["cluster"], seconds=0.5, keys=10_000, failovers=3, quick_requests_per_batch=50,
                    quick_requests_max=2_000),
    "large-values": dict(FULL["large-values"], sizes=[4 << 10, 3 << 20], crossover_sizes=[1 << 20],
                         crossover_outstanding=[8], many_clients_size_max=0, seconds=0.5, seconds_large=0.5,
                         large_from=4 << 20, once_from=1 << 30, data_bytes=16 << 20, probe_seconds=0.5,
                         probe_loop_size=8 << 20, disk_probe_bytes=64 << 20, durable_sizes=[1 << 20, 4 << 20],
                         durable_bytes=32 << 20, resp_sizes=[1 << 20, 4 << 20], resp_seconds=0.5),
}
SCENARIOS = list(FULL)

# Redis configurations: name -> extra redis-server arguments. Automatic AOF rewrites are off so a
# background rewrite (a fork and a full copy) does not land in the middle of some points and not
# others; the AOF still grows and is written and fsynced as configured.
REDIS_CONFIGS = {
    "redis": ["--appendonly", "no"],
    "redis-everysec": ["--appendonly", "yes", "--appendfsync", "everysec", "--auto-aof-rewrite-percentage", "0"],
    "redis-always": ["--appendonly", "yes", "--appendfsync", "always", "--auto-aof-rewrite-percentage", "0"],
}

STARTUP_TIMEOUT_S = 30
STOP_TIMEOUT_S = 10


class Failure(Exception):
    """A point or a server that did not work; recorded, and the run goes on."""


def log(message):
    print(f"compare: {message}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def display(argv):
    """A command as it would be typed from the repository root."""
    return shlex.join(os.path.relpath(a, ROOT) if os.path.isabs(a) and a.startswith(ROOT) else a for a in argv)


class Run:
    """One comparison run: its processes, its commands and its results."""

    def __init__(self, args, work):
        self.args = args
        self.quick = args.quick
        self.settings = QUICK if args.quick else FULL
        self.work = work
        self.commands = []
        self.processes = []  # (name, Popen)
        self.samples = {}  # point key -> [row of each repetition]
        self.repetition = 0
        self.repeat = args.repeat or (REPEAT_QUICK if args.quick else REPEAT_FULL)
        self.rates = {}  # redis-benchmark point -> measured rate, so only the first repetition calibrates
        self.preloaded = set()
        self.failures = []
        self.skipped = []
        self.loads = []
        profile = "debug" if args.debug else "release"
        target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
        self.bin = {name: os.path.join(target, profile, name) for name in ("ferrite-server", "ferrite", "ferrite-echo")}
        self.profile = profile
        pin = args.pin
        if pin == "auto":
            pin = "on" if (os.cpu_count() or 1) >= 2 and shutil.which("taskset") else "off"
        self.pinned = pin == "on"
        self.server_wrap = ["taskset", "-c", "0"] if self.pinned else []
        self.client_wrap = ["taskset", "-c", "1"] if self.pinned else []
        # One runtime thread for the load generator: with one CPU of its own, a second thread would
        # only take turns with the first (and redis-benchmark is single-threaded too).
        self.ferrite_client_wrap = ["env", "TOKIO_WORKER_THREADS=1", *self.client_wrap] if self.pinned else []
        self.resp_available = None

    # --- processes ---------------------------------------------------------------------------

    def start(self, name, argv, ready, cwd=None, timeout=STARTUP_TIMEOUT_S):
        """Starts a server with stdout and stderr in a log, and waits until `ready(log_text)` is
        true (or the process dies, or `timeout` seconds pass)."""
        log_path = os.path.join(self.work, f"{name}.log")
        self.commands.append(display(argv) + " &")
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd or self.work)
        self.processes.append((name, proc))
        deadline = time.monotonic() + timeout
        while True:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            result = ready(text)
            if result:
                return proc, result
            if proc.poll() is not None:
                raise Failure(f"{name} exited with status {proc.returncode} before it was ready:\n{text[-2000:]}")
            if time.monotonic() > deadline:
                self.stop(proc)
                raise Failure(f"{name} was not ready within {timeout} s:\n{text[-2000:]}")
            time.sleep(0.05)

    def stop(self, proc):
        """Stops one process this run started, by its own id: SIGTERM, then SIGKILL."""
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.processes = [(n, p) for n, p in self.processes if p is not proc]

    def stop_all(self):
        for _, proc in list(self.processes):
            self.stop(proc)

    def run(self, argv, what, timeout, record=True):
        if record:
            self.commands.append(display(argv))
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        except subprocess.TimeoutExpired as error:
            raise Failure(f"{what}: no answer within {timeout} s") from error
        if done.returncode != 0:
            raise Failure(f"{what}: exit status {done.returncode}\n{(done.stderr or done.stdout)[-2000:]}")
        return done

    def note_load(self, label):
        with open("/proc/loadavg", encoding="utf-8") as f:
            self.loads.append({"when": label, "loadavg": [float(x) for x in f.read().split()[:3]]})

    # --- servers -----------------------------------------------------------------------------

    def start_ferrite(self, shards=1, pinned=True, resp=True, data=None, config=None, name=None):
        """ferrite-server with `shards` shards on free ports (on the data directory `data`, a
        fresh one if None; with the configuration file `config`, the embedded default if None; its
        log named `name`); returns (process, native addresses, RESP addresses)."""
        data = data or os.path.join(self.work, f"ferrite-data-{len(self.commands)}")
        argv = [*(self.server_wrap if pinned else []), self.bin["ferrite-server"]]
        if config:
            argv += ["--config", config]
        argv += ["--listen", "127.0.0.1:0", "--shards", str(shards), "--data-dir", data, "--log-level", "warn"]
        if resp and self.resp_available is not False:
            argv += ["--resp-listen", "127.0.0.1:0"]
        proc, lines = self.start(name or f"ferrite-server-{shards}", argv, announced)
        return proc, lines["native"], lines["resp"]

    def start_ferrite_with_metrics(self, name):
        """A one-shard ferrite-server with RESP and the metrics endpoint on free ports, on a fresh
        data directory; returns (process, RESP port, metrics URL)."""
        data = os.path.join(self.work, f"{name}-data")
        argv = [*self.server_wrap, self.bin["ferrite-server"], "--listen", "127.0.0.1:0", "--data-dir", data,
                "--log-level", "warn", "--resp-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"]
        proc, lines = self.start(name, argv, announced)
        if not lines["resp"] or not lines["metrics"]:
            raise Failure("ferrite-server announced no RESP listener or no metrics endpoint")
        return proc, int(lines["resp"][0].rsplit(":", 1)[1]), lines["metrics"][0]

    def start_echo(self, shards=1, pinned=True, get_value_size=0, direct_value_size=None):
        argv = [*(self.server_wrap if pinned else []), self.bin["ferrite-echo"], "--listen", "127.0.0.1:0",
                "--resp-listen", "127.0.0.1:0", "--shards", str(shards), "--get-value-size", str(get_value_size)]
        if direct_value_size is not None:
            argv += ["--direct-value-size", str(direct_value_size)]
        proc, lines = self.start(f"ferrite-echo-{shards}-{get_value_size}", argv, announced)
        return proc, lines["native"], lines["resp"]

    def start_redis(self, name):
        port = free_port()
        data = os.path.join(self.work, name)
        # Fresh every time: an AOF left by an earlier scenario would be loaded back.
        shutil.rmtree(data, ignore_errors=True)
        os.makedirs(data, exist_ok=True)
        argv = [*self.server_wrap, "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--daemonize", "no", "--dir", data, *REDIS_CONFIGS[name]]
        proc, _ = self.start(name, argv, lambda text: "Ready to accept connections" in text)
        return proc, port

    def start_memcached(self):
        port = free_port()
        # One worker thread, like one Ferrite shard and Redis's one event loop; 4 GiB of cache so
        # nothing is evicted; -U 0: no UDP.
        argv = [*self.server_wrap, "memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "1", "-m", "4096"]
        if os.geteuid() == 0:
            argv += ["-u", "nobody"]  # memcached refuses to run as root otherwise

        def ready(_text):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return True
            except OSError:
                return False

        proc, _ = self.start("memcached", argv, ready)
        return proc, port

    # --- load generators ---------------------------------------------------------------------

    def ferrite_bench(self, addr, workload, seconds, keys, key_size, value_size, clients=1, outstanding=1,
                      target="native", distribution=None, pool=None, keep_pool=False, pools=1, pinned=True,
                      durability=None, ops=None, plugin=None, transfer=None, extra=()):
        argv = [*(self.ferrite_client_wrap if pinned else []), self.bin["ferrite"], "--addr", addr, "--json", "bench",
                "--workload", workload, "--target", target, "--key-size", str(key_size),
                "--value-size", str(value_size), "--keys", str(keys), "--clients", str(clients),
                "--outstanding", str(outstanding)]
        argv += ["--ops", str(ops)] if ops else ["--duration", str(seconds)]
        if durability:
            argv += ["--durability", durability]
        if transfer:
            argv += ["--transfer", transfer]
        argv += list(extra)
        if plugin:
            argv += ["--plugin", plugin]
        if distribution:
            argv += ["--distribution", distribution]
        if pool:
            argv += ["--pool", pool]
        if keep_pool:
            argv += ["--keep-pool"]
        if pools > 1:
            argv += ["--pools", str(pools)]
        done = self.run(argv, f"ferrite bench {workload} against {addr}", timeout=seconds + 300)
        try:
            result = json.loads(done.stdout)
        except json.JSONDecodeError as error:
            raise Failure(f"ferrite bench printed no JSON: {done.stdout[-500:]}") from error
        result["command"] = display(argv)
        return result

    def redis_benchmark(self, port, pipeline, value_size, keys, seconds, clients=1, tests="set,get", counters=None,
                        quick_requests=None):
        """redis-benchmark's `tests` (SET and GET unless told otherwise); returns one point per
        test, {"SET": point, "GET": point} by default. With `counters` (a function returning the
        server's counters), each point also holds under "counters" how much each counter grew
        during the measured run: read just before and just after it, so the calibration run is not
        counted. `quick_requests` replaces the quick run's request count, for a server too slow in
        a debug build for the usual one (a debug cluster)."""
        base = [*self.client_wrap, "redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients),
                "-P", str(pipeline), "-t", tests, "-d", str(value_size), "-r", str(keys)]
        key = (port, pipeline, value_size, keys, clients, tests)
        if self.quick:
            # More requests with more connections: 2,000 spread over 64 connections are done in a
            # few milliseconds, near redis-benchmark's clock resolution, and every system would
            # come out with the same figure.
            requests = quick_requests or min(50_000, 2_000 * pipeline * clients)
        else:
            # redis-benchmark takes a request count, not a duration: measure the rate briefly (or
            # take the rate of the previous repetition), then ask for rate x seconds.
            if key not in self.rates:
                calibration = min(500_000, 5_000 * pipeline)
                probe = parse_redis_benchmark(self.run([*base, "-n", str(calibration)],
                                                       "redis-benchmark calibration", timeout=300).stdout)
                self.rates[key] = sum(p["ops_per_s"] for p in probe.values()) / max(1, len(probe))
            requests = max(1_000, int(self.rates[key] * seconds))
        argv = [*base, "-n", str(requests)]
        before = counters() if counters else None
        points = parse_redis_benchmark(self.run(argv, f"redis-benchmark against port {port}",
                                                timeout=seconds * 10 + 300).stdout)
        grown = None
        if counters:
            after = counters()
            grown = {name: value - before.get(name, 0) for name, value in after.items()}
        self.rates[key] = sum(p["ops_per_s"] for p in points.values()) / max(1, len(points))
        for point in points.values():
            point["command"] = display(argv)
            if grown is not None:
                point["counters"] = grown
        return points

    # --- results -----------------------------------------------------------------------------

    def add(self, scenario, system, tool, point, **labels):
        """Records one repetition of a point, with the load the machine had when it ran."""
        with open("/proc/loadavg", encoding="utf-8") as f:
            load = float(f.read().split()[0])
        row = {"scenario": scenario, "system": system, "tool": tool, **labels, **point, "loadavg_1m": load}
        key = (scenario, system, tool, tuple(sorted(labels.items())))
        self.samples.setdefault(key, []).append(row)
        if point.get("errors"):
            self.failures.append(f"{scenario} {system} {labels}: {point['errors']} operations failed "
                                 f"({point.get('first_error')})")
        return row

    @property
    def rows(self):
        """One row per point: the repetition with the highest throughput, with every repetition's
        throughput and load beside it. Interference from other work on the machine only ever
        lowers a figure, so the best repetition is the closest to what the system does alone."""
        rows = []
        for samples in self.samples.values():
            best = dict(max(samples, key=lambda row: row["ops_per_s"]))
            best["runs_ops_per_s"] = [row["ops_per_s"] for row in samples]
            best["runs_loadavg_1m"] = [row["loadavg_1m"] for row in samples]
            rows.append(best)
        return rows

    def attempt(self, what, action):
        """Runs one point; a failure is recorded and the run goes on."""
        log(what)
        try:
            return action()
        except Failure as error:
            self.failures.append(f"{what}: {error}")
            log(f"FAILED: {what}: {error}")
            return None


def announced(text):
    """The `shard N: native|resp ADDRESS` lines of ferrite-server and ferrite-echo, and the
    `metrics: URL` line, once `ready.`."""
    if "\nready." not in "\n" + text:
        return None
    lines = {"native": [], "resp": [], "metrics": re.findall(r"^metrics: (\S+)$", text, re.M)}
    for match in re.finditer(r"^shard (\d+): (native|resp) (\S+)$", text, re.M):
        lines[match.group(2)].append(match.group(3))
    return lines


def ferrite_point(result, op=None):
    """A measured point from a `ferrite bench --json` report: the whole run, or one kind of
    operation of it."""
    source = result["by_op"][op] if op else result
    latency = source.get("latency_us") or {}
    return {
        "ops": source["ops"],
        "errors": source["errors"],
        "ops_per_s": source["ops_per_s"],
        # Value bytes moved per second (absent from reports of builds before large values).
        "bytes_per_s": source.get("bytes_per_s"),
        "p50_us": latency.get("p50"),
        "p90_us": latency.get("p90"),
        "p99_us": latency.get("p99"),
        "p99_9_us": latency.get("p99_9"),
        "max_us": latency.get("max"),
        # [latency us, percentile] pairs, for the CDF plots.
        "cdf": [[step["us"], step["p"]] for step in latency.get("percentiles", [])],
        "first_error": result.get("first_error"),
        "command": result.get("command"),
    }


def parse_redis_benchmark(output):
    """redis-benchmark's report (without --csv, which drops the latency distribution): for each
    test, throughput, the latency summary and the cumulative distribution."""
    points = {}
    sections = re.split(r"^====== (\S+) ======$", output.replace("\r", "\n"), flags=re.M)
    for name, body in zip(sections[1::2], sections[2::2]):
        completed = re.search(r"(\d+) requests completed in ([\d.]+) seconds", body)
        throughput = re.search(r"throughput summary: ([\d.]+) requests per second", body)
        summary = re.search(r"avg\s+min\s+p50\s+p95\s+p99\s+max\s*\n\s*([\d.\s]+)", body)
        if not (completed and throughput and summary):
            raise Failure(f"cannot read redis-benchmark's {name} report:\n{body[-1500:]}")
        total = int(completed.group(1))
        avg, low, p50, p95, p99, high = (float(x) * 1000.0 for x in summary.group(1).split()[:6])
        cdf = []
        distribution = body.split("Latency by percentile distribution:", 1)[-1].split("Cumulative distribution", 1)[0]
        for match in re.finditer(r"<= ([\d.]+) milliseconds \(cumulative count (\d+)\)", distribution):
            cdf.append([round(float(match.group(1)) * 1000.0, 1), round(100.0 * int(match.group(2)) / total, 4)])
        errors = len(re.findall(r"^Error from server", body, re.M))
        points[name] = {
            "ops": total,
            "errors": errors,
            "ops_per_s": float(throughput.group(1)),
            "mean_us": round(avg, 1),
            "min_us": round(low, 1),
            "p50_us": round(p50, 1),
            "p95_us": round(p95, 1),
            "p99_us": round(p99, 1),
            "max_us": round(high, 1),
            "cdf": cdf,
        }
    if not points:
        raise Failure(f"redis-benchmark printed no report:\n{output[-1500:]}")
    return points


def resp_preload(port, keys, value_size, key_format="key:{:012d}"):
    """Stores keys 0..keys with redis-benchmark's names (`key:` and 12 digits) over RESP, many per
    write, so a GET run finds every key it asks for."""
    value = b"x" * value_size
    batch = max(1, min(1000, (4 << 20) // max(1, value_size)))
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        replies = sock.makefile("rb")
        for start in range(0, keys, batch):
            end = min(keys, start + batch)
            chunk = bytearray()
            for number in range(start, end):
                key = key_format.format(number).encode()
                chunk += b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(value), value)
            sock.sendall(chunk)
            for _ in range(start, end):
                reply = replies.readline()
                if reply != b"+OK\r\n":
                    raise Failure(f"preloading port {port}: SET answered {reply!r}")


def resp_answers(port):
    """Whether a RESP server on `port` stores and returns a value (SET then GET)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"*3\r\n$3\r\nSET\r\n$13\r\ncompare:probe\r\n$2\r\nok\r\n*2\r\n$3\r\nGET\r\n$13\r\ncompare:probe\r\n")
            reader = sock.makefile("rb")
            return reader.readline() == b"+OK\r\n" and reader.readline() == b"$2\r\n" and reader.readline() == b"ok\r\n"
    except OSError:
        return False


# --- scenarios --------------------------------------------------------------------------------

def small_ops(run, servers):
    """Put and get of small values at increasing outstanding requests, one connection."""
    s = run.settings["small-ops"]
    seconds, keys, key_size, value_size = s["seconds"], s["keys"], s["key_size"], s["value_size"]
    redis_benchmark_targets = [(name, port) for name, port in servers["redis"].items()]
    if servers.get("ferrite_resp_port"):
        redis_benchmark_targets.insert(0, ("ferrite-resp", servers["ferrite_resp_port"]))
    redis_benchmark_targets.append(("limit-resp", servers["echo_resp_port"]))
    # Every RESP store holds every key redis-benchmark may ask for, so every GET hits.
    for name, port in redis_benchmark_targets:
        if name != "limit-resp" and ("small-ops", name) not in run.preloaded:
            run.commands.append(f"# python: SET key:000000000000 .. key:{keys - 1:012d} ({value_size} B) over RESP "
                                f"to port {port}")
            run.attempt(f"small-ops: preloading {name}", lambda port=port: resp_preload(port, keys, value_size))
            run.preloaded.add(("small-ops", name))
    for outstanding in s["outstanding"]:
        common = dict(seconds=seconds, keys=keys, key_size=key_size, value_size=value_size, outstanding=outstanding)
        for system, addr, target in [("ferrite", servers["ferrite"], "native"),
                                     ("memcached", servers["memcached"], "memcache"),
                                     ("limit", servers["echo"], "native")]:
            # get first (it stores every key), then put over the same keys, so every put replaces.
            def measure(system=system, addr=addr, target=target):
                got = run.ferrite_bench(addr, "get", target=target, pool="small-ops", keep_pool=True, **common)
                run.add("small-ops", system, "ferrite bench", ferrite_point(got), op="get", outstanding=outstanding)
                put = run.ferrite_bench(addr, "put", target=target, pool="small-ops", **common)
                run.add("small-ops", system, "ferrite bench", ferrite_point(put), op="put", outstanding=outstanding)
                if target == "native":
                    run.run([run.bin["ferrite"], "--addr", addr, "pool", "delete", "small-ops"], "deleting the pool",
                            timeout=60)
            run.attempt(f"small-ops: {system}, {outstanding} outstanding", measure)
        for system, port in redis_benchmark_targets:
            def measure(system=system, port=port):
                points = run.redis_benchmark(port, outstanding, value_size, keys, seconds)
                for test, op in [("SET", "put"), ("GET", "get")]:
                    run.add("small-ops", system, "redis-benchmark", points[test], op=op, outstanding=outstanding)
            run.attempt(f"small-ops: {system} (redis-benchmark), {outstanding} outstanding", measure)


def ycsb(run, servers):
    """YCSB A-F through `ferrite bench`, the same tool and parameters for every target. Each
    workload runs against every target before the next workload starts."""
    s = run.settings["ycsb"]
    targets = [("ferrite", servers["ferrite"], "native", s["workloads"])]
    if servers.get("ferrite_resp"):
        targets.append(("ferrite-resp", servers["ferrite_resp"], "resp", s["resp_workloads"]))
    for name in ("redis", "redis-always"):
        if name in servers["redis"]:
            targets.append((name, f"127.0.0.1:{servers['redis'][name]}", "resp", s["resp_workloads"]))
    # The limit: the echo answers without looking at keys, so it runs once per workload (with the
    # first distribution) and stands for both.
    limits = [("limit", servers["echo"], "native", s["workloads"]),
              ("limit-resp", servers["echo_resp"], "resp", s["resp_workloads"])]
    for distribution in s["distributions"]:
        for letter in s["workloads"]:
            here = targets + (limits if distribution == s["distributions"][0] else [])
            for system, addr, target, workloads in here:
                if letter not in workloads:
                    continue
                is_limit = system.startswith("limit")

                def measure(system=system, addr=addr, target=target, letter=letter, is_limit=is_limit):
                    result = run.ferrite_bench(
                        addr, f"ycsb-{letter}", s["seconds"], s["keys"], s["key_size"], s["value_size"],
                        clients=s["clients"], outstanding=s["outstanding"], target=target,
                        distribution=None if is_limit else distribution, pool=f"ycsb-{letter}")
                    point = ferrite_point(result)
                    point["by_op"] = {op: ferrite_point(result, op) for op in result["by_op"]}
                    for labelled in (s["distributions"] if is_limit else [distribution]):
                        run.add("ycsb", system, "ferrite bench", point, workload=letter.upper(), distribution=labelled)
                run.attempt(f"ycsb: {system}, {letter.upper()}{'' if is_limit else ', ' + distribution}", measure)


def values(run, servers):
    """Put and get from 16 B to 64 KiB values at a fixed concurrency."""
    s = run.settings["values"]
    redis_port = servers["redis"].get("redis")
    for size in s["sizes"]:
        keys = max(s["keys_min"], min(s["keys_max"], s["data_bytes"] // size))
        common = dict(seconds=s["seconds"], keys=keys, key_size=s["key_size"], value_size=size,
                      outstanding=s["outstanding"])
        echo = None
        try:
            echo = run.start_echo(get_value_size=size)
        except Failure as error:
            run.failures.append(f"values: starting the echo for {size} B: {error}")
        targets = [("ferrite", servers["ferrite"], "native"), ("memcached", servers["memcached"], "memcache")]
        if echo:
            targets.append(("limit", echo[1][0], "native"))
        for system, addr, target in targets:
            def measure(system=system, addr=addr, target=target):
                got = run.ferrite_bench(addr, "get", target=target, pool="values", keep_pool=True, **common)
                run.add("values", system, "ferrite bench", ferrite_point(got), op="get", value_size=size)
                put = run.ferrite_bench(addr, "put", target=target, pool="values", **common)
                run.add("values", system, "ferrite bench", ferrite_point(put), op="put", value_size=size)
                if target == "native":
                    run.run([run.bin["ferrite"], "--addr", addr, "pool", "delete", "values"], "deleting the pool",
                            timeout=60)
            run.attempt(f"values: {system}, {size} B", measure)
        if echo:
            run.stop(echo[0])
        if redis_port:
            def measure(size=size, keys=keys):
                run.commands.append(f"# python: SET key:000000000000 .. key:{keys - 1:012d} ({size} B) over RESP "
                                    f"to port {redis_port}")
                resp_preload(redis_port, keys, size)
                points = run.redis_benchmark(redis_port, s["outstanding"], size, keys, s["seconds"])
                for test, op in [("SET", "put"), ("GET", "get")]:
                    run.add("values", "redis", "redis-benchmark", points[test], op=op, value_size=size)
            run.attempt(f"values: redis (redis-benchmark), {size} B", measure)


def shards(run):
    """Throughput against shard count, with the keys spread over pools on every shard."""
    s = run.settings["shards"]
    for count in s["shards"]:
        for system, start in [("ferrite", lambda c=count: run.start_ferrite(shards=c, pinned=False, resp=False)),
                              ("limit", lambda c=count: run.start_echo(shards=c, pinned=False))]:
            try:
                proc, native, _ = start()
            except Failure as error:
                run.failures.append(f"shards: starting {system} with {count} shard(s): {error}")
                continue
            for op in s["ops"]:
                def measure(system=system, native=native, op=op):
                    # Unpinned: the server's shards need the CPUs; the load generator shares them.
                    result = run.ferrite_bench(
                        native[0], op, s["seconds"], s["keys"], s["key_size"], s["value_size"], clients=s["clients"],
                        outstanding=s["outstanding"], pools=s["pools"], pool="shards", pinned=False)
                    run.add("shards", system, "ferrite bench", ferrite_point(result), op=op, shards=count,
                            pools=s["pools"], clients=s["clients"], outstanding=s["outstanding"])
                run.attempt(f"shards: {system}, {count} shard(s), {op}", measure)
            run.stop(proc)


def durability(run, servers):
    """Durable puts at increasing concurrency: Ferrite sync (acknowledged after fdatasync) and
    async, Redis with appendfsync always and without persistence, all driven by `ferrite bench`
    (the same client, the same keys, the same concurrency). Then the way Redis users run: SETs from
    redis-benchmark over many connections, each with one request (or one pipelined batch) in
    flight, against Ferrite RESP (sync), Redis AOF always and Redis without persistence, with
    Ferrite's puts per fdatasync read from its own counters."""
    s = run.settings["durability"]
    targets = [("ferrite-sync", servers["ferrite"], "native", "sync"),
               ("ferrite-async", servers["ferrite"], "native", "async")]
    for name in ("redis-always", "redis"):
        if name in servers["redis"]:
            targets.append((name, f"127.0.0.1:{servers['redis'][name]}", "resp", None))
    for outstanding in s["outstanding"]:
        clients = min(outstanding, s["clients_max"])
        for system, addr, target, level in targets:
            def measure(system=system, addr=addr, target=target, level=level):
                result = run.ferrite_bench(addr, "put", s["seconds"], s["keys"], s["key_size"], s["value_size"],
                                           clients=clients, outstanding=outstanding // clients, target=target,
                                           durability=level, pool="durability")
                run.add("durability", system, "ferrite bench", ferrite_point(result), op="put",
                        outstanding=outstanding, clients=clients)
            run.attempt(f"durability: {system}, {outstanding} outstanding", measure)

    resp_targets = [(name, servers["redis"][name]) for name in ("redis-always", "redis") if name in servers["redis"]]
    if servers.get("ferrite_resp_port"):
        resp_targets.insert(0, ("ferrite-resp", servers["ferrite_resp_port"]))
        stats_argv = [run.bin["ferrite"], "--addr", servers["ferrite"], "--json", "stats"]
        run.commands.append(f"# {display(stats_argv)} just before and just after each Ferrite RESP point below: "
                            "puts per fdatasync")
    # The systems take turns at each point, so a burst of outside load hits all three alike. SET
    # only: a GET commits nothing, so it says nothing about durable writes, and the counters read
    # around a run then cover its SETs alone.
    for clients in s["connections"]:
        for pipeline in s["pipelines"]:
            for system, port in resp_targets:
                def measure(system=system, port=port, clients=clients, pipeline=pipeline):
                    counters = (lambda: ferrite_stats(run, servers["ferrite"])) if system == "ferrite-resp" else None
                    point = run.redis_benchmark(port, pipeline, s["value_size"], s["keys"], s["seconds"],
                                                clients=clients, tests="set", counters=counters)["SET"]
                    grown = point.pop("counters", None)
                    if grown is not None:
                        puts, commits = grown.get("puts", 0), grown.get("wal_commits", 0)
                        point.update(puts=puts, wal_commits=commits,
                                     puts_per_fdatasync=round(puts / max(1, commits), 1))
                    run.add("durability", system, "redis-benchmark", point, op="put", clients=clients,
                            pipeline=pipeline)
                run.attempt(f"durability: {system} (redis-benchmark), {clients} connection(s), pipeline {pipeline}",
                            measure)


# --- Active Data Objects ------------------------------------------------------------------------

# What the ado scenario needs beside ferrite-server: the host a pool's first invocation starts, and
# the shipped plugins it loads.
ADO_FILES = ["ferrite-ado", "libferrite_plugin_passthru.so", "libferrite_plugin_counter.so"]
ADO_PACKAGES = ["ferrite-ado", "ferrite-plugin-passthru", "ferrite-plugin-counter"]


def ado_points(s):
    """The (connections, requests in flight per connection) of the ado scenario: `in_flight`
    requests on one connection, then `connections` connections with one request each."""
    return [(1, n) for n in s["in_flight"]] + [(c, 1) for c in s["connections"]]


def ado_server(run):
    """The ado scenario's own one-shard server, pinned like the others (the plugin hosts it starts
    inherit its CPU), after checking that the host and the plugins are installed beside it; returns
    its native address."""
    here = os.path.dirname(run.bin["ferrite-server"])
    missing = [name for name in ADO_FILES if not os.path.exists(os.path.join(here, name))]
    if missing:
        packages = " ".join(f"-p {name}" for name in ADO_PACKAGES)
        raise Failure(f"{', '.join(missing)} missing from {display([here])}: the ado scenario needs the plugin "
                      "host and the shipped plugins beside ferrite-server (cargo build"
                      f"{'' if run.args.debug else ' --release'} {packages}, or drop --no-build)")
    _, native, _ = run.start_ferrite(resp=False, name="ferrite-server-ado", data=os.path.join(run.work, "ado-data"))
    return native[0]


def ado(run, servers):
    """Active Data Objects against plain requests on one shard, at each point: `get` then an
    invocation of `passthru` (which does nothing: the cost of an invocation), then `counter`
    increments (`add 1`, sync) then puts (sync) of the same 8-byte values. The get run keeps its
    pool, so the puts replace values as the increments do; each invocation run has a pool of its
    own with its one plugin. Each run stores its keys first and starts its plugin host before
    measuring."""
    s = run.settings["ado"]
    if "ado" not in servers:
        # Started once and kept for every repetition; None if it cannot start (recorded once).
        servers["ado"] = run.attempt("ado: starting ferrite-server with the plugins", lambda: ado_server(run))
    addr = servers["ado"]
    if not addr:
        return
    for clients, outstanding in ado_points(s):
        common = dict(seconds=s["seconds"], keys=s["keys"], key_size=s["key_size"], value_size=s["value_size"],
                      clients=clients, outstanding=outstanding)
        here = f"{clients} connection(s) x {outstanding} in flight"

        def record(result, op, plugin=None, clients=clients, outstanding=outstanding):
            point = ferrite_point(result)
            if plugin:
                point["host_start"] = (result.get("preload") or {}).get("host_start")
            labels = {"plugin": plugin} if plugin else {}
            run.add("ado", "ferrite", "ferrite bench", point, op=op, clients=clients, outstanding=outstanding,
                    **labels)

        def get(common=common):
            record(run.ferrite_bench(addr, "get", pool="ado-kv", keep_pool=True, **common), "get")

        def invoke(plugin, pool, durability=None, common=common):
            result = run.ferrite_bench(addr, "invoke", plugin=plugin, pool=pool, durability=durability, **common)
            record(result, "invoke", plugin)

        def put(common=common):
            try:
                record(run.ferrite_bench(addr, "put", pool="ado-kv", durability="sync", **common), "put")
            finally:
                run.run([run.bin["ferrite"], "--addr", addr, "pool", "delete", "ado-kv"], "deleting the pool",
                        timeout=60)

        run.attempt(f"ado: get, {here}", get)
        run.attempt(f"ado: passthru invocations, {here}", lambda: invoke("passthru", "ado-passthru"))
        run.attempt(f"ado: counter increments (sync), {here}", lambda: invoke("counter", "ado-counter", "sync"))
        run.attempt(f"ado: puts (sync), {here}", put)


# --- polling after a batch ----------------------------------------------------------------------

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")

# The systems of the poll scenario, in the order they take turns at each point; SET adds Redis
# with appendfsync always, since Ferrite's RESP SET is durable (sync) by default.
POLL_SYSTEMS = {"get": ["ferrite-poll-on", "ferrite-poll-off", "redis"],
                "set": ["ferrite-poll-on", "ferrite-poll-off", "redis", "redis-always"]}


def process_cpu_ticks(pid):
    """CPU time (user + system, every thread) a process has used, from /proc/PID/stat, in clock
    ticks (utime and stime, fields 14 and 15; the command name before them may hold spaces)."""
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def ferrite_config(run, name, changes):
    """A copy of ferrite-server's embedded default configuration (--print-default-config) with the
    `key = value` lines of `changes` replaced (every occurrence: each [[shards]] table has its
    own), written to the work directory; returns its path."""
    text = run.run([run.bin["ferrite-server"], "--print-default-config"], "ferrite-server --print-default-config",
                   timeout=60, record=False).stdout
    for key, value in changes.items():
        text, count = re.subn(rf"^{re.escape(key)} = \S+", f"{key} = {value}", text, flags=re.M)
        if not count:
            raise Failure(f"the default configuration has no `{key} = ...` line to change")
    path = os.path.join(run.work, f"{name}.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    edits = "; ".join(f"s/^{key} = [^[:space:]]+/{key} = {value}/" for key, value in changes.items())
    run.commands.append(f"{display([run.bin['ferrite-server'], '--print-default-config'])} | sed -E "
                        f"{shlex.quote(edits)} > {path}")
    return path


class Scraper:
    """Scrapes a metrics endpoint every `interval_s` seconds on a thread of its own, as Prometheus
    would, until stopped; counts the scrapes and fails the point if one fails."""

    def __init__(self, url, interval_s):
        self.url, self.interval_s = url, interval_s
        self.scrapes, self.error = 0, None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.done.wait(self.interval_s):
            try:
                with urllib.request.urlopen(self.url, timeout=10) as response:
                    response.read()
                self.scrapes += 1
            except OSError as error:
                self.error = error
                return

    def stop(self):
        self.done.set()
        self.thread.join()
        if self.error:
            raise Failure(f"scraping {self.url} failed: {self.error}")
        return self.scrapes


def metrics(run, servers):
    """What the metrics endpoint costs: redis-benchmark GET and SET against Ferrite RESP with the
    endpoint on and scraped every `scrape_s` seconds, and against the same server without it, in
    turn at each point."""
    s = run.settings["metrics"]
    if "metrics" not in servers:
        targets = {}
        for system in ("ferrite-metrics-off", "ferrite-metrics-scraped"):
            def start(system=system):
                if system == "ferrite-metrics-off":
                    proc, _, resp = run.start_ferrite(name=system, data=os.path.join(run.work, f"{system}-data"))
                    targets[system] = (proc, int(resp[0].rsplit(":", 1)[1]), None)
                else:
                    targets[system] = run.start_ferrite_with_metrics(system)
                resp_preload(targets[system][1], s["keys"], s["value_size"])
            run.attempt(f"metrics: starting and preloading {system}", start)
        servers["metrics"] = targets
    targets = servers["metrics"]
    if run.repetition == 0 and "ferrite-metrics-scraped" in targets:
        run.commands.append(f"# python: GET {targets['ferrite-metrics-scraped'][2]} every {s['scrape_s']} s during "
                            "each redis-benchmark run against ferrite-metrics-scraped")
    for clients in s["connections"]:
        for pipeline in s["pipelines"]:
            for test, op in (("get", "get"), ("set", "put")):
                for system, (_, port, url) in targets.items():
                    def measure(system=system, port=port, url=url, clients=clients, pipeline=pipeline, test=test,
                                op=op):
                        scraper = Scraper(url, s["scrape_s"]) if url else None
                        try:
                            point = run.redis_benchmark(port, pipeline, s["value_size"], s["keys"], s["seconds"],
                                                        clients=clients, tests=test)[test.upper()]
                        finally:
                            scrapes = scraper.stop() if scraper else 0
                        point["scrapes"] = scrapes
                        run.add("metrics", system, "redis-benchmark", point, op=op, clients=clients,
                                pipeline=pipeline)
                    run.attempt(f"metrics: {system}, {test.upper()}, {clients} connection(s), pipeline {pipeline}",
                                measure)


def poll_servers(run, s):
    """The poll scenario's own servers, started once and kept for every repetition (so the
    redis-benchmark rates of the first repetition serve the next): system -> (process, RESP
    port). A system that does not start is recorded as failed and left out."""
    servers = {}
    if run.resp_available is False:
        run.skipped.append("poll: this ferrite-server has no RESP listener; the Ferrite rows are skipped")
    else:
        for system, changes in (("ferrite-poll-on", None), ("ferrite-poll-off", {"poll_us": 0})):
            def start(system=system, changes=changes):
                config = ferrite_config(run, system, changes) if changes else None
                proc, _, resp = run.start_ferrite(config=config, name=system,
                                                  data=os.path.join(run.work, f"{system}-data"))
                if not resp:
                    raise Failure("ferrite-server announced no RESP listener")
                port = int(resp[0].rsplit(":", 1)[1])
                if not resp_answers(port):
                    raise Failure(f"the RESP listener at {resp[0]} did not answer SET/GET")
                resp_request(port, "DEL", "compare:probe")  # so DBSIZE counts the preloaded keys alone
                servers[system] = (proc, port)
            run.attempt(f"poll: starting {system}", start)
    for system in ("redis", "redis-always"):
        def start(system=system):
            servers[system] = run.start_redis(system)
        run.attempt(f"poll: starting {system}", start)
    return servers


def poll(run, servers):
    """Polling after a batch, at low load: redis-benchmark GET and SET at pipeline 1 over 1 to 256
    connections, Ferrite RESP with polling on (the default configuration) and off (`poll_us = 0`)
    against Redis without persistence (and, for SET, Redis AOF always), each system in turn at
    each point so that outside interference lands on all of them alike. Every server's CPU time
    (user + system, all threads) is read just before and just after each measured run (not around
    the calibration run); after the points, every server's CPU time over `idle_s` of idleness."""
    s = run.settings["poll"]
    if "poll" not in servers:
        servers["poll"] = poll_servers(run, s)
    targets = servers["poll"]
    keys, value_size = s["keys"], s["value_size"]
    # Every store holds every key redis-benchmark may ask for, so every GET hits and every SET
    # replaces a value.
    for system, (_, port) in targets.items():
        if ("poll", system) not in run.preloaded:
            run.commands.append(f"# python: SET key:000000000000 .. key:{keys - 1:012d} ({value_size} B) over RESP "
                                f"to port {port}")
            def preload(port=port):
                resp_preload(port, keys, value_size)
                stored = resp_request(port, "DBSIZE")
                if stored != keys:
                    raise Failure(f"DBSIZE is {stored} after preloading {keys} keys")
            run.attempt(f"poll: preloading {system}", preload)
            run.preloaded.add(("poll", system))
    if run.repetition == 0:
        run.commands.append("# python: utime + stime of each server from /proc/PID/stat just before and just after "
                            "each redis-benchmark run below, and over 1 s of idleness after the points")

    def cpu_and_clock(pid):
        return lambda: {"cpu_ticks": process_cpu_ticks(pid), "clock_ns": time.monotonic_ns()}

    for clients in s["connections"]:
        for test, op in (("get", "get"), ("set", "put")):
            for system in POLL_SYSTEMS[test]:
                if system not in targets:
                    continue

                def measure(system=system, clients=clients, test=test, op=op):
                    proc, port = targets[system]
                    point = run.redis_benchmark(port, 1, value_size, keys, s["seconds"], clients=clients, tests=test,
                                                counters=cpu_and_clock(proc.pid))[test.upper()]
                    grown = point.pop("counters")
                    cpu_s = grown["cpu_ticks"] / CLOCK_TICKS_PER_S
                    clock_s = grown["clock_ns"] / 1e9
                    point.update(server_cpu_s=round(cpu_s, 3), measured_s=round(clock_s, 3),
                                 server_cpu_share=round(cpu_s / max(clock_s, 1e-9), 3),
                                 server_cpu_s_per_100k=round(cpu_s * 100_000 / max(1, point["ops"]), 4),
                                 clock_ticks_per_s=CLOCK_TICKS_PER_S)
                    run.add("poll", system, "redis-benchmark", point, op=op, clients=clients, pipeline=1)
                run.attempt(f"poll: {system}, {test.upper()}, {clients} connection(s)", measure)

    def idle():
        # Past any polling window, then every server's CPU over the same idle_s.
        time.sleep(s["idle_settle_s"])
        before = {system: process_cpu_ticks(proc.pid) for system, (proc, _) in targets.items()}
        started = time.monotonic()
        time.sleep(s["idle_s"])
        after = {system: process_cpu_ticks(proc.pid) for system, (proc, _) in targets.items()}
        clock_s = time.monotonic() - started
        for system in targets:
            cpu_s = (after[system] - before[system]) / CLOCK_TICKS_PER_S
            point = {"ops": 0, "errors": 0, "ops_per_s": 0.0, "idle_cpu_s": round(cpu_s, 3),
                     "idle_s": round(clock_s, 3), "idle_settle_s": s["idle_settle_s"],
                     "clock_ticks_per_s": CLOCK_TICKS_PER_S}
            run.add("poll", system, "idle", point, op="idle", repetition=run.repetition + 1)
            log(f"poll: {system} idle: {cpu_s:.2f} s of CPU in {clock_s:.2f} s")
    if targets:
        run.attempt(f"poll: idle CPU over {s['idle_s']} s", idle)


# --- cluster ------------------------------------------------------------------------------------

# The systems of the cluster scenario, in the order they take turns at each point.
CLUSTER_SYSTEMS = ["ferrite-cluster", "ferrite-single", "redis-always"]
# A node of `ferrite cluster local`'s announcement.
CLUSTER_NODE_LINE = re.compile(r"^node (\d+): native (\S+) resp (\S+) peer (\S+) pid (\d+)$", re.M)


def disk_flushes(path):
    """The flush requests the block device holding `path` has completed and the milliseconds it
    spent on them (/proc/diskstats fields 19 and 20, Linux 5.5 and later): every fdatasync of every
    process on the machine that reached that disk, Redis's included, which no server counter
    gives. None where `path` is on no block device (an overlay, a tmpfs) or the kernel is older."""
    device = os.stat(path).st_dev
    try:
        with open("/proc/diskstats", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 20 and (int(fields[0]), int(fields[1])) == (os.major(device), os.minor(device)):
                    return {"disk_flushes": int(fields[18]), "disk_flush_ms": int(fields[19])}
    except OSError:
        pass
    return None


def alive(pid, marker):
    """Whether process `pid` still runs and is the one meant (its command line holds `marker`, so
    a recycled pid is never taken for it)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return marker.encode() in f.read()
    except OSError:
        return False


class LocalCluster:
    """A three-node (`nodes`) cluster of one shard per node on loopback, started by `ferrite cluster
    local` pinned like every server (its nodes inherit its CPU), in a data directory of its own.
    Knows each node's addresses and current pid: the ones `cluster local` started, then the ones
    this harness starts again from `DIR/node-N/command` after killing a node."""

    def __init__(self, run, name, nodes):
        self.run, self.name = run, name
        self.dir = os.path.join(run.work, f"{name}-data")
        shutil.rmtree(self.dir, ignore_errors=True)
        argv = [*run.server_wrap, run.bin["ferrite"], "cluster", "local", "--nodes", str(nodes), "--data-dir", self.dir]

        def ready(text):
            if "Ctrl-C stops every node." not in text:
                return None
            return {int(m.group(1)): {"native": m.group(2), "resp": int(m.group(3).rsplit(":", 1)[1]),
                                      "pid": int(m.group(5)), "proc": None}
                    for m in CLUSTER_NODE_LINE.finditer(text)}

        # cluster local waits up to 120 s for its nodes and 30 s for the election itself.
        try:
            self.local, self.nodes = run.start(name, argv, ready, timeout=180)
        except BaseException:
            self.kill_started(os.path.join(run.work, f"{name}.log"))
            raise
        if len(self.nodes) != nodes:
            raise Failure(f"ferrite cluster local announced {len(self.nodes)} node(s), not {nodes}")

    def kill_started(self, log_path):
        """After `cluster local` failed to start (and was stopped), kills by pid any node it had
        started that still runs, so none outlives the run."""
        try:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                pids = [int(pid) for pid in re.findall(r"^node \d+ ready \(pid (\d+)\)$", f.read(), re.M)]
        except OSError:
            return
        for pid in pids:
            if alive(pid, self.dir):
                os.kill(pid, signal.SIGKILL)

    def status(self, node_id, timeout=5):
        """`ferrite --json cluster status` asked of node `node_id` (on the load generator's CPU, so
        polling it takes nothing from the servers); None if it fails or hangs."""
        argv = [*self.run.client_wrap, self.run.bin["ferrite"], "--addr", self.nodes[node_id]["native"], "--json",
                "cluster", "status"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
            return json.loads(done.stdout) if done.returncode == 0 else None
        except (subprocess.TimeoutExpired, json.JSONDecodeError):
            return None

    def leader(self, timeout_s=30):
        """The node id of group 0's leader, as node after node reports it, within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for node_id in self.nodes:
                status = self.status(node_id)
                replicas = (status or {}).get("groups", [{}])[0].get("replicas", [])
                leaders = [r["node_id"] for r in replicas if r.get("role") == "leader"]
                if len(leaders) == 1:
                    return leaders[0]
            time.sleep(0.05)
        raise Failure(f"{self.name}: group 0 had no leader within {timeout_s} s")

    def pids(self):
        return [node["pid"] for node in self.nodes.values()]

    def kill(self, node_id):
        """kill -9 of one node by its pid; returns the monotonic time just before the signal."""
        node = self.nodes[node_id]
        if not alive(node["pid"], self.dir):
            raise Failure(f"{self.name}: node {node_id} (pid {node['pid']}) is not running")
        killed_at = time.monotonic_ns()
        os.kill(node["pid"], signal.SIGKILL)
        if node["proc"]:
            node["proc"].wait()
            self.run.processes = [(n, p) for n, p in self.run.processes if p is not node["proc"]]
        return killed_at

    def restart(self, node_id):
        """Starts a killed node again with the command line `cluster local` left in its directory,
        pinned as before; the process is this harness's (stopped by its pid at the end)."""
        node_dir = os.path.join(self.dir, f"node-{node_id}")
        with open(os.path.join(node_dir, "command"), encoding="utf-8") as f:
            command = f.read().strip()
        argv = [*self.run.server_wrap, "sh", "-c", f"exec {command}"]
        with open(os.path.join(node_dir, "server.log"), "ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.run.processes.append((f"{self.name}-node-{node_id}", proc))
        self.nodes[node_id].update(pid=proc.pid, proc=proc)

    def stop(self):
        """Stops `cluster local` (SIGTERM: it stops the nodes it still has), every node this harness
        started again, and, last, any node left running, each by its own pid."""
        if self.local.poll() is None:
            self.local.terminate()
            try:
                self.local.wait(STOP_TIMEOUT_S + 20)  # cluster local gives its nodes 15 s
            except subprocess.TimeoutExpired:
                self.local.kill()
                self.local.wait()
        self.run.processes = [(n, p) for n, p in self.run.processes if p is not self.local]
        for node in self.nodes.values():
            if node["proc"]:
                self.run.stop(node["proc"])
            elif alive(node["pid"], self.dir):
                os.kill(node["pid"], signal.SIGKILL)


    def keep_logs(self):
        """Copies each node's log beside the run's other logs, which a failed run keeps, before its
        data directory is deleted."""
        for node_id in self.nodes:
            path = os.path.join(self.dir, f"node-{node_id}", "server.log")
            if os.path.exists(path):
                kept = f"{self.name}-r{self.run.repetition + 1}-node-{node_id}.log"
                shutil.copy(path, os.path.join(self.run.work, kept))


class ClusterWriter:
    """A light write load through RESP, on a thread of its own, acting as a Redis Cluster client
    would: a SET at a time to a new key every `interval_s`, following `-MOVED` to the leader; on
    a refused or broken connection, a timeout or `-CLUSTERDOWN`, it tries the next node after
    `retry_s`. Keeps when each acknowledged SET was sent and acknowledged, so a failover's write
    outage is the first acknowledgement of a SET sent after the kill."""

    def __init__(self, ports, interval_s, retry_s=0.002, reply_timeout_s=2.0):
        self.ports, self.interval_s = list(ports), interval_s
        self.retry_s, self.reply_timeout_s = retry_s, reply_timeout_s
        self.acks = []  # (sent ns, acknowledged ns), monotonic
        self.errors = {}  # first words of each kind of failure -> count
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def note(self, what):
        self.errors[what] = self.errors.get(what, 0) + 1

    def loop(self):
        index, port, sock, reader, number = 0, self.ports[0], None, None, 0
        while not self.done.is_set():
            try:
                if sock is None:
                    sock = socket.create_connection(("127.0.0.1", port), timeout=self.reply_timeout_s)
                    reader = sock.makefile("rb")
                key = f"failover:{number:012d}".encode()
                sent = time.monotonic_ns()
                sock.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$16\r\n%s\r\n" % (len(key), key, b"v" * 16))
                line = reader.readline()
                if not line:
                    raise OSError("connection closed")
            except OSError as error:  # refused, reset, closed, timed out
                self.note(type(error).__name__)
                if sock:
                    sock.close()
                sock, index = None, (index + 1) % len(self.ports)
                port = self.ports[index]
                self.done.wait(self.retry_s)
                continue
            if line == b"+OK\r\n":
                with self.lock:
                    self.acks.append((sent, time.monotonic_ns()))
                number += 1
                self.done.wait(self.interval_s)
            elif line.startswith(b"-MOVED "):
                self.note("MOVED")
                sock.close()
                sock, port = None, int(line.split()[2].rsplit(b":", 1)[1])
            else:
                self.note(line[:24].decode(errors="replace").strip())
                sock.close()
                sock, index = None, (index + 1) % len(self.ports)
                port = self.ports[index]
                self.done.wait(self.retry_s)
        if sock:
            sock.close()

    def first_ack_after(self, start_ns):
        """When the first SET sent at or after `start_ns` was acknowledged; None if none yet."""
        with self.lock:
            return next((acked for sent, acked in self.acks if sent >= start_ns), None)

    def stop(self):
        self.done.set()
        self.thread.join(self.reply_timeout_s + 5)
        return len(self.acks)


def cluster_agreed(status, killed):
    """The new leader of group 0 if every surviving member (all but `killed`) reports the same
    leader, that leader is a survivor, and it reports itself as leader; else None."""
    replicas = [r for r in ((status or {}).get("groups") or [{}])[0].get("replicas", []) if r["node_id"] != killed]
    if not replicas or any(r.get("role") not in ("leader", "follower") for r in replicas):
        return None
    leaders = {r.get("leader") for r in replicas}
    if len(leaders) != 1:
        return None
    leader = leaders.pop()
    if leader in (None, 0, killed) or not any(r["node_id"] == leader and r["role"] == "leader" for r in replicas):
        return None
    return leader


def cluster_in_sync(status, node_id, max_lag):
    """Whether node `node_id` is back in group 0: a follower (or the leader) of the leader every
    member names, no more than `max_lag` entries behind as the leader counts (a light write load
    runs, so an entry or two may be in flight)."""
    replicas = ((status or {}).get("groups") or [{}])[0].get("replicas", [])
    mine = next((r for r in replicas if r["node_id"] == node_id), None)
    if not mine or mine.get("role") not in ("leader", "follower"):
        return False
    if len({r.get("leader") for r in replicas}) != 1 or any(r.get("role") == "unreachable" for r in replicas):
        return False
    return mine["role"] == "leader" or (mine.get("lag") is not None and mine["lag"] <= max_lag)


def cluster_servers(run, s):
    """The cluster scenario's three systems, fresh for this repetition: system -> {pids, resp port,
    native addresses of the Ferrite nodes}. The cluster's RESP target is the leader of group 0:
    with one group (one shard per node) it owns all 16,384 slots, and redis-benchmark --cluster
    refuses a cluster of one master, so plain redis-benchmark against the leader sends what a
    cluster client would."""
    systems = {}

    def start_cluster():
        cluster = LocalCluster(run, "ferrite-cluster", s["nodes"])
        systems["ferrite-cluster"] = {"cluster": cluster}
        leader = cluster.leader()
        port = cluster.nodes[leader]["resp"]
        if not resp_answers(port):
            raise Failure(f"the cluster's leader (node {leader}) did not answer SET/GET at RESP port {port}")
        systems["ferrite-cluster"].update(port=port, leader=leader, pids=cluster.pids(),
                                          natives={i: n["native"] for i, n in cluster.nodes.items()})

    def start_single():
        data = os.path.join(run.work, "ferrite-single-data")
        proc, native, resp = run.start_ferrite(name="ferrite-single", data=data)
        if not resp:
            raise Failure("ferrite-server announced no RESP listener")
        systems["ferrite-single"] = {"proc": proc, "port": int(resp[0].rsplit(":", 1)[1]), "pids": [proc.pid],
                                     "natives": {0: native[0]}}

    def start_redis():
        proc, port = run.start_redis("redis-always")
        systems["redis-always"] = {"proc": proc, "port": port, "pids": [proc.pid], "natives": {}}

    for system, start in zip(CLUSTER_SYSTEMS, (start_cluster, start_single, start_redis)):
        run.attempt(f"cluster: starting {system}", start)
    return systems


def cluster_counters(run, target):
    """What bounds a point, read just before and just after its measured run: the CPU ticks of
    every server process of the system, the disk's flushes, and each Ferrite node's `puts` and
    `wal_commits` (a commit is one fdatasync, two when it crosses into a new log segment)."""
    def read():
        counters = {"cpu_ticks": sum(process_cpu_ticks(pid) for pid in target["pids"])}
        counters.update(disk_flushes(run.work) or {})
        for node_id, addr in target["natives"].items():
            stats = ferrite_stats(run, addr)
            counters[f"node{node_id}_puts"] = stats.get("puts", 0)
            counters[f"node{node_id}_wal_commits"] = stats.get("wal_commits", 0)
        return counters
    return read


def cluster_point(point, target):
    """A redis-benchmark point with its bounds: server CPU busy (CPU seconds per second of the
    run), fdatasyncs per second (the leader's, and every node's), the disk's flushes per second and
    their mean time."""
    grown = point.pop("counters")
    measured_s = point["ops"] / max(point["ops_per_s"], 1e-9)
    cpu_s = grown["cpu_ticks"] / CLOCK_TICKS_PER_S
    point.update(measured_s=round(measured_s, 3), server_cpu_s=round(cpu_s, 3),
                 server_cpu_busy=round(cpu_s / max(measured_s, 1e-9), 2), clock_ticks_per_s=CLOCK_TICKS_PER_S)
    if "disk_flushes" in grown:
        point.update(disk_flushes=grown["disk_flushes"],
                     disk_flushes_per_s=round(grown["disk_flushes"] / max(measured_s, 1e-9)),
                     disk_flush_ms_mean=round(grown["disk_flush_ms"] / max(1, grown["disk_flushes"]), 3))
    nodes = {node_id: (grown.get(f"node{node_id}_puts", 0), grown.get(f"node{node_id}_wal_commits", 0))
             for node_id in target["natives"]}
    if nodes:
        main = target.get("leader", 0)
        puts, commits = nodes[main]
        point.update(puts=puts, wal_commits=commits, fdatasyncs_per_s=round(commits / max(measured_s, 1e-9)),
                     puts_per_fdatasync=round(puts / max(1, commits), 1),
                     fdatasyncs_per_s_all_nodes=round(sum(c for _, c in nodes.values()) / max(measured_s, 1e-9)),
                     by_node={str(i): {"puts": p, "wal_commits": c} for i, (p, c) in nodes.items()})
    return point


def cluster_failovers(run, s, cluster):
    """`failovers` rounds under a light write load: kill -9 group 0's leader, time until the
    survivors agree on a new leader (status polled every `poll_s`) and until a SET sent after the
    kill is acknowledged, start the node again, wait until it is back in sync. Every wait is
    bounded; a round that times out is a failure and ends the rounds (the cluster is then in no
    state to measure)."""
    ports = [node["resp"] for node in cluster.nodes.values()]
    run.commands.append(f"# python: {s['failovers']} rounds of: group 0's leader from `ferrite --addr NODE --json "
                        "cluster status`; kill -9 PID; that status on a survivor every "
                        f"{s['poll_s']} s until the survivors agree on a new leader; then "
                        f"`{display(run.server_wrap)} sh -c \"exec $(cat {display([cluster.dir])}/node-N/command)\"` "
                        "and the status until it is back in sync")
    writer = ClusterWriter(ports, s["write_interval_s"])
    try:
        for round_ in range(s["failovers"]):
            leader = cluster.leader()
            survivor = next(node_id for node_id in cluster.nodes if node_id != leader)
            # Only a cluster that takes writes before the kill says anything about after it.
            ready_from = time.monotonic_ns()
            deadline = time.monotonic() + s["failover_timeout_s"]
            while writer.first_ack_after(ready_from) is None:
                if time.monotonic() > deadline:
                    raise Failure(f"round {round_ + 1}: no write acknowledged before the kill within "
                                  f"{s['failover_timeout_s']} s ({writer.errors})")
                time.sleep(0.005)
            killed_at = cluster.kill(leader)
            deadline = time.monotonic() + s["failover_timeout_s"]
            elected_ns, new_leader, polls = None, None, 0
            while time.monotonic() < deadline:
                polls += 1
                new_leader = cluster_agreed(cluster.status(survivor, timeout=s["failover_timeout_s"]), leader)
                if new_leader:
                    elected_ns = time.monotonic_ns()
                    break
                time.sleep(s["poll_s"])
            accepted_ns = writer.first_ack_after(killed_at)
            while accepted_ns is None and time.monotonic() < deadline:
                time.sleep(0.002)
                accepted_ns = writer.first_ack_after(killed_at)
            if elected_ns is None or accepted_ns is None:
                raise Failure(f"round {round_ + 1}: after killing node {leader}, "
                              f"{'no leader agreed on' if elected_ns is None else 'no write acknowledged'} within "
                              f"{s['failover_timeout_s']} s (writer: {writer.errors})")
            restarted = time.monotonic()
            cluster.restart(leader)
            deadline = restarted + s["resync_timeout_s"]
            while not cluster_in_sync(cluster.status(survivor), leader, s["max_lag"]):
                if time.monotonic() > deadline:
                    raise Failure(f"round {round_ + 1}: node {leader}, started again, was not back in sync within "
                                  f"{s['resync_timeout_s']} s")
                time.sleep(s["poll_s"])
            point = {"ops": 0, "errors": 0, "ops_per_s": 0.0, "killed": leader, "new_leader": new_leader,
                     "leader_agreed_s": round((elected_ns - killed_at) / 1e9, 4),
                     "writes_accepted_s": round((accepted_ns - killed_at) / 1e9, 4),
                     "status_polls": polls, "resync_s": round(time.monotonic() - restarted, 3)}
            run.add("cluster", "ferrite-cluster", "failover", point, op="failover", round=round_ + 1)
            log(f"cluster: failover {round_ + 1}: node {leader} killed, node {new_leader} leads after "
                f"{point['leader_agreed_s']:.3f} s, writes accepted after {point['writes_accepted_s']:.3f} s, "
                f"back in sync {point['resync_s']:.2f} s after its restart")
    finally:
        acked = writer.stop()
        run.commands.append(f"# python: {acked} SETs through RESP during the failovers, one every "
                            f"{s['write_interval_s']} s (writer failures: {writer.errors})")


def cluster(run):
    """Durable SETs from redis-benchmark against a three-node cluster (its leader), a single
    server and Redis AOF always, in turn at each point, with each point's bounds; then, in the
    first repetition, `failovers` kill -9s of the leader of a fresh cluster under a light write
    load. Every server is started for this repetition and stopped by its pid at its end, its data
    deleted."""
    s = run.settings["cluster"]
    failures = len(run.failures)
    systems = cluster_servers(run, s)
    try:
        if run.repetition == 0:
            run.commands.append("# python: utime + stime of every server process (/proc/PID/stat), the disk's flush "
                                "requests (/proc/diskstats) and `ferrite --json stats` of every Ferrite node, just "
                                "before and just after each redis-benchmark run below")
        for clients, pipeline in s["points"]:
            for system in CLUSTER_SYSTEMS:
                if system not in systems or "port" not in systems[system]:
                    continue

                def measure(system=system, clients=clients, pipeline=pipeline):
                    target = systems[system]
                    quick = (min(s["quick_requests_max"], s["quick_requests_per_batch"] * clients * pipeline)
                             if run.quick else None)
                    point = run.redis_benchmark(target["port"], pipeline, s["value_size"], s["keys"], s["seconds"],
                                                clients=clients, tests="set", counters=cluster_counters(run, target),
                                                quick_requests=quick)["SET"]
                    run.add("cluster", system, "redis-benchmark", cluster_point(point, target), op="put",
                            clients=clients, pipeline=pipeline)
                run.attempt(f"cluster: {system}, {clients} connection(s), pipeline {pipeline}", measure)
    finally:
        for system in CLUSTER_SYSTEMS:
            if "cluster" in systems.get(system, {}):
                systems[system]["cluster"].stop()
                if len(run.failures) > failures:
                    systems[system]["cluster"].keep_logs()
            elif "proc" in systems.get(system, {}):
                run.stop(systems[system]["proc"])
        for name in ("ferrite-cluster-data", "ferrite-single-data", "redis-always"):
            shutil.rmtree(os.path.join(run.work, name), ignore_errors=True)
    if run.repetition == 0:
        run.attempt(f"cluster: {s['failovers']} failovers", lambda: cluster_failover_run(run, s))


def cluster_failover_run(run, s):
    """The failovers, on a cluster of their own: a node killed on the throughput points' cluster
    would have to apply their hundreds of thousands of entries when started again (which takes
    minutes: see docs/benchmarks.md, "Cluster"), so every round would time that catch-up rather
    than a failover."""
    cluster, failed = LocalCluster(run, "ferrite-cluster-failover", s["nodes"]), True
    try:
        cluster_failovers(run, s, cluster)
        failed = False
    finally:
        cluster.stop()
        if failed:
            cluster.keep_logs()
        shutil.rmtree(cluster.dir, ignore_errors=True)


def process_rss_bytes(pid):
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise Failure(f"no VmRSS for process {pid}")


def ferrite_stats(run, addr):
    done = run.run([run.bin["ferrite"], "--addr", addr, "--json", "stats"], "ferrite stats", timeout=60, record=False)
    counters = {}
    for shard in json.loads(done.stdout)["shards"]:
        for name, value in shard["counters"].items():
            counters[name] = counters.get(name, 0) + value
    return counters


def restart(run):
    """Loads N keys into a fresh server, measures its memory and its log traffic, kills it with
    SIGKILL and times the restart (recovery: checkpoint, log replay, table walk) until `ready.`."""
    s = run.settings["restart"]
    for keys in s["keys"]:
        def measure(keys=keys):
            data = os.path.join(run.work, f"restart-{keys}")
            proc, native, _ = run.start_ferrite(pinned=False, resp=False, data=data)
            addr = native[0]
            before = process_rss_bytes(proc.pid)
            # A get run stores every key first (its preload); async puts, made durable below.
            result = run.ferrite_bench(addr, "get", 1, keys, s["key_size"], s["value_size"], clients=4,
                                       outstanding=32, pool="restart", keep_pool=True, durability="async", ops=1,
                                       pinned=False)
            preload = result.get("preload") or {}
            time.sleep(1.0)  # async writes reach stable storage within the 10 ms commit interval
            counters = ferrite_stats(run, addr)
            rss = process_rss_bytes(proc.pid)
            proc.kill()
            proc.wait()
            run.processes = [(n, p) for n, p in run.processes if p is not proc]
            started = time.monotonic()
            proc, native, _ = run.start_ferrite(pinned=False, resp=False, data=data)
            restart_s = time.monotonic() - started
            done = run.run([run.bin["ferrite"], "--addr", native[0], "count", "restart"], "counting after restart",
                           timeout=60)
            recovered = int(done.stdout.strip())
            run.stop(proc)
            shutil.rmtree(data, ignore_errors=True)
            if recovered != keys:
                raise Failure(f"{recovered} keys after the restart, {keys} before")
            point = {"ops": keys, "errors": preload.get("errors", 0), "ops_per_s": preload.get("ops_per_s") or 0,
                     "restart_s": round(restart_s, 3), "dram_bytes_per_key": round((rss - before) / keys, 1),
                     "rss_bytes": rss, "wal_bytes_per_put": round(counters.get("wal_bytes", 0) / max(1, counters.get("puts", 1)), 1),
                     "wal_commits": counters.get("wal_commits"), "checkpoints": counters.get("checkpoints"),
                     "command": result.get("command")}
            run.add("restart", "ferrite-sync", "ferrite bench", point, keys=keys)
        run.attempt(f"restart: {keys:,} keys", measure)


# --- memory per key -----------------------------------------------------------------------------

# The /proc/<pid>/status lines the memory scenario keeps: resident memory now (VmRSS) and at its
# highest (VmHWM), and the resident memory's three kinds (anonymous, file pages, shared memory:
# an `ssd` pool lives in a memfd, so its pages count as RssShmem).
STATUS_FIELDS = {"VmRSS": "rss", "VmHWM": "hwm", "RssAnon": "rss_anon", "RssFile": "rss_file",
                 "RssShmem": "rss_shmem"}


def process_memory(pid):
    """A process's resident memory figures, in bytes (see STATUS_FIELDS)."""
    found = {}
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in STATUS_FIELDS:
                found[STATUS_FIELDS[name]] = int(rest.split()[0]) * 1024
    if "rss" not in found:
        raise Failure(f"no VmRSS for process {pid}")
    return found


def reset_peak(pid):
    """Resets the process's VmHWM to its current RSS (`echo 5 > /proc/PID/clear_refs`), so the
    peak read after a load is the load's own and not the start-up's; whether that worked."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w", encoding="utf-8") as f:
            f.write("5")
        return True
    except OSError:
        return False


def resp_request(port, *args, timeout=60):
    """One command to a RESP server; its reply (a simple string, bulk string or integer, decoded
    as text or int). An error reply raises Failure."""
    command = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a)
                                                for a in (x if isinstance(x, bytes) else str(x).encode() for x in args))
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(command)
        reader = sock.makefile("rb")
        line = reader.readline()
        if line[:1] == b"+":
            return line[1:].strip().decode()
        if line[:1] == b":":
            return int(line[1:])
        if line[:1] == b"$":
            length = int(line[1:])
            return None if length < 0 else reader.read(length + 2)[:-2].decode(errors="replace")
        raise Failure(f"{args[0]} to port {port} answered {line[:200]!r}")


def resp_info(port, section="memory"):
    """`INFO section` as a dict, numbers as numbers."""
    fields = {}
    for line in (resp_request(port, "INFO", section) or "").splitlines():
        name, sep, value = line.partition(":")
        if not sep or line.startswith("#"):
            continue
        try:
            fields[name] = int(value)
        except ValueError:
            try:
                fields[name] = float(value)
            except ValueError:
                fields[name] = value.strip()
    return fields


def resp_mset_load(port, keys, key_format, value, batch=1000, in_flight=8, progress=None):
    """Stores keys 0..keys (`key_format % number`, printf style, fixed width) with `value` over
    RESP: MSETs of `batch` pairs, `in_flight` of them outstanding on one connection. Each MSET is
    one C-level formatting of a template, so the loader keeps up with the server at millions of
    keys. Returns the seconds the load took."""
    key_bytes = key_format.encode()
    width = len(key_format % 0)
    if len(key_format % max(0, keys - 1)) != width:
        raise Failure(f"key format {key_format!r} is not fixed-width up to {keys - 1}")
    pair = (b"$%d\r\n" % width + key_bytes + b"\r\n$%d\r\n" % len(value)
            + value.replace(b"%", b"%%") + b"\r\n")
    templates = {}

    def template(count):
        if count not in templates:
            templates[count] = b"*%d\r\n$4\r\nMSET\r\n" % (1 + 2 * count) + pair * count
        return templates[count]

    started = time.monotonic()
    next_report = started + 10
    with socket.create_connection(("127.0.0.1", port), timeout=300) as sock:
        pending = 0
        buffer = b""

        def read_replies(until):
            nonlocal pending, buffer
            while pending > until:
                while b"\r\n" not in buffer:
                    data = sock.recv(65536)
                    if not data:
                        raise Failure(f"loading port {port}: the server closed the connection")
                    buffer += data
                line, buffer = buffer.split(b"\r\n", 1)
                if line != b"+OK":
                    raise Failure(f"loading port {port}: MSET answered {line[:200]!r}")
                pending -= 1

        for start in range(0, keys, batch):
            end = min(keys, start + batch)
            sock.sendall(template(end - start) % tuple(range(start, end)))
            pending += 1
            read_replies(in_flight - 1)
            if progress and time.monotonic() > next_report:
                progress(f"{end:,} of {keys:,} keys ({end / (time.monotonic() - started):,.0f} keys/s)")
                next_report = time.monotonic() + 10
        read_replies(0)
    return time.monotonic() - started


def ferrite_pool_entry(run, addr, name):
    """The numeric fields of one pool in `ferrite pool list --json` (whatever this build reports:
    objects, size and used bytes, and in newer builds per-pool memory figures), or None."""
    done = run.run([run.bin["ferrite"], "--addr", addr, "--json", "pool", "list"], "ferrite pool list", timeout=60)
    try:
        pools = json.loads(done.stdout).get("pools", [])
    except (json.JSONDecodeError, AttributeError):
        return None
    for pool in pools:
        if pool.get("name") == name:
            return flat_numbers(pool)
    return None


def flat_numbers(document, prefix=""):
    """The numbers of a JSON object, nested objects flattened with dotted names."""
    out = {}
    for key, value in document.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            out[prefix + key] = value
        elif isinstance(value, dict):
            out.update(flat_numbers(value, f"{prefix}{key}."))
    return out


def memory_point(keys, load_s, before, after, peak_reset):
    """The figures every memory row has: RSS before and after, the peak, bytes per key."""
    return {
        "ops": keys, "errors": 0, "ops_per_s": round(keys / max(load_s, 1e-9), 1), "load_s": round(load_s, 2),
        "rss_before": before["rss"], "rss_after": after["rss"], "hwm_after": after["hwm"],
        "hwm_before_reset": before["hwm"], "peak_reset": peak_reset,
        "memory_before": before, "memory_after": after,
        "bytes_per_key": round((after["rss"] - before["rss"]) / keys, 1),
        "peak_over_after": round(after["hwm"] / max(1, after["rss"]), 3),
    }


def memory(run):
    """Bytes per key: for each key count, each system started fresh, loaded, measured and stopped,
    so one count's memory (and allocator state) does not carry into the next."""
    s = run.settings["memory"]
    value = b"v" * s["value_size"]
    resp_format = "key:%0{}d".format(s["resp_key_size"] - 4)
    native_format = "%0{}d".format(s["native_key_size"])

    def ferrite_resp(keys):
        if run.resp_available is False:
            raise Failure("this ferrite-server has no RESP listener")
        data = os.path.join(run.work, f"memory-resp-{keys}")
        proc, native, resp = run.start_ferrite(pinned=False, resp=True, data=data)
        try:
            if not resp:
                raise Failure("ferrite-server announced no RESP listener")
            addr, port = native[0], int(resp[0].rsplit(":", 1)[1])
            # The default pool is created at start; one request makes sure it is open and formatted.
            resp_request(port, "DBSIZE")
            before = process_memory(proc.pid)
            peak_reset = reset_peak(proc.pid)
            run.commands.append(f"# python: MSET {resp_format % 0} .. {resp_format % (keys - 1)} "
                                f"({len(value)} B values), {s['batch']} pairs per MSET, {s['in_flight']} in flight, "
                                f"to port {port}; VmRSS/VmHWM from /proc/PID/status before and after")
            load_s = resp_mset_load(port, keys, resp_format, value, s["batch"], s["in_flight"],
                                    progress=lambda m: log(f"memory: ferrite-resp: {m}"))
            time.sleep(s["settle_s"])
            after = process_memory(proc.pid)
            stored = resp_request(port, "DBSIZE")
            if stored != keys:
                raise Failure(f"DBSIZE is {stored} after loading {keys} keys")
            point = memory_point(keys, load_s, before, after, peak_reset)
            run.commands.append(f"# {display([run.bin['ferrite'], '--addr', addr, '--json', 'stats'])} after the load")
            point["stats"] = ferrite_stats(run, addr)
            point["pool"] = ferrite_pool_entry(run, addr, "@0/redis")
            point["info_memory"] = resp_info(port)
            run.add("memory", "ferrite-resp", "resp loader", point, keys=keys, path="resp",
                    key_size=s["resp_key_size"])
            log(f"memory: ferrite-resp, {keys:,} keys: {point['bytes_per_key']} bytes/key, "
                f"peak/after {point['peak_over_after']}, {load_s:.1f} s")
        finally:
            run.stop(proc)
            shutil.rmtree(data, ignore_errors=True)

    def ferrite_native(keys):
        data = os.path.join(run.work, f"memory-native-{keys}")
        proc, native, _ = run.start_ferrite(pinned=False, resp=False, data=data)
        try:
            addr = native[0]
            pair = s["native_key_size"] + s["value_size"] + 64
            size = -(-keys * pair // (1 << 20)) * (1 << 20)  # key + value + 64 bytes a pair, up to a MiB
            before = process_memory(proc.pid)
            peak_reset = reset_peak(proc.pid)
            run.run([run.bin["ferrite"], "--addr", addr, "pool", "create", "memory", "--size", str(size),
                     "--expected-objects", str(keys), "--create-only"], "creating the sized pool", timeout=120)
            created = process_memory(proc.pid)
            # A get run stores every key first (its preload) into the existing pool, then one get.
            result = run.ferrite_bench(addr, "get", 1, keys, s["native_key_size"], s["value_size"], clients=4,
                                       outstanding=32, pool="memory", keep_pool=True, durability="async", ops=1,
                                       pinned=False)
            preload = result.get("preload") or {}
            time.sleep(s["settle_s"])
            after = process_memory(proc.pid)
            done = run.run([run.bin["ferrite"], "--addr", addr, "count", "memory"], "counting the pool", timeout=120)
            stored = int(done.stdout.strip())
            if stored != keys:
                raise Failure(f"the pool holds {stored} keys after loading {keys}"
                              f" ({preload.get('errors', 0)} errors: {result.get('first_error')})")
            load_s = preload.get("elapsed_s") or 0.0
            point = memory_point(keys, load_s, before, after, peak_reset)
            point.update(errors=preload.get("errors", 0), first_error=result.get("first_error"),
                         pool_size_bytes=size, rss_after_create=created["rss"], command=result.get("command"))
            run.commands.append(f"# {display([run.bin['ferrite'], '--addr', addr, '--json', 'stats'])} after the load")
            point["stats"] = ferrite_stats(run, addr)
            point["pool"] = ferrite_pool_entry(run, addr, "memory")
            run.add("memory", "ferrite", "ferrite bench", point, keys=keys, path="native",
                    key_size=s["native_key_size"])
            log(f"memory: ferrite native, {keys:,} keys: {point['bytes_per_key']} bytes/key, "
                f"peak/after {point['peak_over_after']}")
        finally:
            run.stop(proc)
            shutil.rmtree(data, ignore_errors=True)

    def redis(keys, path, key_format, key_size):
        proc, port = run.start_redis("redis")
        try:
            info_before = resp_info(port)
            before = process_memory(proc.pid)
            peak_reset = reset_peak(proc.pid)
            run.commands.append(f"# python: MSET {key_format % 0} .. {key_format % (keys - 1)} "
                                f"({len(value)} B values), {s['batch']} pairs per MSET, {s['in_flight']} in flight, "
                                f"to port {port}; INFO memory and /proc/PID/status before and after")
            load_s = resp_mset_load(port, keys, key_format, value, s["batch"], s["in_flight"],
                                    progress=lambda m: log(f"memory: redis: {m}"))
            time.sleep(s["settle_s"])
            after = process_memory(proc.pid)
            info = resp_info(port)
            stored = resp_request(port, "DBSIZE")
            if stored != keys:
                raise Failure(f"DBSIZE is {stored} after loading {keys} keys")
            point = memory_point(keys, load_s, before, after, peak_reset)
            used_before, used_after = info_before.get("used_memory", 0), info.get("used_memory", 0)
            point.update(used_memory_before=used_before, used_memory_after=used_after,
                         used_memory_peak=info.get("used_memory_peak"),
                         used_memory_bytes_per_key=round((used_after - used_before) / keys, 1),
                         info_memory_before=info_before, info_memory=info)
            run.add("memory", "redis", "resp loader", point, keys=keys, path=path, key_size=key_size)
            log(f"memory: redis ({path} keys), {keys:,} keys: {point['used_memory_bytes_per_key']} bytes/key "
                f"(used_memory), {point['bytes_per_key']} (RSS)")
        finally:
            run.stop(proc)
            shutil.rmtree(os.path.join(run.work, "redis"), ignore_errors=True)

    for keys in s["keys"]:
        run.attempt(f"memory: ferrite-resp, {keys:,} keys of {s['resp_key_size']} B",
                    lambda keys=keys: ferrite_resp(keys))
        run.attempt(f"memory: redis, {keys:,} keys of {s['resp_key_size']} B",
                    lambda keys=keys: redis(keys, "resp", resp_format, s["resp_key_size"]))
        run.attempt(f"memory: ferrite native pool, {keys:,} keys of {s['native_key_size']} B",
                    lambda keys=keys: ferrite_native(keys))
        run.attempt(f"memory: redis, {keys:,} keys of {s['native_key_size']} B",
                    lambda keys=keys: redis(keys, "native", native_format, s["native_key_size"]))


# --- large values -------------------------------------------------------------------------------

def process_write_bytes(pid):
    """Bytes a process has caused to be written to storage (/proc/PID/io `write_bytes`): the log,
    checkpoints and anything else; None where the kernel does not say."""
    try:
        with open(f"/proc/{pid}/io", encoding="utf-8") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def settle(pid, quiet_s=0.3, timeout_s=60):
    """Waits until a server has finished the background work of what it was sent (log flushes and
    checkpoints run on threads of their own, on the same CPU as its shard when pinned): until it
    uses at most one clock tick of CPU and writes nothing over `quiet_s`. Returns the seconds it
    took, or None if it was still busy after `timeout_s`."""
    started = time.monotonic()
    last = (process_cpu_ticks(pid), process_write_bytes(pid))
    while time.monotonic() - started < timeout_s:
        time.sleep(quiet_s)
        now = (process_cpu_ticks(pid), process_write_bytes(pid))
        if now[0] - last[0] <= 1 and now[1] == last[1]:
            return round(time.monotonic() - started - quiet_s, 2)
        last = now
    return None


def large_keys(s, size):
    """Keys for `size`-byte values: `data_bytes` of values, between 1 and `keys_max` keys."""
    return max(1, min(s["keys_max"], s["data_bytes"] // size))


def large_points(s, skip_gib):
    """What the large-values scenario measures, by value size: a list of (system, transfer,
    durability, clients, outstanding) for each size, the main table's points first, then the
    crossover's, each once."""
    by_size = {}

    def add(size, *point):
        points = by_size.setdefault(size, [])
        if point not in points:
            points.append(point)

    for size in s["sizes"]:
        if skip_gib and size >= s["once_from"]:
            continue
        shapes = [(1, 1)] + ([(s["many_clients"], 1)] if size <= s["many_clients_size_max"] else [])
        for clients, outstanding in shapes:
            for transfer in (["inline"] if size <= s["inline_max"] else []) + ["direct"]:
                for durability in ("async", "sync"):
                    add(size, "ferrite", transfer, durability, clients, outstanding)
                add(size, "limit", transfer, None, clients, outstanding)
            if size <= s["redis_max"]:
                add(size, "redis", "resp", None, clients, outstanding)
    for size in s["crossover_sizes"]:
        for outstanding in s["crossover_outstanding"]:
            for system in ("ferrite", "limit"):
                for transfer in ("inline", "direct"):
                    add(size, system, transfer, "async" if system == "ferrite" else None, 1, outstanding)
    return sorted(by_size.items())


def large_values(run, servers):
    """Put and get throughput of large values: Ferrite inline and direct (async and sync), the
    echo (the loopback limit) inline and direct, Redis; the inline/direct crossover; the log's
    write amplification; then, in the first repetition, the small-get probe beside a 1 GiB loop."""
    s = run.settings["large-values"]
    first = run.repetition == 0
    if "large-values-redis" not in servers:
        port = servers["redis"].get("redis")
        if not port:
            port = run.attempt("large-values: starting redis", lambda: run.start_redis("redis")[1])
        servers["large-values-redis"] = port
    redis_port = servers["large-values-redis"]
    if first:
        large_values_durable(run, s)
    for size, points in large_points(s, run.args.skip_1gib):
        once = size >= s["once_from"]
        if once and not first:
            continue
        large = size >= s["large_from"]
        keys = large_keys(s, size)
        timing = dict(ops=s["once_ops"]) if once else dict(seconds=s["seconds_large"] if large else s["seconds"])
        ferrite = None  # (process, address, data directory), fresh per size (per point when large)
        echo = None
        try:
            for system, transfer, durability, clients, outstanding in points:
                if system == "redis" and not redis_port:
                    continue
                if system == "ferrite" and (ferrite is None or large):
                    if ferrite:
                        run.stop(ferrite[0])
                        shutil.rmtree(ferrite[2], ignore_errors=True)
                    data = os.path.join(run.work, f"large-{size}-data")
                    shutil.rmtree(data, ignore_errors=True)
                    ferrite = run.attempt(f"large-values: starting ferrite-server for {size_text(size)}",
                                          lambda data=data: (*run.start_ferrite(resp=False, data=data,
                                                                                name="ferrite-server-large")[:2], data))
                    if ferrite is None:
                        continue
                    ferrite = (ferrite[0], ferrite[1][0], ferrite[2])
                if system == "limit" and echo is None:
                    echo = run.attempt(f"large-values: starting the echo for {size_text(size)}",
                                       lambda: run.start_echo(get_value_size=min(size, s["inline_max"]),
                                                              direct_value_size=size))
                    if echo is None:
                        continue
                if system == "ferrite" and ferrite is None or system == "limit" and echo is None:
                    continue
                addr = {"ferrite": ferrite and ferrite[1], "limit": echo and echo[1][0],
                        "redis": f"127.0.0.1:{redis_port}"}[system]
                label = system if system != "ferrite" else f"ferrite-{durability}"
                labels = dict(transfer=transfer, value_size=size, clients=clients, outstanding=outstanding)
                what = (f"large-values: {label} {transfer}, {size_text(size)}, {clients} connection(s) x "
                        f"{outstanding}")

                def measure(system=system, addr=addr, transfer=transfer, durability=durability, label=label,
                            labels=labels, clients=clients, outstanding=outstanding):
                    common = dict(keys=keys, key_size=s["key_size"], value_size=size, clients=clients,
                                  outstanding=outstanding, pool="large", durability=durability,
                                  target="resp" if system == "redis" else "native",
                                  transfer=None if system == "redis" else transfer)
                    timed = {"seconds": 0, **timing}
                    pid = ferrite[0].pid if system == "ferrite" else None
                    # Store the keys (one get run of one get), let Ferrite finish the log flushes
                    # and checkpoints that leaves, then measure gets of the stored keys, settle
                    # again and measure puts replacing them.
                    run.ferrite_bench(addr, "get", keep_pool=True, seconds=0, ops=1, **common)
                    settled = [settle(pid)] if pid else []
                    got = run.ferrite_bench(addr, "get", keep_pool=True, extra=["--no-preload"], **common, **timed)
                    run.add("large-values", label, "ferrite bench", ferrite_point(got), op="get", **labels)
                    before = after = None
                    if pid:
                        settled.append(settle(pid))
                        before = (ferrite_stats(run, addr), process_write_bytes(pid))
                    put = run.ferrite_bench(addr, "put", **common, **timed)
                    point = ferrite_point(put)
                    if pid:
                        # What the puts left to write (async: the log's tail; checkpoints they
                        # triggered) counts too.
                        settled.append(settle(pid))
                        after = (ferrite_stats(run, addr), process_write_bytes(pid))
                        point["settle_s"] = settled
                        stored = put.get("value_bytes") or 0
                        grown = {name: after[0].get(name, 0) - before[0].get(name, 0)
                                 for name in ("wal_bytes", "wal_commits", "checkpoints", "puts", "direct_bytes_in")}
                        disk = None if after[1] is None or before[1] is None else after[1] - before[1]
                        point.update(value_bytes=stored, wal_bytes=grown["wal_bytes"],
                                     wal_commits=grown["wal_commits"], checkpoints=grown["checkpoints"],
                                     direct_bytes_in=grown["direct_bytes_in"], disk_write_bytes=disk,
                                     wal_bytes_per_value_byte=round(grown["wal_bytes"] / stored, 4) if stored else None,
                                     disk_bytes_per_value_byte=round(disk / stored, 4) if stored and disk is not None
                                     else None)
                    run.add("large-values", label, "ferrite bench", point, op="put", **labels)
                    if system != "redis":
                        run.run([run.bin["ferrite"], "--addr", addr, "pool", "delete", "large"], "deleting the pool",
                                timeout=120)
                    else:
                        resp_request(redis_port, "FLUSHALL")

                run.attempt(what, measure)
        finally:
            if ferrite:
                run.stop(ferrite[0])
                shutil.rmtree(ferrite[2], ignore_errors=True)
            if echo:
                run.stop(echo[0])
    if first:
        large_values_probe(run, s)


def disk_probe(directory, size, per_value_sizes=()):
    """Bytes per second of writing `size` bytes to a new file in `directory` with O_DIRECT (4 MiB
    writes) and one fdatasync: the disk's sequential durable write bandwidth, what a log that
    writes each value byte once can reach at best. Buffered writes where the file system refuses
    O_DIRECT (tmpfs before Linux 6.6). Then, for each of `per_value_sizes`, the same bytes written over the same file
    again (space already written, as a log's recycled segments are) with an fdatasync after each
    value of that size: the most a client putting one value at a time, each durable before the
    next, can get from this disk. Returns (bytes per second, whether O_DIRECT was used,
    {value size: bytes per second})."""
    chunk = 4 << 20
    buffer = mmap.mmap(-1, chunk)
    buffer.write(os.urandom(chunk))
    path = os.path.join(directory, "disk-probe")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT)
        direct = True
    except OSError:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        direct = False
    try:
        started = time.monotonic()
        for offset in range(0, size, chunk):
            os.pwritev(fd, [buffer], offset)
        os.fdatasync(fd)
        rate = size / (time.monotonic() - started)
        per_value = {}
        for value_size in per_value_sizes:
            piece = memoryview(buffer)[:min(chunk, value_size)]
            started = time.monotonic()
            for offset in range(0, size, len(piece)):
                os.pwritev(fd, [piece], offset)
                if (offset + len(piece)) % value_size == 0:
                    os.fdatasync(fd)
            per_value[value_size] = size / (time.monotonic() - started)
        return rate, direct, per_value
    finally:
        os.close(fd)
        os.unlink(path)


def large_values_durable(run, s):
    """Durable large puts against the disk's own bandwidth and Redis appendfsync always (see the
    settings' comment): the disk probe, sync direct puts fresh and after a while with the disk
    bytes per value byte, sync RESP SETs."""
    for attempt in range(s["disk_probe_runs"]):
        def probe(attempt=attempt):
            per_value_sizes = sorted(set(s["durable_sizes"]) | set(s["resp_sizes"]))
            rate, direct, per_value = disk_probe(run.work, s["disk_probe_bytes"], per_value_sizes)
            tool = "O_DIRECT + fdatasync" if direct else "write + fdatasync"
            run.add("large-values-disk", "disk", tool,
                    {"ops": 1, "errors": 0, "ops_per_s": rate / s["disk_probe_bytes"], "bytes_per_s": rate,
                     "attempt": attempt}, value_size=s["disk_probe_bytes"])
            for value_size, value_rate in per_value.items():
                run.add("large-values-disk-per-value", "disk", f"{tool} per value",
                        {"ops": s["disk_probe_bytes"] // value_size, "errors": 0,
                         "ops_per_s": value_rate / value_size, "bytes_per_s": value_rate, "attempt": attempt},
                        value_size=value_size)
        run.attempt(f"large-values: disk probe {attempt + 1} ({size_text(s['disk_probe_bytes'])})", probe)
    for size in s["durable_sizes"]:
        if run.args.skip_1gib and size >= s["once_from"]:
            continue
        data = os.path.join(run.work, f"durable-{size}-data")
        shutil.rmtree(data, ignore_errors=True)
        started = run.attempt(f"large-values: starting ferrite-server for durable {size_text(size)} puts",
                              lambda data=data: run.start_ferrite(resp=False, data=data, name="ferrite-server-durable"))
        if started is None:
            continue
        proc, addr = started[0], started[1][0]
        try:
            for phase in ("fresh", "after a while"):
                def measure(phase=phase):
                    keys = large_keys(s, size)
                    ops = max(1, s["durable_bytes"] // size)
                    before = (ferrite_stats(run, addr), process_write_bytes(proc.pid))
                    ticks = process_cpu_ticks(proc.pid)
                    put = run.ferrite_bench(addr, "put", seconds=0, ops=ops, keys=keys, key_size=s["key_size"],
                                            value_size=size, pool="large", keep_pool=True, durability="sync",
                                            transfer="direct")
                    point = ferrite_point(put)
                    # The server's CPU time over the puts (every thread: the shard, the log's sync
                    # and spare threads, checkpoints' blocking I/O), against their wall time.
                    point["server_cpu_s"] = (process_cpu_ticks(proc.pid) - ticks) / os.sysconf("SC_CLK_TCK")
                    point["settle_s"] = settle(proc.pid)
                    after = (ferrite_stats(run, addr), process_write_bytes(proc.pid))
                    stored = put.get("value_bytes") or 0
                    grown = {name: after[0].get(name, 0) - before[0].get(name, 0)
                             for name in ("wal_bytes", "checkpoints", "checkpoint_pages")}
                    disk = None if None in (after[1], before[1]) else after[1] - before[1]
                    point.update(value_bytes=stored, wal_bytes=grown["wal_bytes"], checkpoints=grown["checkpoints"],
                                 checkpoint_pages=grown["checkpoint_pages"], disk_write_bytes=disk,
                                 wal_held_bytes=after[0].get("wal_held_bytes"),
                                 wal_spares_written=after[0].get("wal_spares_written"),
                                 wal_spares_reserved=after[0].get("wal_spares_reserved"),
                                 disk_bytes_per_value_byte=round(disk / stored, 4) if stored and disk is not None
                                 else None)
                    run.add("large-values-durable", "ferrite-sync", "ferrite bench", point, op="put",
                            transfer="direct", value_size=size, phase=phase)
                run.attempt(f"large-values: durable direct puts of {size_text(size)}, {phase}", measure)
        finally:
            run.stop(proc)
            shutil.rmtree(data, ignore_errors=True)
    resp_servers = []
    try:
        ferrite = run.attempt("large-values: starting ferrite-server for durable RESP SETs",
                              lambda: run.start_ferrite(resp=True, name="ferrite-server-resp-large"))
        redis = run.attempt("large-values: starting redis (appendfsync always)",
                            lambda: run.start_redis("redis-always"))
        resp_servers = [server[0] for server in (ferrite, redis) if server]
        targets = []
        if ferrite and ferrite[2]:
            targets.append(("ferrite-sync", ferrite[2][0]))
        if redis:
            targets.append(("redis-always", f"127.0.0.1:{redis[1]}"))
        for size in s["resp_sizes"]:
            for system, addr in targets:
                def measure(system=system, addr=addr, size=size):
                    put = run.ferrite_bench(addr, "put", seconds=s["resp_seconds"], keys=large_keys(s, size),
                                            key_size=s["key_size"], value_size=size, target="resp")
                    run.add("large-values-resp", system, "ferrite bench --target resp", ferrite_point(put), op="put",
                            value_size=size)
                run.attempt(f"large-values: durable RESP SETs of {size_text(size)} against {system}", measure)
    finally:
        for proc in resp_servers:
            run.stop(proc)


def large_values_probe(run, s):
    """Small gets, one at a time on one connection, on an idle one-shard server, then while a loop
    of large direct puts and then one of large direct gets runs on another connection of the same
    shard; then, as a control, while the same loops run against the echo (a process of its own on
    the server's CPU): the same CPU contention with no shard shared. Both load generators run on the
    client CPU when pinned."""
    data = os.path.join(run.work, "large-probe-data")
    size = s["probe_loop_size"]
    started = run.attempt("large-values: starting ferrite-server for the probe",
                          lambda: run.start_ferrite(resp=False, data=data, name="ferrite-server-probe"))
    if not started:
        return
    proc, native, _ = started
    addr = native[0]
    echo = run.attempt("large-values: starting the echo for the probe's control",
                       lambda: run.start_echo(direct_value_size=size))
    probe = dict(seconds=s["probe_seconds"], keys=s["probe_keys"], key_size=16, value_size=s["probe_value_size"],
                 pool="probe", keep_pool=True)
    try:
        def idle():
            # The probe's keys, stored once and kept by every probe run after this one.
            run.ferrite_bench(addr, "get", **dict(probe, seconds=0, ops=1))
            settle(proc.pid)
            point = ferrite_point(run.ferrite_bench(addr, "get", extra=["--no-preload"], **probe))
            run.add("large-values-probe", "ferrite", "ferrite bench", point, op="get", beside="idle")
        run.attempt("large-values: probe on an idle server", idle)
        targets = [("ferrite", addr)] + ([("echo", echo[1][0])] if echo else [])
        for loop_target, loop_addr in targets:
            for loop_op in ("put", "get"):
                def busy(loop_op=loop_op, loop_target=loop_target, loop_addr=loop_addr):
                    loop_s = s["probe_seconds"] + 4
                    argv = [*run.ferrite_client_wrap, run.bin["ferrite"], "--addr", loop_addr, "--json", "bench",
                            "--workload", loop_op, "--value-size", str(size), "--keys", "1", "--key-size", "16",
                            "--transfer", "direct", "--durability", "async", "--duration", str(loop_s), "--pool",
                            "probe-loop", "--keep-pool"]
                    if loop_op == "get":
                        # The loop's key is stored first, and the log flushes and checkpoint that
                        # leaves are done before the loop and the probe start.
                        run.ferrite_bench(loop_addr, "get", 0, 1, 16, size, ops=1, transfer="direct",
                                          durability="async", pool="probe-loop", keep_pool=True)
                        argv.append("--no-preload")
                    settle(proc.pid)
                    run.commands.append(display(argv) + " &  # then, once it measures:")
                    err_path = os.path.join(run.work, f"probe-loop-{loop_target}-{loop_op}.err")
                    with open(err_path, "wb") as err:
                        loop = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, cwd=ROOT)
                    try:
                        # Its first progress line comes a second into its measured phase (after the
                        # preload of a get loop).
                        deadline = time.monotonic() + 120
                        while True:
                            with open(err_path, encoding="utf-8", errors="replace") as f:
                                if any(line.startswith("bench:") for line in f):
                                    break
                            if loop.poll() is not None or time.monotonic() > deadline:
                                raise Failure(f"the {loop_op} loop never started measuring")
                            time.sleep(0.05)
                        point = ferrite_point(run.ferrite_bench(addr, "get", extra=["--no-preload"], **probe))
                        out, _ = loop.communicate(timeout=loop_s + 300)
                    finally:
                        if loop.poll() is None:
                            loop.kill()
                            loop.wait()
                    beside = f"{loop_op} loop" + ("" if loop_target == "ferrite" else " on echo")
                    run.add("large-values-probe", "ferrite", "ferrite bench", point, op="get", beside=beside)
                    result = json.loads(out)
                    result["command"] = display(argv)
                    run.add("large-values-probe", "ferrite" if loop_target == "ferrite" else "limit", "ferrite bench",
                            ferrite_point(result), op=loop_op, beside="loop", value_size=size)
                where = "the same shard" if loop_target == "ferrite" else "the echo"
                run.attempt(f"large-values: probe beside a loop of {size_text(size)} direct {loop_op}s on {where}",
                            busy)
    finally:
        run.stop(proc)
        shutil.rmtree(data, ignore_errors=True)
        if echo:
            run.stop(echo[0])


def size_text(size):
    return report.size_label(size)


# --- the run ----------------------------------------------------------------------------------

def build(run, only):
    argv = ["cargo", "build", "-p", "ferrite-server", "-p", "ferrite-cli"]
    if "ado" in only:
        argv += [arg for name in ADO_PACKAGES for arg in ("-p", name)]
    if run.profile == "release":
        argv.insert(2, "--release")
    log("building: " + " ".join(argv))
    run.commands.append(display(argv))
    subprocess.run(argv, check=True, cwd=ROOT)


def check_resp(run):
    """Whether this ferrite-server has the RESP listener, with the reason when it has not."""
    done = subprocess.run([run.bin["ferrite-server"], "--help"], capture_output=True, text=True, cwd=ROOT)
    if "--resp-listen" not in done.stdout:
        return "this ferrite-server has no RESP listener (--resp-listen); the Ferrite RESP rows are skipped"
    return None


def render(path):
    """Rewrites the .md and the plots beside an earlier run's .json, from that JSON alone."""
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    base = path[: -len(".json")] if path.endswith(".json") else path
    paths = report.write(document, base)
    log(f"wrote {', '.join(display([p]) for p in paths)}")
    return 0


def main():
    parser = argparse.ArgumentParser(prog="bench/compare", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--quick", action="store_true", help="a reduced matrix at ~0.5 s per point, into a temporary "
                        "directory unless --out is given (make test-bench)")
    parser.add_argument("--out", help="directory for the results (default: bench/results; --quick: a temporary one)")
    parser.add_argument("--only", metavar="SCENARIOS", help="comma-separated scenarios to run: " + ",".join(SCENARIOS))
    parser.add_argument("--debug", action="store_true", help="use debug binaries (the quick check does; figures "
                        "from them mean nothing)")
    parser.add_argument("--no-build", action="store_true", help="use the binaries already built")
    parser.add_argument("--repeat", type=int, help=f"measure every point N times and keep the best "
                        f"(default {REPEAT_FULL}, --quick {REPEAT_QUICK})")
    parser.add_argument("--pin", choices=["auto", "on", "off"], default="auto",
                        help="servers on CPU 0 and load generators on CPU 1 (default: when there are 2+ CPUs)")
    parser.add_argument("--skip-1gib", action="store_true", help="large-values: leave out the 1 GiB points (about "
                        "2 minutes of the scenario; the probe's loop stays at its size)")
    parser.add_argument("--render", metavar="JSON", help="only redraw the tables and plots of an earlier run from "
                        "its .json (after a change to bench/report.py or bench/plots.py); measures nothing")
    args = parser.parse_args()
    if args.render:
        return render(args.render)
    only = args.only.split(",") if args.only else SCENARIOS
    unknown = [name for name in only if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")

    out = args.out or (tempfile.mkdtemp(prefix="ferrite-compare-") if args.quick else os.path.join(ROOT, "bench", "results"))
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ferrite-compare-work-")
    run = Run(args, work)
    started = time.monotonic()

    def interrupted(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, interrupted)
    status = 1
    try:
        if not args.no_build:
            build(run, only)
        for name, path in run.bin.items():
            if not os.path.exists(path):
                raise Failure(f"{path} is missing: build it (cargo build{'' if args.debug else ' --release'} "
                              "-p ferrite-server -p ferrite-cli) or drop --no-build")
        run.note_load("start")
        why = check_resp(run)
        if why:
            run.resp_available = False
            run.skipped.append(why)
            log("skipping: " + why)

        servers = {"redis": {}}
        needs_servers = any(name in only for name in ("small-ops", "ycsb", "values", "durability"))
        if needs_servers:
            proc, native, resp = run.start_ferrite()
            servers["ferrite"] = native[0]
            if resp:
                port = int(resp[0].rsplit(":", 1)[1])
                if resp_answers(port):
                    servers["ferrite_resp"], servers["ferrite_resp_port"] = resp[0], port
                else:
                    why = f"ferrite-server's RESP listener at {resp[0]} did not answer SET/GET; Ferrite RESP rows skipped"
                    run.skipped.append(why)
                    log("skipping: " + why)
            _, echo_native, echo_resp = run.start_echo()
            servers["echo"], servers["echo_resp"] = echo_native[0], echo_resp[0]
            servers["echo_resp_port"] = int(echo_resp[0].rsplit(":", 1)[1])
            for name in REDIS_CONFIGS:
                _, servers["redis"][name] = run.start_redis(name)
            _, mc_port = run.start_memcached()
            servers["memcached"] = f"127.0.0.1:{mc_port}"

        scenarios = [("small-ops", small_ops), ("ycsb", ycsb), ("values", values), ("shards", shards),
                     ("durability", durability), ("poll", poll), ("ado", ado), ("metrics", metrics),
                     ("restart", restart), ("memory", memory), ("large-values", large_values),
                     ("cluster", cluster)]
        for name, scenario in scenarios:
            if name not in only:
                continue
            # A scenario may fix its own repetitions (memory: once); --repeat overrides.
            repeat = args.repeat or run.settings[name].get("repeat", run.repeat)
            for repetition in range(repeat):
                run.repetition = repetition
                run.note_load(f"{name} #{repetition + 1}")
                log(f"--- {name}, repetition {repetition + 1} of {repeat} ---")
                if name in ("shards", "restart", "memory", "cluster"):
                    scenario(run)
                else:
                    scenario(run, servers)
        run.note_load("end")
        status = 1 if run.failures else 0
    except Failure as error:
        run.failures.append(str(error))
        log(f"FAILED: {error}")
    finally:
        run.stop_all()

    elapsed = time.monotonic() - started
    document = report.assemble(run, only, elapsed)
    base = os.path.join(out, document["date"] + ("-quick" if args.quick else ""))
    paths = report.write(document, base)
    log(f"wrote {', '.join(display([p]) for p in paths)} in {elapsed:.0f} s")
    if run.failures:
        log(f"{len(run.failures)} failure(s):")
        for failure in run.failures:
            log("  " + failure.splitlines()[0])
        log(f"server logs kept in {work}")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
