"""The report of a bench/compare run: one JSON document with everything, and a Markdown page with
the comparison tables (each row with its Ferrite/Redis ratio and its fraction of the echo limit),
the plots, the notes on how to read them, the machine and the exact commands.

Standard library only; the plots come from bench/plots.py when matplotlib is importable.
"""

import datetime
import json
import os
import platform
import subprocess

# How each system is named in tables and plots, in table order.
SYSTEMS = {
    "ferrite": "Ferrite",
    "ferrite-sync": "Ferrite sync",
    "ferrite-async": "Ferrite async",
    "ferrite-resp": "Ferrite RESP",
    "ferrite-poll-on": "Ferrite RESP, poll on",
    "ferrite-poll-off": "Ferrite RESP, poll off",
    "ferrite-metrics-off": "Ferrite RESP, no metrics endpoint",
    "ferrite-metrics-scraped": "Ferrite RESP, metrics scraped",
    "ferrite-cluster": "Ferrite cluster (3 nodes)",
    "ferrite-single": "Ferrite single server",
    "redis": "Redis",
    "redis-everysec": "Redis AOF everysec",
    "redis-always": "Redis AOF always",
    "memcached": "memcached",
    "limit": "limit (echo)",
    "limit-resp": "limit RESP (echo)",
}

# The large-values target: direct transfers of this size and up reach this fraction of the echo's
# bandwidth with async durability.
LARGE_TARGET_FROM_BYTES = 1 << 20
LARGE_TARGET_FRACTION = 0.8
# Durable large puts against the disk's own bandwidth (the probe): direct puts of this size and up
# at the first fraction, smaller ones (from 1 MiB) at the second; at most this many disk bytes per
# value byte; RESP SETs at least this many times Redis appendfsync always.
DURABLE_LARGE_FROM_BYTES = 64 << 20
DURABLE_TARGETS = (0.8, 0.7)
DURABLE_DISK_BYTES_MAX = 1.2
DURABLE_RESP_TIMES_REDIS = 2.0

# The cluster targets: at 64 connections (pipeline 1 and 16), a three-node cluster's durable SETs
# reach this fraction of a single server's and of Redis AOF always's; after a leader's kill -9,
# writes are accepted again within these times (median and p99).
CLUSTER_TARGET_SINGLE = 0.5
CLUSTER_TARGET_ALWAYS = 1.0
FAILOVER_TARGET_MEDIAN_S = 1.0
FAILOVER_TARGET_P99_S = 3.0

# The limit each system's figures are read against: the echo over the same protocol family and
# with the same load generator.
LIMIT_OF = {
    ("ferrite bench", "native"): "limit",
    ("ferrite bench", "resp"): "limit-resp",
    ("redis-benchmark", "resp"): "limit-resp",
}

NOTES = [
    "Placement: {placement}.",
    "Ferrite ran its default configuration: `hstore` pools on the `ssd` backing, every write `sync` "
    "(acknowledged only after its write-ahead log record is on stable storage, group-committed), "
    "one shard except in the shard-scaling scenario. Redis ran three ways: no persistence (`--save '' "
    "--appendonly no`), AOF with `appendfsync everysec`, and AOF with `appendfsync always` (an fsync "
    "before replying; automatic AOF rewrites off so that no point pays for a rewrite the others do "
    "not). The \"÷ Redis\" ratios compare with Redis without persistence, which promises nothing "
    "about a crash: a durable Ferrite put is measured against a volatile Redis SET there; the "
    "durability scenario compares like with like. memcached ran with one worker thread (`-t 1`), as a "
    "Ferrite shard and Redis each serve from one event loop.",
    "Durability: `ferrite bench --workload put` with {durability_key_size}-byte keys and "
    "{durability_value_size}-byte values over {durability_keys} keys, one shard, {durability_seconds} s "
    "per point; N outstanding is min(N, {durability_clients_max}) connections with N / connections "
    "requests in flight each, the same for every system. Redis is driven by the same tool "
    "(`--target resp`). Ferrite sync acknowledges a put after `fdatasync`; Ferrite async when applied "
    "(durable within 10 ms); Redis AOF always fsyncs before replying; Redis without persistence "
    "loses everything on a crash. The many-connections points are driven by redis-benchmark the way "
    "Redis users run: SET only (`-t set`; a GET commits nothing), {durability_value_size}-byte values, "
    "redis-benchmark's 16-byte keys (`key:` and 12 digits) at random over {durability_keys} keys; N "
    "connections (`-c N`) each keep one request in flight, or at pipeline P (`-P P`) a batch of P "
    "commands, against Ferrite RESP (its default pool: sync), Redis AOF always and Redis without "
    "persistence in turn at each point. Puts per fdatasync is Ferrite's own count: its `puts` over "
    "its log's `wal_commits`, both read with `ferrite stats` just before and just after each Ferrite "
    "RESP run (a commit writes one group of records with one `fdatasync` per log segment it "
    "touches: one, or two when it crosses into a new segment).",
    "Polling after a batch: `redis-benchmark -t get` and `-t set` at pipeline 1 (`-P 1`), "
    "{poll_value_size}-byte values, redis-benchmark's 16-byte keys at random over {poll_keys} keys "
    "(`-r {poll_keys}`, every key stored first), {poll_seconds} s per point, at {poll_connections_list} "
    "connections, against Ferrite RESP with polling on (the default configuration, `poll_us = 50`) "
    "and off (`poll_us = 0`, a copy of `ferrite-server --print-default-config` with that line changed, "
    "passed with `--config`), each its own server with one shard, and Redis without persistence (and, "
    "for SET, Redis AOF always: Ferrite's RESP SET is durable, `sync`). The systems take turns at "
    "each point, so a burst of outside load hits all of them alike instead of one system's whole "
    "series. Server CPU is the whole server process's user + system time (every thread: the shard's "
    "event loop and its log sync thread) from /proc/PID/stat, read just before and just after each "
    "measured run (not the calibration run), in clock ticks of 10 ms, over the requests the run "
    "completed. The load generator shares the machine's cores with the servers: {poll_placement}. "
    "Idle CPU is every "
    "server's CPU time over {poll_idle_s} s, starting {poll_idle_settle_s} s after the last request of "
    "a repetition.",
    "Active Data Objects: a one-shard ferrite-server of its own and the `ferrite-ado` plugin hosts it starts "
    "(one per pool, started by the pool's first invocation, stopped when no session has the pool open), "
    "{ado_placement}. "
    "{ado_keys} keys of {ado_key_size} bytes with {ado_value_size}-byte values, {ado_seconds} s per point; N "
    "connections x M in flight is `ferrite bench --clients N --outstanding M`. At each point four runs follow one "
    "another: `--workload get`; `--workload invoke --plugin passthru` (empty payload: the plugin does nothing and "
    "answers nothing, so its ratio to get is what an invocation costs: the shard locks the key, hands the call to "
    "the host over shared memory and waits for its answer); `--workload invoke --plugin counter` (`add 1` on the "
    "8-byte value, pool durability `sync`: the increment is logged and on stable storage before the answer); "
    "`--workload put --durability sync` over the get run's keys, so every put replaces a value as every increment "
    "does. Every run stores its keys first (an invocation run as zeroed values, what create-on-demand would make), "
    "and an invocation run then sends one invocation to start the plugin host before measuring (`host_start` in "
    "the JSON), so no point times a process start.",
    "Restart: a fresh server loads N keys ({restart_key_size}-byte keys, {restart_value_size}-byte values, "
    "async puts, then a pause longer than the commit interval), is killed with SIGKILL and started "
    "again on its data directory; restart time is from the new process's start to its `ready.` line "
    "(checkpoint loaded, log replayed, tables walked), and the key count is checked after. DRAM per "
    "key is the server's resident memory after the load less before it, over N. Log bytes per put "
    "is the shard's `wal_bytes` over its `puts` (records, headers and padding).",
    "Memory per key: for each key count every system is started fresh, loaded, measured and stopped, "
    "so one count's pairs, allocator state and peak do not carry into the next. Resident memory is "
    "the server process's VmRSS from /proc/PID/status (anonymous memory, mapped file pages and "
    "shared memory: a Ferrite `ssd` pool lives in a memfd, so its touched pages count), read before "
    "the load and {memory_settle_s} s after it; bytes per key is the difference over the keys. The "
    "peak is VmHWM read after the load, reset to the current RSS just before the load "
    "(`echo 5 > /proc/PID/clear_refs`) so that it covers the load and not the start-up; the JSON "
    "says whether the reset worked (`peak_reset`). The RESP rows load "
    "{memory_resp_key_size}-byte keys (`key:` and 12 digits) with {memory_value_size}-byte values "
    "through the same loader for both systems: MSETs of {memory_batch} pairs, {memory_in_flight} in "
    "flight on one connection, into Ferrite's default RESP pool (1 GiB, `sync` writes) and Redis "
    "without persistence. The native rows create a pool for exactly N pairs (`ferrite pool create "
    "--size N x ({memory_native_key_size} + {memory_value_size} + 64) bytes rounded up to a MiB "
    "--expected-objects N`, taken before the load's RSS so the pool's own setup counts) and load it "
    "with `ferrite bench --workload get --ops 1` (its preload, async puts); Redis gets the same "
    "{memory_native_key_size}-byte keys through the MSET loader. Redis's `used_memory` counts what "
    "its allocator handed out; its RSS also counts the allocator's free pages and fragmentation.",
    "Large values: one shard, every row driven by `ferrite bench` with one runtime thread "
    "(Redis, without persistence, through `--target resp`: the `redis` crate, the same load generator), "
    "{large_seconds} s per point ({large_seconds_large} s from {large_large_from_label}; at {large_once_from_label} "
    "each run is {large_once_ops} operations, measured once). GiB/s counts the value bytes of completed "
    "operations over the measured phase (ops/s x value size). Ferrite gets inline with `Pool::get_bytes` (the "
    "value stays in the response frame's buffer) and directly with `Pool::get_direct_into_memory` into a "
    "`DirectMemory` of the worker's own, allocated and touched before the clock starts; puts inline with "
    "`Pool::put_with` up to the client's `DIRECT_THRESHOLD_BYTES` (1 MiB) and, past it, with one `put` frame on "
    "a connection of the bench's own (the client would send them directly), directly with "
    "`Pool::put_direct_with`. Each point first stores its keys (`--workload get --ops 1 --keep-pool`), "
    "waits until the Ferrite server is quiet (at most one clock tick of CPU and no byte written over 0.3 s: "
    "the log flushes and checkpoints the load left have finished; they run on the server's CPU when pinned, "
    "and would otherwise land in the measured runs), measures gets of the stored keys (`--no-preload`), waits "
    "again, then measures puts replacing them. "
    "Each size runs on a fresh server (each point from {large_large_from_label}), whose data directory is "
    "deleted after it. Write amplification: the growth of the shard's `wal_bytes` statistic over a put run "
    "(read with `ferrite stats` just before it and once the server is quiet again after it, so the log's tail "
    "and the checkpoints the puts triggered count) divided by the value bytes the run stored, and the server "
    "process's `write_bytes` from /proc/PID/io over the same span (log, checkpoints, and what the filesystem "
    "adds) divided by the same; checkpoints counts the checkpoints taken in that span. The "
    "echo answers a direct read with pieces of a 2 MiB buffer of zeros that stays in the CPU's caches, and "
    "at one request in flight it sleeps between requests (Ferrite polls briefly after a batch, `poll_us`), "
    "so at small sizes Ferrite can pass the echo: there the echo is no limit.",
    "The limit rows come from `ferrite-echo`, which decodes every request like a server and answers "
    "it without storing anything, over the same loopback TCP, at the same concurrency, driven by the "
    "same tool: what protocol plus transport allow. \"÷ limit\" is a row's throughput as a fraction "
    "of its limit: `ferrite bench` rows against the native echo (memcached's text protocol is "
    "compared with that too, as the nearest), redis-benchmark and `--target resp` rows against the "
    "echo's RESP listener. A fraction above 1 means the load generator, not the server, was the "
    "bottleneck: a server that answers a little later lets more requests gather into each write and "
    "read, which costs the single-threaded load generator less per request.",
    "Same tool per comparison: redis-benchmark drives every RESP row of the small-ops and value-size "
    "scenarios (Ferrite RESP, Redis, the RESP echo) and the many-connections rows of the durability "
    "scenario; `ferrite bench` drives the native rows, "
    "memcached, and every YCSB row (native, and `--target resp` through the `redis` crate for "
    "Ferrite RESP and Redis). Ferrite native against Redis in small-ops therefore crosses tools; "
    "Ferrite RESP against Redis does not.",
    "\"Outstanding\" differs between the tools. `ferrite bench --outstanding N` keeps exactly N "
    "requests in flight on one connection (N workers, each sending its next request as soon as its "
    "previous one is answered). `redis-benchmark -c 1 -P N` writes a batch of N commands, waits for "
    "all N replies, then writes the next batch, so between 0 and N are in flight. Its latencies at "
    "N > 1 are per batch (and its percentiles have 1 us resolution); compare the tools' latencies at "
    "1 outstanding, their throughput everywhere.",
    "Keys are {small_key_size} bytes in small-ops and values: redis-benchmark's `key:` and 12 "
    "digits, and zero-padded numbers of the same width in `ferrite bench`. Before any measured "
    "request every store held every key of the key space, so every get hit and every put replaced "
    "a value: RESP stores were loaded with redis-benchmark's exact key names, and each `ferrite "
    "bench` get run stored its keys first (its preload) and kept them for the put run that followed.",
    "YCSB: {ycsb_keys} records of {ycsb_value_size} bytes (YCSB's 10 fields of 100 bytes) under "
    "{ycsb_key_size}-byte keys, {ycsb_clients} connections x {ycsb_outstanding} outstanding, "
    "{ycsb_seconds} s per point after a preload of every record. zipfian is YCSB's scrambled "
    "zipfian (constant 0.99); D reads with YCSB's `latest` distribution unless the row says uniform "
    "or zipfian (the rows here set the distribution explicitly, so D-zipfian is zipfian over the "
    "preloaded records and D-uniform uniform). E (scans) runs natively only: RESP has no ordered "
    "scan. A native scan is one `find` returning up to 100 keys (YCSB's scans read records too).",
    "Value sizes: {values_outstanding} outstanding on one connection; the key count shrinks as values "
    "grow ({values_data_mib} MiB of values per store, between {values_keys_min} and {values_keys_max} "
    "keys). The limit echo answers every get with a value of the measured size.",
    "Shard scaling (MCAS figure 12): ferrite-server with N shards, `ferrite bench --pools "
    "{shards_pools}` spreading the keys over pools whose names route to every shard in turn, "
    "{shards_clients} connections x {shards_outstanding} outstanding. This machine has {nproc} CPUs: "
    "with 2 shards the server's two event loops and the load generator share them, so nothing is "
    "pinned here and the 2-shard figures show contention as much as scaling; MCAS ran one shard per "
    "core with clients on other machines.",
    "The load averages in this report include the benchmark itself: while a point runs, a server "
    "and a load generator keep both CPUs busy, which alone makes a 1-minute load average near 2. "
    "Figures above that, or a busy start, mean other work shared the machine.",
    "Throughput counts completed requests over the measured phase only (no preload). Percentiles "
    "come from HDR histograms with 3 significant digits (`ferrite bench`) or redis-benchmark's own "
    "(1 us resolution).",
    "Every point was measured {repeat} time(s), the repetitions of a scenario one after another, and "
    "each row is its best repetition (its latencies are that repetition's): other work on the machine "
    "only ever lowers a figure, so the best is the closest to what a system does alone. \"spread\" is "
    "how far apart the repetitions were, (best - worst) / best; a large spread marks a point that "
    "interference touched. The JSON keeps every repetition's throughput and the 1-minute load "
    "average when it ran.",
]


def command_output(*argv):
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else None


def machine():
    model = None
    memory_kib = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
        with open("/proc/meminfo", encoding="utf-8") as f:
            memory_kib = next((int(line.split()[1]) for line in f if line.startswith("MemTotal:")), None)
    except OSError:
        pass
    try:
        import matplotlib

        matplotlib_version = matplotlib.__version__
    except ImportError:
        matplotlib_version = None
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": f"{platform.system()} {platform.release()}",
        "memory_gib": round(memory_kib / 1024 / 1024, 1) if memory_kib else None,
        "rustc": command_output("rustc", "--version"),
        "redis_server": command_output("redis-server", "--version"),
        "redis_benchmark": command_output("redis-benchmark", "--version"),
        "memcached": command_output("memcached", "-V"),
        "python": platform.python_version(),
        "matplotlib": matplotlib_version,
    }


def commit(root):
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("BENCH_COMMIT", "unknown")
    dirty = subprocess.run(["git", "-C", root, "diff", "--quiet", "HEAD", "--"], capture_output=True).returncode != 0
    return head.stdout.strip() + (" (with uncommitted changes)" if dirty else "")


def assemble(run, only, elapsed_s):
    """The JSON document of a run."""
    settings = {name: run.settings[name] for name in only}
    today = datetime.date.today().isoformat()
    return {
        "benchmark": "bench/compare",
        "date": today,
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": run.quick,
        "profile": run.profile,
        "placement": "pinned" if run.pinned else "shared",
        "elapsed_s": round(elapsed_s, 1),
        "ferrite_commit": commit(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        "scenarios": only,
        "repeat": run.repeat,
        "settings": settings,
        "machine": machine(),
        "load": run.loads,
        "rows": run.rows,
        "skipped": run.skipped,
        "failures": run.failures,
        "commands": run.commands,
    }


# --- lookups and formatting -------------------------------------------------------------------

def find(rows, scenario, system, **labels):
    for row in rows:
        if row["scenario"] == scenario and row["system"] == system and all(row.get(k) == v for k, v in labels.items()):
            return row
    return None


def rate_of(row):
    return row["ops_per_s"] if row else None


def ratio(numerator, denominator):
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def fmt_rate(value):
    return "-" if value is None else f"{value:,.0f}"


def fmt_ratio(value):
    return "-" if value is None else f"{value:.2f}"


def fmt_us(value):
    return "-" if value is None else f"{value:,.1f}"


def table(header, rows, align=None):
    align = align or ["---:"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def limit_for(row):
    """The limit system a row is read against."""
    protocol = "native" if row["system"] in ("ferrite", "memcached", "limit") else "resp"
    return LIMIT_OF.get((row["tool"], protocol))


def detail_rows(rows, scenario, keys, redis_system="redis", tool=None):
    """Every row of a scenario (of one tool's, when `tool` is given) with its latencies, its ratio
    to Redis and to its limit."""
    out = []
    for row in rows:
        if row["scenario"] != scenario or tool and row["tool"] != tool:
            continue
        labels = {key: row.get(key) for key in keys}
        redis = find(rows, scenario, redis_system, **labels)
        limit_system = limit_for(row)
        limit = find(rows, scenario, limit_system, **labels) if limit_system else None
        out.append([*(row.get(key) for key in keys), SYSTEMS.get(row["system"], row["system"]), row["tool"],
                    fmt_rate(row["ops_per_s"]), fmt_us(row.get("p50_us")), fmt_us(row.get("p99_us")),
                    fmt_us(row.get("p99_9_us")), fmt_us(row.get("max_us")),
                    fmt_ratio(ratio(row["ops_per_s"], rate_of(redis))),
                    fmt_ratio(ratio(row["ops_per_s"], rate_of(limit))), spread(row), row.get("errors", 0)])
    return out


def spread(row):
    """How far the repetitions of a point were apart: (best - worst) / best."""
    runs = row.get("runs_ops_per_s") or []
    if len(runs) < 2 or not max(runs):
        return "-"
    return f"{100.0 * (max(runs) - min(runs)) / max(runs):.0f}%"


DETAIL_HEADER = ["system", "tool", "ops/s", "p50 us", "p99 us", "p99.9 us", "max us", "÷ Redis", "÷ limit", "spread",
                 "errors"]


# --- the Markdown page ------------------------------------------------------------------------

def section_small_ops(doc):
    rows, s = doc["rows"], doc["settings"]["small-ops"]
    systems = ["ferrite", "ferrite-resp", "redis", "redis-everysec", "redis-always", "memcached", "limit", "limit-resp"]
    lines = ["## Small operations", "",
             f"put and get of {s['value_size']}-byte values under {s['key_size']}-byte keys, {s['keys']:,} keys, one "
             f"connection, {s['seconds']} s per point. Ops/s; the ratios compare throughput.", ""]
    body = []
    for op in ("put", "get"):
        for outstanding in s["outstanding"]:
            found = {system: find(rows, "small-ops", system, op=op, outstanding=outstanding) for system in systems}
            r = {system: rate_of(row) for system, row in found.items()}
            body.append([op, outstanding, *(fmt_rate(r[system]) for system in systems),
                         fmt_ratio(ratio(r["ferrite"], r["redis"])), fmt_ratio(ratio(r["ferrite-resp"], r["redis"])),
                         fmt_ratio(ratio(r["ferrite"], r["limit"])), fmt_ratio(ratio(r["ferrite-resp"], r["limit-resp"]))])
    lines += table(["op", "outstanding", *(SYSTEMS[s_] for s_ in systems), "**Ferrite ÷ Redis**",
                    "**Ferrite RESP ÷ Redis**", "Ferrite ÷ limit", "Ferrite RESP ÷ limit RESP"], body,
                   ["---", *["---:"] * (len(systems) + 5)])
    lines += ["", "<details><summary>Every row with its latencies</summary>", ""]
    lines += table(["op", "outstanding", *DETAIL_HEADER], detail_rows(rows, "small-ops", ["op", "outstanding"]),
                   ["---", "---:", "---", "---", *["---:"] * 9])
    lines += ["", "</details>", ""]
    return lines


def section_ycsb(doc):
    rows, s = doc["rows"], doc["settings"]["ycsb"]
    systems = ["ferrite", "ferrite-resp", "redis", "redis-always", "limit", "limit-resp"]
    lines = ["## YCSB core workloads", "",
             f"{s['keys']:,} records of {s['value_size']} B, {s['clients']} connections x {s['outstanding']} "
             f"outstanding, {s['seconds']} s per point, every row driven by `ferrite bench` (native, or "
             "`--target resp` through the `redis` crate). Total ops/s of each workload's mix.", ""]
    body = []
    for distribution in s["distributions"]:
        for letter in s["workloads"]:
            w = letter.upper()
            r = {system: rate_of(find(rows, "ycsb", system, workload=w, distribution=distribution)) for system in systems}
            body.append([w, distribution, *(fmt_rate(r[system]) for system in systems),
                         fmt_ratio(ratio(r["ferrite"], r["redis"])), fmt_ratio(ratio(r["ferrite-resp"], r["redis"])),
                         fmt_ratio(ratio(r["ferrite"], r["limit"]))])
    lines += table(["workload", "keys", *(SYSTEMS[s_] for s_ in systems), "**Ferrite ÷ Redis**",
                    "**Ferrite RESP ÷ Redis**", "Ferrite ÷ limit"], body, ["---", "---", *["---:"] * (len(systems) + 3)])
    lines += ["", "<details><summary>Every row, by kind of operation, with its latencies</summary>", ""]
    detail = []
    for row in rows:
        if row["scenario"] != "ycsb" or row["system"].startswith("limit") and row["distribution"] != s["distributions"][0]:
            continue
        for op, point in row.get("by_op", {}).items():
            detail.append([row["workload"], row["distribution"] if not row["system"].startswith("limit") else "-",
                           SYSTEMS.get(row["system"], row["system"]), op, fmt_rate(point["ops_per_s"]),
                           fmt_us(point.get("p50_us")), fmt_us(point.get("p99_us")), fmt_us(point.get("p99_9_us")),
                           fmt_us(point.get("max_us")), spread(row), point.get("errors", 0)])
    lines += table(["workload", "keys", "system", "op", "ops/s", "p50 us", "p99 us", "p99.9 us", "max us", "spread",
                    "errors"], detail, ["---", "---", "---", "---", *["---:"] * 7])
    lines += ["", "</details>", ""]
    return lines


def section_values(doc):
    rows, s = doc["rows"], doc["settings"]["values"]
    systems = ["ferrite", "redis", "memcached", "limit"]
    lines = ["## Value size", "",
             f"put and get at {s['outstanding']} outstanding on one connection, {s['seconds']} s per point. Ferrite, "
             "memcached and the limit through `ferrite bench`, Redis through redis-benchmark.", ""]
    body = []
    for op in ("put", "get"):
        for size in s["sizes"]:
            r = {system: rate_of(find(rows, "values", system, op=op, value_size=size)) for system in systems}
            mib = None if r["ferrite"] is None else r["ferrite"] * size / (1 << 20)
            body.append([op, size_label(size), *(fmt_rate(r[system]) for system in systems),
                         fmt_ratio(ratio(r["ferrite"], r["redis"])), fmt_ratio(ratio(r["ferrite"], r["limit"])),
                         "-" if mib is None else f"{mib:,.1f}"])
    lines += table(["op", "value", *(SYSTEMS[s_] for s_ in systems), "**Ferrite ÷ Redis**", "Ferrite ÷ limit",
                    "Ferrite MiB/s"], body, ["---", "---:", *["---:"] * (len(systems) + 3)])
    lines += ["", "<details><summary>Every row with its latencies</summary>", ""]
    lines += table(["op", "value", *DETAIL_HEADER], detail_rows(rows, "values", ["op", "value_size"]),
                   ["---", "---:", "---", "---", *["---:"] * 9])
    lines += ["", "</details>", ""]
    return lines


def section_shards(doc):
    rows, s = doc["rows"], doc["settings"]["shards"]
    lines = ["## Shard scaling", "",
             f"{s['value_size']}-byte values, keys spread over {s['pools']} pools covering every shard, "
             f"{s['clients']} connections x {s['outstanding']} outstanding, {s['seconds']} s per point, unpinned.", ""]
    body = []
    for op in s["ops"]:
        base = {system: rate_of(find(rows, "shards", system, op=op, shards=s["shards"][0])) for system in ("ferrite", "limit")}
        for count in s["shards"]:
            r = {system: rate_of(find(rows, "shards", system, op=op, shards=count)) for system in ("ferrite", "limit")}
            body.append([op, count, fmt_rate(r["ferrite"]), fmt_rate(r["limit"]), fmt_ratio(ratio(r["ferrite"], r["limit"])),
                         fmt_ratio(ratio(r["ferrite"], base["ferrite"])), fmt_ratio(ratio(r["limit"], base["limit"]))])
    lines += table(["op", "shards", "Ferrite ops/s", "limit ops/s", "Ferrite ÷ limit",
                    f"Ferrite ÷ {s['shards'][0]} shard", f"limit ÷ {s['shards'][0]} shard"], body,
                   ["---", *["---:"] * 6])
    lines.append("")
    return lines


def section_durability(doc):
    rows, s = doc["rows"], doc["settings"]["durability"]
    systems = ["ferrite-sync", "ferrite-async", "redis-always", "redis"]
    lines = ["## Durable puts", "",
             f"put of {s['value_size']}-byte values under {s['key_size']}-byte keys, one shard, {s['seconds']} s per "
             "point, every system driven by `ferrite bench`. Ops/s and latency (us); the ratios compare Ferrite sync "
             "with each Redis.", ""]
    body = []
    for outstanding in s["outstanding"]:
        found = {system: find(rows, "durability", system, op="put", outstanding=outstanding) for system in systems}
        r = {system: rate_of(row) for system, row in found.items()}
        sync = found["ferrite-sync"] or {}
        always = found["redis-always"] or {}
        body.append([outstanding, *(fmt_rate(r[system]) for system in systems),
                     fmt_us(sync.get("p50_us")), fmt_us(sync.get("p99_us")),
                     fmt_us(always.get("p50_us")), fmt_us(always.get("p99_us")),
                     fmt_ratio(ratio(r["ferrite-sync"], r["redis-always"])),
                     fmt_ratio(ratio(r["ferrite-sync"], r["redis"])),
                     fmt_ratio(ratio(sync.get("p50_us"), always.get("p50_us")))])
    lines += table(["outstanding", "Ferrite sync", "Ferrite async", "Redis AOF always", "Redis (no persistence)",
                    "sync p50", "sync p99", "always p50", "always p99", "sync ÷ always", "sync ÷ Redis",
                    "p50 sync ÷ always"], body)
    lines += ["", "Every point with its latencies:", ""]
    lines += table(["op", "outstanding", *DETAIL_HEADER],
                   detail_rows(rows, "durability", ["op", "outstanding"], tool="ferrite bench"),
                   ["---", "---:", "---", "---", *["---:"] * (len(DETAIL_HEADER) - 2)])
    lines.append("")
    return lines + durability_connections(doc)


def durability_connections(doc):
    """The redis-benchmark points of the durability scenario: many connections, SET only."""
    rows, s = doc["rows"], doc["settings"]["durability"]
    if "connections" in s and "pipelines" in s:
        points = [(clients, pipeline) for clients in s["connections"] for pipeline in s["pipelines"]]
    else:  # a run from before these points existed: whatever it has, most likely nothing
        points = sorted({(row["clients"], row["pipeline"]) for row in rows
                         if row["scenario"] == "durability" and row["tool"] == "redis-benchmark"})
    lines = ["### Durable SET over many connections (redis-benchmark)", ""]
    if not points:
        return lines + ["Not measured: this run is older than these points.", ""]
    systems = ["ferrite-resp", "redis-always", "redis"]
    lines += [f"`redis-benchmark -t set` with {s['value_size']}-byte values over {s['keys']:,} keys, {s['seconds']} s "
              "per point: N connections, each with one SET in flight at pipeline 1 or a batch of P SETs at pipeline "
              "P, the three systems in turn at each point. Ops/s and p50 latency (us; per batch when pipelined); "
              "puts per fdatasync from Ferrite's own counters.", ""]
    body = []
    for clients, pipeline in points:
        found = {system: find(rows, "durability", system, tool="redis-benchmark", op="put", clients=clients,
                              pipeline=pipeline) for system in systems}
        r = {system: rate_of(row) for system, row in found.items()}
        ferrite = found["ferrite-resp"] or {}
        per_sync = ferrite.get("puts_per_fdatasync")
        body.append([clients, pipeline, *(fmt_rate(r[system]) for system in systems),
                     fmt_ratio(ratio(r["ferrite-resp"], r["redis-always"])),
                     fmt_ratio(ratio(r["ferrite-resp"], r["redis"])),
                     *(fmt_us((found[system] or {}).get("p50_us")) for system in systems),
                     "-" if per_sync is None else f"{per_sync:,.1f}"])
    lines += table(["connections", "pipeline", "Ferrite RESP (sync)", "Redis AOF always", "Redis (no persistence)",
                    "Ferrite ÷ always", "Ferrite ÷ Redis", "Ferrite p50", "always p50", "Redis p50",
                    "puts per fdatasync"], body)
    lines += ["", "Every point with its latencies:", ""]
    lines += table(["op", "connections", "pipeline", *DETAIL_HEADER],
                   detail_rows(rows, "durability", ["op", "clients", "pipeline"], tool="redis-benchmark"),
                   ["---", "---:", "---:", "---", "---", *["---:"] * (len(DETAIL_HEADER) - 2)])
    lines.append("")
    return lines


def section_poll(doc):
    """Polling after a batch: Ferrite RESP with polling on and off against Redis, GET and SET at
    pipeline 1, with the servers' CPU per request and when idle."""
    rows, s = doc["rows"], doc["settings"].get("poll")
    lines = ["## Polling after a batch (low-load latency)", ""]
    if not s or not any(row["scenario"] == "poll" for row in rows):
        return lines + ["Not measured: this run is older than this scenario, or every point of it failed.", ""]
    lines += [f"`redis-benchmark -t get` / `-t set`, pipeline 1, {s['value_size']}-byte values over {s['keys']:,} keys "
              f"(every GET hits), {s['seconds']} s per point; N connections each keep one request in flight. Ferrite "
              "RESP with polling after a batch on (`poll_us = 50`, the default) and off (`poll_us = 0`), the systems "
              "in turn at each point. Ops/s, p50 latency (us) and the server process's CPU seconds (user + system, "
              "every thread) per 100,000 requests.", ""]
    for op, test in (("get", "GET"), ("put", "SET")):
        systems = ["ferrite-poll-on", "ferrite-poll-off", "redis"] + (["redis-always"] if op == "put" else [])
        lines += [f"### {test}", ""]
        body = []
        for clients in s["connections"]:
            found = {system: find(rows, "poll", system, tool="redis-benchmark", op=op, clients=clients)
                     for system in systems}
            r = {system: rate_of(row) for system, row in found.items()}
            cells = [clients, *(fmt_rate(r[system]) for system in systems),
                     fmt_ratio(ratio(r["ferrite-poll-on"], r["redis"])),
                     fmt_ratio(ratio(r["ferrite-poll-off"], r["redis"]))]
            if op == "put":
                cells.append(fmt_ratio(ratio(r["ferrite-poll-on"], r["redis-always"])))
            cells.append(fmt_ratio(ratio(r["ferrite-poll-on"], r["ferrite-poll-off"])))
            cells += [fmt_us((found[system] or {}).get("p50_us")) for system in systems]
            cells += [fmt_cpu((found[system] or {}).get("server_cpu_s_per_100k"))
                      for system in ("ferrite-poll-on", "ferrite-poll-off")]
            body.append(cells)
        header = ["connections", "poll on ops/s", "poll off ops/s", "Redis ops/s"]
        if op == "put":
            header.append("Redis always ops/s")
        header += ["**on ÷ Redis**", "off ÷ Redis"]
        if op == "put":
            header.append("**on ÷ always**")
        header += ["on ÷ off", "on p50", "off p50", "Redis p50"]
        if op == "put":
            header.append("always p50")
        header += ["on CPU s / 100k", "off CPU s / 100k"]
        lines += table(header, body)
        lines.append("")
    idle = {}
    for row in rows:
        if row["scenario"] == "poll" and row["tool"] == "idle":
            idle.setdefault(row["system"], []).append(row)
    if idle:
        parts = []
        for system in ("ferrite-poll-on", "ferrite-poll-off", "redis", "redis-always"):
            found = sorted(idle.get(system, []), key=lambda row: row.get("repetition", 0))
            if found:
                figures = ", ".join(f"{row['idle_cpu_s']:.2f}" for row in found)
                parts.append(f"{SYSTEMS.get(system, system)} {figures} s")
        first = next(iter(idle.values()))[0]
        lines += [f"Idle: CPU time each server used over {s.get('idle_s', first.get('idle_s'))} s with no requests, "
                  f"starting {s.get('idle_settle_s')} s after the last request (one figure per repetition; a clock "
                  f"tick is {1 / first.get('clock_ticks_per_s', 100):.2f} s): " + "; ".join(parts) + ".", ""]
    else:
        lines += ["Idle: not measured.", ""]
    lines += ["<details><summary>Every point with its latencies and server CPU</summary>", ""]
    detail = []
    for row in rows:
        if row["scenario"] != "poll" or row["tool"] != "redis-benchmark":
            continue
        redis = find(rows, "poll", "redis", tool="redis-benchmark", op=row["op"], clients=row["clients"])
        detail.append(["GET" if row["op"] == "get" else "SET", row["clients"], SYSTEMS.get(row["system"], row["system"]),
                       fmt_rate(row["ops_per_s"]), fmt_us(row.get("p50_us")), fmt_us(row.get("p99_us")),
                       fmt_us(row.get("max_us")), fmt_ratio(ratio(row["ops_per_s"], rate_of(redis))),
                       fmt_cpu(row.get("server_cpu_s")), fmt_ratio(row.get("server_cpu_share")),
                       fmt_cpu(row.get("server_cpu_s_per_100k")), spread(row), row.get("errors", 0)])
    lines += table(["test", "connections", "system", "ops/s", "p50 us", "p99 us", "max us", "÷ Redis", "server CPU s",
                    "server CPUs busy", "CPU s / 100k", "spread", "errors"], detail,
                   ["---", "---:", "---", *["---:"] * 10])
    lines += ["", "</details>", ""]
    return lines


def fmt_cpu(value):
    return "-" if value is None else f"{value:,.3f}"


def section_metrics(doc):
    """The metrics endpoint's cost: Ferrite RESP scraped every second against no endpoint."""
    rows, s = doc["rows"], doc["settings"].get("metrics")
    lines = ["## Metrics endpoint cost", ""]
    if not s or not any(row["scenario"] == "metrics" for row in rows):
        return lines + ["Not measured: this run is older than this scenario, or every point of it failed.", ""]
    lines += [f"`redis-benchmark` GET and SET, {s['value_size']}-byte values over {s['keys']:,} keys (every key stored "
              f"first), {s['seconds']} s per point, against two Ferrite RESP servers of the default configuration: one "
              f"serving `GET /metrics` and scraped every {s['scrape_s']} s while measured, one without the endpoint; "
              "the two in turn at each point. Shards count every request either way; the scrape is what differs.", ""]
    body = []
    for clients in s["connections"]:
        for pipeline in s["pipelines"]:
            for op, test in (("get", "GET"), ("put", "SET")):
                off = find(rows, "metrics", "ferrite-metrics-off", tool="redis-benchmark", op=op, clients=clients,
                           pipeline=pipeline)
                on = find(rows, "metrics", "ferrite-metrics-scraped", tool="redis-benchmark", op=op, clients=clients,
                          pipeline=pipeline)
                body.append([test, clients, pipeline, fmt_rate(rate_of(off)), fmt_rate(rate_of(on)),
                             f"**{fmt_ratio(ratio(rate_of(on), rate_of(off)))}**", (on or {}).get("scrapes", "-"),
                             fmt_us((off or {}).get("p50_us")), fmt_us((on or {}).get("p50_us"))])
    lines += table(["test", "connections", "pipeline", "no endpoint ops/s", "scraped ops/s", "scraped ÷ none",
                    "scrapes", "none p50", "scraped p50"], body)
    return lines + [""]


def section_ado(doc):
    """Active Data Objects: passthru invocations against gets, counter increments against durable
    puts, at each point of connections x requests in flight."""
    rows, s = doc["rows"], doc["settings"].get("ado")
    lines = ["## Active Data Objects", ""]
    if not s or not any(row["scenario"] == "ado" for row in rows):
        return lines + ["Not measured: this run is older than this scenario, or every point of it failed.", ""]
    points = [(1, n) for n in s["in_flight"]] + [(c, 1) for c in s["connections"]]
    lines += [f"One shard, {s['keys']:,} keys, {s['value_size']}-byte values, {s['seconds']} s per point, every row "
              "driven by `ferrite bench`. Ops/s and latency (us).", ""]
    comparisons = [
        ("Invocations against gets", ("get", None, "get"), ("invoke", "passthru", "passthru"), "**passthru ÷ get**"),
        ("Counter increments against durable puts (both sync)", ("put", None, "put"), ("invoke", "counter", "counter"),
         "**counter ÷ put**"),
    ]
    for title, (base_op, base_plugin, base_name), (op, plugin, name), ratio_header in comparisons:
        body = []
        for clients, outstanding in points:
            labels = dict(clients=clients, outstanding=outstanding)
            base = find(rows, "ado", "ferrite", op=base_op, plugin=base_plugin, **labels) or {}
            measured = find(rows, "ado", "ferrite", op=op, plugin=plugin, **labels) or {}
            body.append([clients, outstanding, clients * outstanding, fmt_rate(measured.get("ops_per_s")),
                         fmt_rate(base.get("ops_per_s")),
                         fmt_ratio(ratio(measured.get("ops_per_s"), base.get("ops_per_s"))),
                         fmt_us(measured.get("p50_us")), fmt_us(measured.get("p99_us")),
                         fmt_us(base.get("p50_us")), fmt_us(base.get("p99_us"))])
        lines += [f"### {title}", ""]
        lines += table(["connections", "in flight each", "in flight", f"{name} ops/s", f"{base_name} ops/s",
                        ratio_header, f"{name} p50", f"{name} p99", f"{base_name} p50", f"{base_name} p99"], body)
        lines.append("")
    lines += ["<details><summary>Every point with its latencies</summary>", ""]
    detail = []
    for row in rows:
        if row["scenario"] != "ado":
            continue
        host_start = (row.get("host_start") or {}).get("elapsed_ms")
        detail.append([row["op"] if not row.get("plugin") else f"invoke {row['plugin']}", row["clients"],
                       row["outstanding"], fmt_rate(row["ops_per_s"]), fmt_us(row.get("p50_us")),
                       fmt_us(row.get("p99_us")), fmt_us(row.get("p99_9_us")), fmt_us(row.get("max_us")),
                       "-" if host_start is None else f"{host_start:,.1f}", spread(row), row.get("errors", 0)])
    lines += table(["op", "connections", "in flight each", "ops/s", "p50 us", "p99 us", "p99.9 us", "max us",
                    "host start ms", "spread", "errors"], detail, ["---", *["---:"] * 10])
    lines += ["", "</details>", ""]
    return lines


def nearest_rank(values, percent):
    """The nearest-rank percentile of `values`: a value that was measured, never an interpolation
    (with fewer than 100 values, p99 is the largest)."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(0, min(len(ordered) - 1, -(-len(ordered) * percent // 100) - 1))]


def fmt_s(value):
    return "-" if value is None else f"{value:.3f}"


def section_cluster(doc):
    """The cluster scenario: durable SETs against a three-node cluster, a single server and Redis
    AOF always with what bounds each point, the targets, and the failover times."""
    rows, s = doc["rows"], doc["settings"].get("cluster")
    lines = ["## Cluster", ""]
    if not s or not any(row["scenario"] == "cluster" for row in rows):
        return lines + ["Not measured: this run is older than this scenario, or every point of it failed.", ""]
    placement = ("Every server process (the cluster's three nodes included) ran on CPU 0, redis-benchmark on CPU 1: "
                 "each system had one CPU, which the cluster's nodes shared." if doc["placement"] == "pinned" else
                 "Nothing was pinned: the servers and redis-benchmark shared the CPUs.")
    lines += [f"`redis-benchmark -t set -d {s['value_size']} -r {s['keys']}`, {s['seconds']} s per point, against: a "
              f"{s['nodes']}-node cluster on loopback (`ferrite cluster local`, one shard per node, so one Raft group; "
              "redis-benchmark on its leader's RESP port, which owns every slot), a single server (no cluster mode) "
              "and Redis AOF `always`, all `sync`, in turn at each point, each started for the repetition and "
              f"stopped at its end. {placement} Ops/s and p50 latency (us; per batch when pipelined).", ""]
    systems = ["ferrite-cluster", "ferrite-single", "redis-always"]
    body, met = [], []
    for clients, pipeline in s["points"]:
        found = {system: find(rows, "cluster", system, tool="redis-benchmark", clients=clients, pipeline=pipeline)
                 for system in systems}
        r = {system: rate_of(row) for system, row in found.items()}
        vs_single = ratio(r["ferrite-cluster"], r["ferrite-single"])
        vs_always = ratio(r["ferrite-cluster"], r["redis-always"])
        if clients >= 64:
            met.append((clients, pipeline, vs_single, vs_always))
        body.append([clients, pipeline, *(fmt_rate(r[system]) for system in systems),
                     f"**{fmt_ratio(vs_single)}**", f"**{fmt_ratio(vs_always)}**",
                     *(fmt_us((found[system] or {}).get("p50_us")) for system in systems)])
    lines += table(["connections", "pipeline", "cluster ops/s", "single ops/s", "Redis always ops/s",
                    "cluster ÷ single", "cluster ÷ always", "cluster p50", "single p50", "always p50"], body)
    lines.append("")
    for clients, pipeline, vs_single, vs_always in met:
        verdict = ("met" if vs_single is not None and vs_always is not None and vs_single >= CLUSTER_TARGET_SINGLE
                   and vs_always >= CLUSTER_TARGET_ALWAYS else "**not met**")
        lines.append(f"- Target at {clients} connections, pipeline {pipeline} (cluster ≥ {CLUSTER_TARGET_SINGLE}x "
                     f"single, ≥ {CLUSTER_TARGET_ALWAYS}x Redis always): {verdict} ({fmt_ratio(vs_single)}, "
                     f"{fmt_ratio(vs_always)}).")
    lines += ["", "What bounds each point: the server processes' CPU seconds per second of the run (all three nodes "
              "for the cluster; 1.00 is all of CPU 0 when pinned), log commits per second (each one `fdatasync`, two "
              "when a commit crosses into a new log segment; the leader's, and all nodes' together), and the disk's "
              "flush requests per second and their mean time (/proc/diskstats: every process on the machine, Redis's "
              "fsyncs included).", ""]
    detail = []
    for clients, pipeline in s["points"]:
        for system in systems:
            row = find(rows, "cluster", system, tool="redis-benchmark", clients=clients, pipeline=pipeline)
            if not row:
                continue
            detail.append([clients, pipeline, SYSTEMS.get(system, system), fmt_rate(row["ops_per_s"]),
                           fmt_us(row.get("p50_us")), fmt_us(row.get("p99_us")), fmt_ratio(row.get("server_cpu_busy")),
                           fmt_rate(row.get("fdatasyncs_per_s")), fmt_rate(row.get("fdatasyncs_per_s_all_nodes")),
                           "-" if row.get("puts_per_fdatasync") is None else f"{row['puts_per_fdatasync']:,.1f}",
                           fmt_rate(row.get("disk_flushes_per_s")), fmt_cpu(row.get("disk_flush_ms_mean")),
                           spread(row), row.get("errors", 0)])
    lines += table(["connections", "pipeline", "system", "ops/s", "p50 us", "p99 us", "server CPUs busy",
                    "fdatasyncs/s (leader)", "fdatasyncs/s (all nodes)", "puts per fdatasync", "disk flushes/s",
                    "mean flush ms", "spread", "errors"], detail, ["---:", "---:", "---", *["---:"] * 11])
    lines.append("")
    rounds = sorted((row for row in rows if row["scenario"] == "cluster" and row["tool"] == "failover"),
                    key=lambda row: row["round"])
    lines += ["### Failover", ""]
    if not rounds:
        return lines + ["Not measured (the failovers run in the first repetition; see the failures below).", ""]
    lines += [f"{len(rounds)} rounds of {s['failovers']} asked for, under a light write load (one SET at a time, a new "
              f"key every {s['write_interval_s']} s, through RESP, following `-MOVED`, trying the next node on a "
              "refused or broken connection or `-CLUSTERDOWN`): kill -9 of group 0's leader by its pid, then the time "
              f"until the survivors agree on a new leader (`ferrite --json cluster status` on a survivor every "
              f"{s['poll_s']} s, the time its answer arrived) and until a SET sent after the kill is acknowledged. "
              "The killed node is then started again from its command line and waited for until it is back in sync "
              f"(at most {s['max_lag']} entries behind). p99 is nearest-rank: with {len(rounds)} rounds, the "
              f"{'largest' if len(rounds) < 100 else f'{-(-len(rounds) * 99 // 100)}th'}.", ""]
    body = []
    for label, key in (("leader agreed", "leader_agreed_s"), ("writes accepted", "writes_accepted_s"),
                       ("killed node back in sync, after its restart", "resync_s")):
        values = [row[key] for row in rounds if row.get(key) is not None]
        body.append([label, fmt_s(nearest_rank(values, 50)), fmt_s(nearest_rank(values, 99)),
                     fmt_s(max(values) if values else None), fmt_s(min(values) if values else None)])
    lines += table(["seconds after the kill", "median", "p99", "max", "min"], body, ["---", *["---:"] * 4])
    writes = [row["writes_accepted_s"] for row in rounds]
    median, p99 = nearest_rank(writes, 50), nearest_rank(writes, 99)
    verdict = "met" if median <= FAILOVER_TARGET_MEDIAN_S and p99 <= FAILOVER_TARGET_P99_S else "**not met**"
    lines += ["", f"- Target (writes accepted again ≤ {FAILOVER_TARGET_MEDIAN_S} s median, "
              f"≤ {FAILOVER_TARGET_P99_S} s "
              f"p99): {verdict} ({fmt_s(median)} s, {fmt_s(p99)} s).", ""]
    return lines


def section_restart(doc):
    rows, s = doc["rows"], doc["settings"]["restart"]
    lines = ["## Restart, memory and log traffic", "",
             f"{s['key_size']}-byte keys, {s['value_size']}-byte values, one shard, one pool sized for the keys.", ""]
    body = []
    for keys in s["keys"]:
        row = find(rows, "restart", "ferrite-sync", keys=keys)
        if not row:
            body.append([f"{keys:,}", "-", "-", "-", "-", "-"])
            continue
        body.append([f"{keys:,}", f"{row['restart_s']:.2f}", f"{row['dram_bytes_per_key']:,.0f}",
                     f"{row['wal_bytes_per_put']:,.0f}", fmt_rate(row["ops_per_s"]), row.get("checkpoints", "-")])
    lines += table(["keys", "restart after kill -9 (s)", "DRAM bytes per key", "log bytes per put",
                    "load ops/s (async)", "checkpoints during load"], body)
    lines.append("")
    return lines


def section_memory(doc):
    rows, s = doc["rows"], doc["settings"].get("memory")
    lines = ["## Memory per key", ""]
    if not s or not any(row["scenario"] == "memory" for row in rows):
        return lines + ["Not measured: this run is older than this scenario, or every point of it failed.", ""]
    lines += [f"{s['value_size']}-byte values; every system started fresh for each key count, loaded, measured and "
              "stopped. Bytes per key: resident memory (VmRSS) after the load less before it, over the keys; "
              "Redis also by its own `used_memory`. Peak ÷ after: the highest resident memory during the load "
              "(VmHWM) over the resident memory after it.", ""]
    paths = [("resp", f"RESP: Ferrite's default pool and Redis, {s['resp_key_size']}-byte keys, the same pipelined "
                      f"MSETs ({s['batch']} pairs each, {s['in_flight']} in flight)", "ferrite-resp", s["resp_key_size"]),
             ("native", f"Native: a Ferrite pool sized for exactly the keys ({s['native_key_size']}-byte keys, loaded by "
                        "`ferrite bench`), and Redis with the same keys through the MSET loader", "ferrite",
              s["native_key_size"])]
    listings = []
    for path, title, system, key_size in paths:
        lines += [f"### {title}", ""]
        body = []
        for keys in s["keys"]:
            ferrite = find(rows, "memory", system, keys=keys, path=path)
            redis = find(rows, "memory", "redis", keys=keys, path=path)
            f_bpk = ferrite and ferrite.get("bytes_per_key")
            r_rss = redis and redis.get("bytes_per_key")
            r_used = redis and redis.get("used_memory_bytes_per_key")
            body.append([f"{keys:,}", fmt_bytes(f_bpk), fmt_ratio(ferrite and ferrite.get("peak_over_after")),
                         fmt_mib(ferrite and ferrite.get("rss_after")), fmt_bytes(r_used), fmt_bytes(r_rss),
                         fmt_ratio(redis and redis.get("peak_over_after")),
                         fmt_ratio(ratio(f_bpk, r_rss)), fmt_ratio(ratio(f_bpk, r_used)),
                         fmt_rate(ferrite and ferrite.get("ops_per_s")), fmt_rate(redis and redis.get("ops_per_s"))])
            if ferrite:
                listings.append((path, keys, ferrite))
        lines += table(["keys", "Ferrite bytes/key", "Ferrite peak ÷ after", "Ferrite RSS after (MiB)",
                        "Redis bytes/key (used_memory)", "Redis bytes/key (RSS)", "Redis peak ÷ after",
                        "**Ferrite ÷ Redis (RSS)**", "Ferrite ÷ Redis (used_memory)", "Ferrite load keys/s",
                        "Redis load keys/s"], body)
        lines.append("")
    if listings:
        pool_fields = []
        for _, _, row in listings:
            for name in (row.get("pool") or {}):
                if name not in pool_fields and name not in ("shard", "open_count"):
                    pool_fields.append(name)
        stat_fields = ["wal_record_bytes_max", "wal_pending_bytes_max", "wal_buffer_bytes", "checkpoints"]
        stat_fields = [name for name in stat_fields if any(name in (row.get("stats") or {}) for _, _, row in listings)]
        lines += ["### Ferrite's pool listing and shard statistics after the load", "",
                  "`ferrite pool list --json` (every number this build reports for the pool) and `ferrite stats` "
                  "(the shard's log figures), read after each load.", ""]
        body = []
        for path, keys, row in listings:
            pool, stats = row.get("pool") or {}, row.get("stats") or {}
            body.append([path, f"{keys:,}", *(fmt_number(pool.get(name)) for name in pool_fields),
                         *(fmt_number(stats.get(name)) for name in stat_fields)])
        lines += table(["path", "keys", *(f"pool {name}" for name in pool_fields), *stat_fields], body,
                       ["---", *["---:"] * (1 + len(pool_fields) + len(stat_fields))])
        lines.append("")
    return lines


def cpu_columns(row):
    """The server's CPU over a durable put run: its share of the wall time, and value GiB per CPU
    second (what one CPU could carry at that cost)."""
    cpu, stored = row.get("server_cpu_s"), row.get("value_bytes")
    ops, rate = row.get("ops"), row.get("ops_per_s")
    if not cpu or not stored or not ops or not rate:
        return ["-", "-"]
    return [f"{cpu / (ops / rate):.2f}", f"{stored / (1 << 30) / cpu:.3f}"]


def durable_large_tables(rows, gib, fmt_gib):
    """The durable large puts against the disk probe, and the RESP SETs against Redis always."""
    lines = []
    probes = [row for row in rows if row["scenario"] == "large-values-disk"]
    disk = max((gib(row) for row in probes), default=None)
    per_value = {}
    for row in rows:
        if row["scenario"] == "large-values-disk-per-value":
            per_value[row["value_size"]] = max(per_value.get(row["value_size"], 0), gib(row))
    durable = sorted((row for row in rows if row["scenario"] == "large-values-durable"),
                     key=lambda row: (row["value_size"], row["phase"] != "fresh"))
    if probes and durable:
        runs = ", ".join(f"{gib(row):.3f}" for row in sorted(probes, key=lambda row: row["attempt"]))
        lines += [f"### Durable direct puts against the disk ({probes[0]['tool']}: {runs} GiB/s, best {disk:.3f})",
                  "",
                  f"Sync direct puts on a fresh one-shard server, one connection, one put at a time, then as many "
                  f"again on the same server once it has run a while. Targets: ≥ {DURABLE_TARGETS[0]} of the disk "
                  f"from {size_label(DURABLE_LARGE_FROM_BYTES)}, ≥ {DURABLE_TARGETS[1]} below; at most "
                  f"{DURABLE_DISK_BYTES_MAX} disk bytes per value byte (the server's /proc/PID/io `write_bytes` over "
                  "the run and its settling ÷ value bytes stored). Checkpoint pages: pages the run's checkpoints "
                  "copied; held: log bytes kept for the last checkpoint at the end. Server CPU: the server "
                  "process's CPU time during the puts (all its threads) ÷ their wall time; on one CPU (pinned) "
                  "near 1 means the puts were bound by that CPU, and value GiB ÷ server CPU seconds is the "
                  "most one CPU could carry. Disk, a sync per value: the same disk written with an fdatasync "
                  "after each value of the row's size (best of the probes), the most one put at a time, each "
                  "durable before the next, can get from it; its ÷ disk is where the target is out of reach "
                  "of any store on this disk.", ""]
        body = []
        for row in durable:
            target = DURABLE_TARGETS[0] if row["value_size"] >= DURABLE_LARGE_FROM_BYTES else DURABLE_TARGETS[1]
            fraction = ratio(gib(row), disk)
            per_byte = row.get("disk_bytes_per_value_byte")
            body.append([size_label(row["value_size"]), row["phase"], fmt_number(row.get("value_bytes")),
                         fmt_gib(gib(row)), f"**{fmt_ratio(fraction)}**",
                         "-" if fraction is None else ("yes" if fraction >= target else "**no**") + f" (≥ {target})",
                         fmt_gib(per_value.get(row["value_size"])),
                         fmt_ratio(ratio(per_value.get(row["value_size"]), disk)),
                         fmt_ratio(ratio(gib(row), per_value.get(row["value_size"]))),
                         f"**{fmt_number(per_byte)}**",
                         "-" if per_byte is None else "yes" if per_byte <= DURABLE_DISK_BYTES_MAX else "**no**",
                         fmt_number(row.get("wal_bytes")), fmt_number(row.get("checkpoints")),
                         fmt_number(row.get("checkpoint_pages")), fmt_number(row.get("wal_held_bytes")),
                         *cpu_columns(row), fmt_us(row.get("p50_us")), fmt_us(row.get("p99_us"))])
        lines += table(["value", "server", "value bytes", "put GiB/s", "÷ disk", "target",
                        "disk, a sync per value GiB/s", "its ÷ disk", "put ÷ it", "disk bytes / value byte",
                        f"≤ {DURABLE_DISK_BYTES_MAX}", "log bytes", "checkpoints", "checkpoint pages", "held bytes",
                        "server CPU", "GiB per CPU s", "p50 us", "p99 us"], body,
                       ["---:", "---", "---:", "---:", "---:", "---", "---:", "---:", "---:", "---:", "---",
                        *["---:"] * 8])
        lines.append("")
    resp = [row for row in rows if row["scenario"] == "large-values-resp"]
    if resp:
        body = []
        for size in sorted({row["value_size"] for row in resp}):
            ferrite = gib(find(rows, "large-values-resp", "ferrite-sync", op="put", value_size=size))
            redis = gib(find(rows, "large-values-resp", "redis-always", op="put", value_size=size))
            times = ratio(ferrite, redis)
            disk_rate = per_value.get(size)
            body.append([size_label(size), fmt_gib(ferrite), fmt_gib(redis), f"**{fmt_ratio(times)}**",
                         "-" if times is None else "yes" if times >= DURABLE_RESP_TIMES_REDIS else "**no**",
                         fmt_gib(disk_rate), fmt_ratio(ratio(ferrite, disk_rate)), fmt_ratio(ratio(redis, disk_rate)),
                         fmt_ratio(ratio(disk_rate, redis))])
        lines += ["### Durable SETs through RESP against Redis appendfsync always", "",
                  "`ferrite bench --target resp --workload put`, one connection, one SET at a time; Ferrite's RESP "
                  "pool is sync (a SET is answered once durable), Redis runs with `appendfsync always`. Disk, a "
                  "sync per value: the disk probe with an fdatasync after each value of the row's size; disk ÷ "
                  "Redis is the most any store could be times Redis on this disk, one SET at a time.", ""]
        lines += table(["value", "Ferrite GiB/s", "Redis always GiB/s", "Ferrite ÷ Redis",
                        f"≥ {DURABLE_RESP_TIMES_REDIS}", "disk, a sync per value GiB/s", "Ferrite ÷ disk",
                        "Redis ÷ disk", "disk ÷ Redis"], body,
                       ["---:", "---:", "---:", "---:", "---", "---:", "---:", "---:", "---:"])
        lines.append("")
    return lines


def section_large_values(doc):
    """Large values: throughput by size against the echo and Redis, the target, what sync costs,
    write amplification, the inline/direct crossover and the small-get probe."""
    rows, s = doc["rows"], doc["settings"].get("large-values")
    lines = ["## Large values", ""]
    if not s or not any(row["scenario"] == "large-values" for row in rows):
        return lines + ["Not measured: this run is older than this scenario, or every point of it failed.", ""]

    def gib(row):
        value = (row or {}).get("bytes_per_s")
        return None if value is None else value / (1 << 30)

    def fmt_gib(value):
        return "-" if value is None else f"{value:.3f}"

    def get(system, op, transfer, size, clients=1, outstanding=1):
        return find(rows, "large-values", system, op=op, transfer=transfer, value_size=size, clients=clients,
                    outstanding=outstanding)

    lines += durable_large_tables(rows, gib, fmt_gib)
    sizes = sorted({row["value_size"] for row in rows if row["scenario"] == "large-values"})
    main_sizes = [size for size in s["sizes"] if size in sizes]
    lines += ["Value bytes per second (GiB/s), one shard, every row driven by `ferrite bench`; \"echo\" is the "
              "loopback limit (`ferrite-echo`) over the same transfer, Redis runs without persistence "
              "(`--target resp`). Ratios divide GiB/s.", ""]
    columns = [("ferrite-async", "inline"), ("ferrite-sync", "inline"), ("ferrite-async", "direct"),
               ("ferrite-sync", "direct"), ("limit", "inline"), ("limit", "direct"), ("redis", "resp")]
    header = ["value", "op", "inline async", "inline sync", "direct async", "direct sync", "echo inline",
              "echo direct", "Redis", "**direct async ÷ echo**", "direct sync ÷ echo", "inline async ÷ echo",
              "direct async ÷ Redis", "inline async ÷ Redis"]
    for clients in sorted({row["clients"] for row in rows if row["scenario"] == "large-values"}):
        body = []
        for size in main_sizes:
            for op in ("put", "get"):
                g = {column: gib(get(*column[:1], op, column[1], size, clients)) for column in columns}
                if not any(value is not None for value in g.values()):
                    continue
                body.append([size_label(size), op, *(fmt_gib(g[column]) for column in columns),
                             f"**{fmt_ratio(ratio(g[('ferrite-async', 'direct')], g[('limit', 'direct')]))}**",
                             fmt_ratio(ratio(g[("ferrite-sync", "direct")], g[("limit", "direct")])),
                             fmt_ratio(ratio(g[("ferrite-async", "inline")], g[("limit", "inline")])),
                             fmt_ratio(ratio(g[("ferrite-async", "direct")], g[("redis", "resp")])),
                             fmt_ratio(ratio(g[("ferrite-async", "inline")], g[("redis", "resp")]))])
        if not body:
            continue
        shape = "one connection" if clients == 1 else f"{clients} connections"
        lines += [f"### Throughput by value size, {shape}, one request in flight each (GiB/s)", ""]
        lines += table(header, body, ["---:", "---", *["---:"] * (len(header) - 2)])
        lines.append("")

    # The target: direct, async, 1 MiB and up, every shape measured on one connection.
    verdicts = []
    body = []
    for size in sizes:
        if size < LARGE_TARGET_FROM_BYTES:
            continue
        for outstanding in sorted({row["outstanding"] for row in rows if row["scenario"] == "large-values"}):
            for op in ("put", "get"):
                ferrite = gib(get("ferrite-async", op, "direct", size, 1, outstanding))
                echo = gib(get("limit", op, "direct", size, 1, outstanding))
                fraction = ratio(ferrite, echo)
                if fraction is None:
                    continue
                met = fraction >= LARGE_TARGET_FRACTION
                verdicts.append(met)
                body.append([size_label(size), outstanding, op, fmt_gib(ferrite), fmt_gib(echo),
                             f"**{fraction:.2f}**", "yes" if met else "**no**"])
    if body:
        overall = "met" if all(verdicts) else f"not met ({verdicts.count(False)} of {len(verdicts)} points below)"
        lines += [f"### Target: direct transfers from {size_label(LARGE_TARGET_FROM_BYTES)} reach "
                  f"{LARGE_TARGET_FRACTION:.0%} of loopback bandwidth with async durability: {overall}", ""]
        lines += table(["value", "in flight", "op", "Ferrite direct async GiB/s", "echo direct GiB/s",
                        "Ferrite ÷ echo", f"≥ {LARGE_TARGET_FRACTION:.2f}"], body,
                       ["---:", "---:", "---", "---:", "---:", "---:", "---"])
        lines.append("")

    # What sync costs, and the log's write amplification, on every Ferrite put point.
    body = []
    for row in sorted((r for r in rows if r["scenario"] == "large-values" and r["op"] == "put"
                       and r["system"].startswith("ferrite")),
                      key=lambda r: (r["value_size"], r["clients"], r["outstanding"], r["transfer"], r["system"])):
        durability = row["system"].split("-", 1)[1]
        other = get("ferrite-async", "put", row["transfer"], row["value_size"], row["clients"], row["outstanding"])
        cost = ratio(gib(row), gib(other)) if durability == "sync" else None
        body.append([size_label(row["value_size"]), f"{row['clients']} x {row['outstanding']}", row["transfer"],
                     durability, fmt_gib(gib(row)), "-" if cost is None else fmt_ratio(cost),
                     fmt_us(row.get("p50_us")), fmt_us(row.get("p99_us")), fmt_number(row.get("value_bytes")),
                     fmt_number(row.get("wal_bytes_per_value_byte")), fmt_number(row.get("disk_bytes_per_value_byte")),
                     fmt_number(row.get("checkpoints")), fmt_number(row.get("wal_commits"))])
    if body:
        lines += ["### Puts: what sync costs, and bytes written per value byte", "",
                  "Every Ferrite put point. Sync ÷ async compares GiB/s at the same size, shape and transfer. Log "
                  "bytes per value byte: growth of the shard's `wal_bytes` over the run ÷ value bytes stored; disk "
                  "bytes per value byte: the server process's `write_bytes` (/proc/PID/io: log, checkpoints and the "
                  "filesystem's own writes) over the run ÷ the same. Checkpoints and log commits taken during the run.",
                  ""]
        lines += table(["value", "connections x in flight", "transfer", "durability", "put GiB/s", "sync ÷ async",
                        "p50 us", "p99 us", "value bytes stored", "log bytes / value byte", "disk bytes / value byte",
                        "checkpoints", "log commits"], body, ["---:", "---:", "---", "---", *["---:"] * 9])
        lines.append("")

    # The crossover.
    body = []
    for size in s["crossover_sizes"]:
        for outstanding in s["crossover_outstanding"]:
            for op in ("put", "get"):
                fi = gib(get("ferrite-async", op, "inline", size, 1, outstanding))
                fd = gib(get("ferrite-async", op, "direct", size, 1, outstanding))
                ei = gib(get("limit", op, "inline", size, 1, outstanding))
                ed = gib(get("limit", op, "direct", size, 1, outstanding))
                if fi is None and fd is None:
                    continue
                faster = "-" if fi is None or fd is None else ("direct" if fd > fi else "inline")
                body.append([size_label(size), outstanding, op, fmt_gib(fi), fmt_gib(fd),
                             f"**{fmt_ratio(ratio(fd, fi))}**", faster, fmt_gib(ei), fmt_gib(ed),
                             fmt_ratio(ratio(ed, ei))])
    if body:
        lines += ["### Inline against direct (async, one connection)", "",
                  "GiB/s with one request in flight and with several (`--outstanding`). Direct ÷ inline above 1: "
                  "direct is faster there. The echo columns show the same comparison with no store behind the "
                  "protocol.", ""]
        lines += table(["value", "in flight", "op", "Ferrite inline", "Ferrite direct", "direct ÷ inline", "faster",
                        "echo inline", "echo direct", "echo direct ÷ inline"], body,
                       ["---:", "---:", "---", "---:", "---:", "---:", "---", "---:", "---:", "---:"])
        lines.append("")

    # The probe.
    probe = {row["beside"]: row for row in rows if row["scenario"] == "large-values-probe" and row["op"] == "get"
             and row.get("beside") != "loop"}
    loops = {(row["system"], row["op"]): row for row in rows
             if row["scenario"] == "large-values-probe" and row.get("beside") == "loop"}
    if probe:
        loop_size = size_label(s["probe_loop_size"])
        lines += [f"### Small gets beside transfers of {loop_size}", "",
                  f"{s['probe_value_size']}-byte gets, one connection, one at a time, {s['probe_seconds']} s, on a "
                  f"one-shard server: idle, then while another connection of the same shard runs a loop of {loop_size} "
                  "direct puts (async), then of direct gets. The control rows run the same loops against the echo "
                  "instead (its own process on the server's CPU): the same contention for the CPUs, no shard "
                  "shared. Latency in us.", ""]
        body = []
        for beside, title, loop_key in (
                ("idle", "idle server", None),
                ("put loop", f"beside {loop_size} direct puts, same shard", ("ferrite", "put")),
                ("get loop", f"beside {loop_size} direct gets, same shard", ("ferrite", "get")),
                ("put loop on echo", f"control: {loop_size} direct puts to the echo", ("limit", "put")),
                ("get loop on echo", f"control: {loop_size} direct gets from the echo", ("limit", "get"))):
            row = probe.get(beside)
            if not row:
                continue
            loop = loops.get(loop_key) if loop_key else None
            body.append([title, fmt_rate(row["ops_per_s"]), fmt_us(row.get("p50_us")), fmt_us(row.get("p90_us")),
                         fmt_us(row.get("p99_us")), fmt_us(row.get("p99_9_us")), fmt_us(row.get("max_us")),
                         "-" if loop is None else fmt_gib(gib(loop)), row.get("errors", 0)])
        lines += table(["probe", "gets/s", "p50", "p90", "p99", "p99.9", "max", "loop GiB/s", "errors"], body,
                       ["---", *["---:"] * 8])
        lines.append("")

    lines += ["<details><summary>Every point with its latencies</summary>", ""]
    detail = []
    for row in sorted((r for r in rows if r["scenario"] == "large-values"),
                      key=lambda r: (r["value_size"], r["clients"], r["outstanding"], r["op"], r["system"],
                                     r["transfer"])):
        detail.append([size_label(row["value_size"]), f"{row['clients']} x {row['outstanding']}", row["op"],
                       SYSTEMS.get(row["system"], row["system"]), row["transfer"], fmt_gib(gib(row)),
                       fmt_rate(row["ops_per_s"]), fmt_us(row.get("p50_us")), fmt_us(row.get("p99_us")),
                       fmt_us(row.get("p99_9_us")), fmt_us(row.get("max_us")), spread(row), row.get("errors", 0)])
    lines += table(["value", "connections x in flight", "op", "system", "transfer", "GiB/s", "ops/s", "p50 us",
                    "p99 us", "p99.9 us", "max us", "spread", "errors"], detail,
                   ["---:", "---:", "---", "---", "---", *["---:"] * 8])
    lines += ["", "</details>", ""]
    return lines


def fmt_bytes(value):
    return "-" if value is None else f"{value:,.1f}"


def fmt_mib(value):
    return "-" if value is None else f"{value / (1 << 20):,.1f}"


def fmt_number(value):
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.3f}"
    return f"{value:,.0f}"


def size_label(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def markdown(doc, plots):
    host = doc["machine"]
    settings = doc["settings"]
    loads = ", ".join(f"{entry['when']}: {entry['loadavg'][0]:.2f}" for entry in doc["load"]) or "not recorded"
    title = f"# Ferrite compared with Redis and memcached ({doc['date']})"
    lines = [title, ""]
    if doc["quick"] or doc["profile"] != "release":
        lines += [f"> **A {'quick ' if doc['quick'] else ''}{doc['profile']} run**: it proves the harness works; "
                  "its figures are too short or too slow to quote.", ""]
    lines += [f"Generated by `bench/compare{' --quick' if doc['quick'] else ''}` in {doc['elapsed_s']:.0f} s on "
              f"{host['nproc']} CPUs ({host['cpu_model'] or 'unknown CPU'}), {doc['placement']} placement, "
              f"{doc['profile']} binaries. 1-minute load average at each stage: {loads}. Raw figures, every "
              "latency percentile and the exact commands are in the `.json` file beside this one; "
              "docs/benchmarks.md explains the scenarios.", ""]
    if plots:
        lines += ["## At a glance", ""]
        for title_, path in plots:
            lines += [f"![{title_}]({os.path.basename(path)})", ""]
    sections = {"small-ops": section_small_ops, "ycsb": section_ycsb, "values": section_values, "shards": section_shards,
                "durability": section_durability, "poll": section_poll, "ado": section_ado,
                "metrics": section_metrics, "restart": section_restart, "memory": section_memory,
                "large-values": section_large_values, "cluster": section_cluster}
    for name in doc["scenarios"]:
        if name in sections:
            lines += sections[name](doc)
    if doc["skipped"] or doc["failures"]:
        lines += ["## Skipped and failed", ""]
        lines += [f"- skipped: {why}" for why in doc["skipped"]]
        lines += [f"- **failed**: {failure.splitlines()[0]}" for failure in doc["failures"]]
        lines.append("")
    values = {
        "placement": "servers on CPU 0 and load generators on CPU 1 (taskset), one load generator at a time, "
        "`ferrite bench` with one runtime thread like the single-threaded redis-benchmark"
        if doc["placement"] == "pinned" else "nothing pinned: servers and load generators shared the CPUs",
        "nproc": host["nproc"],
        "repeat": doc["repeat"],
        "small_key_size": settings.get("small-ops", settings.get("values", {})).get("key_size", 16),
    }
    for prefix, name in (("ycsb", "ycsb"), ("values", "values"), ("shards", "shards"), ("durability", "durability"),
                         ("poll", "poll"), ("ado", "ado"), ("restart", "restart"), ("memory", "memory"),
                         ("large", "large-values")):
        for key, value in settings.get(name, {}).items():
            values[f"{prefix}_{key}"] = value
    if "poll_connections" in values:
        counts = [str(count) for count in values["poll_connections"]]
        values["poll_connections_list"] = " and ".join([", ".join(counts[:-1]), counts[-1]] if len(counts) > 1 else counts)
        values["poll_placement"] = (
            f"here the servers ran on CPU 0 and redis-benchmark on CPU 1 of {host['nproc']}, so a polling shard "
            "could take CPU from its own process's sync thread but not from the load generator"
            if doc["placement"] == "pinned" else
            f"here nothing was pinned, so on {host['nproc']} CPUs a polling shard could take CPU that redis-benchmark "
            "and the shard's own sync thread need")
    if "ado_keys" in values:
        values["ado_keys"] = f"{values['ado_keys']:,}"
        values["ado_placement"] = ("both on CPU 0 (a host inherits the server's CPU), the load generator on CPU 1"
                                   if doc["placement"] == "pinned" else "nothing pinned")
    for key in ("large_large_from", "large_once_from"):
        if key in values:
            values[key + "_label"] = size_label(values[key])
    if "values_data_bytes" in values:
        values["values_data_mib"] = values["values_data_bytes"] >> 20
    lines += ["## How to read this", ""]
    for note in NOTES:
        try:
            lines.append("- " + note.format(**values))
        except KeyError:
            continue  # a note about a scenario this run did not include
    lines += ["", "## Machine", ""]
    lines += [
        f"- Ferrite commit: {doc['ferrite_commit']}",
        f"- CPUs: {host['nproc']} x {host['cpu_model'] or 'unknown'}; memory {host['memory_gib']} GiB; {host['kernel']}",
        f"- {host['rustc'] or 'rustc unknown'}; Python {host['python']}; matplotlib {host['matplotlib'] or 'absent'}",
        f"- {host['redis_server'] or 'redis-server unknown'}",
        f"- {host['redis_benchmark'] or 'redis-benchmark unknown'}; {host['memcached'] or 'memcached unknown'}",
        f"- load average (1, 5, 15 min): " + "; ".join(f"{e['when']} {e['loadavg']}" for e in doc["load"]),
        "", "## Commands", "",
        "Run from the repository root, in this order (ports were picked free at run time):", "", "```sh",
        *doc["commands"], "```", "",
    ]
    return "\n".join(lines)


def write(doc, base):
    """Writes <base>.json, <base>.md and the plots <base>-*.png; returns the paths written."""
    plots = []
    try:
        import plots as plotting  # bench/plots.py; needs matplotlib

        plots = plotting.draw(doc, base)
    except ImportError as error:
        doc["failures"].append(f"plots not drawn: {error} (run through bench/compare, which installs matplotlib)")
    with open(base + ".json", "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(markdown(doc, plots))
    return [base + ".md", base + ".json", *(path for _, path in plots)]
