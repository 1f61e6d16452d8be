#!/usr/bin/env python3
"""Assemble the small-ops comparison from the raw outputs of bench/small-ops.sh.

Reads, from the work directory the script fills:
  ferrite-<put|get>-<outstanding>.json   `ferrite --json bench` reports
  redis-<outstanding>.csv                `redis-benchmark --csv` output (SET and GET rows)
  commands.txt                           every command run, one per line
and writes <out>.json (everything, raw reports included) and <out>.md (the tables).

Standard library only, so it runs wherever python3 does.
"""

import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import sys

# Ferrite's workload name and the redis-benchmark test it is compared with.
WORKLOADS = [("put", "SET"), ("get", "GET")]


def command_output(*argv):
    """First line of a command's output, or None if it cannot run."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (result.stdout or result.stderr).strip().splitlines()
    return lines[0] if lines else None


def load_average(path):
    """The 1-minute load average from a copy of /proc/loadavg, or None."""
    try:
        with open(path, encoding="utf-8") as handle:
            return float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def machine(work):
    """What the numbers were measured on, and how busy it was."""
    model = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory_kib = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    memory_kib = int(line.split()[1])
                    break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": f"{platform.system()} {platform.release()}",
        "memory_gib": round(memory_kib / 1024 / 1024, 1) if memory_kib else None,
        "rustc": command_output("rustc", "--version"),
        "redis_server": command_output("redis-server", "--version"),
        "redis_benchmark": command_output("redis-benchmark", "--version"),
        "python": platform.python_version(),
        "load_average_1min_at_start": load_average(os.path.join(work, "loadavg-start")),
        "load_average_1min_at_end": load_average("/proc/loadavg"),
    }


def read_redis(path):
    """redis-benchmark --csv rows by test name. Latency columns exist from Redis 6.2 on."""
    rows = {}
    with open(path, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            entry = {"ops_per_s": float(row["rps"])}
            for column, name in [
                ("avg_latency_ms", "mean_us"),
                ("min_latency_ms", "min_us"),
                ("p50_latency_ms", "p50_us"),
                ("p95_latency_ms", "p95_us"),
                ("p99_latency_ms", "p99_us"),
                ("max_latency_ms", "max_us"),
            ]:
                if row.get(column) not in (None, ""):
                    entry[name] = round(float(row[column]) * 1000.0, 1)
            rows[row["test"]] = entry
    return rows


def ferrite_point(report):
    latency = report.get("latency_us") or {}
    return {
        "ops": report["ops"],
        "errors": report["errors"],
        "elapsed_s": report["elapsed_s"],
        "ops_per_s": report["ops_per_s"],
        "p50_us": latency.get("p50"),
        "p90_us": latency.get("p90"),
        "p99_us": latency.get("p99"),
        "p99_9_us": latency.get("p99_9"),
        "max_us": latency.get("max"),
        "preload": report.get("preload"),
    }


def fmt(value, decimals=0):
    if value is None:
        return "-"
    return f"{value:,.{decimals}f}"


PLACEMENT_NOTES = {
    "pinned": "Both servers ran on CPU 0 and both load generators on CPU 1 (taskset), and only "
    "one tool generated load at a time, so a server and its load generator each had a core of "
    "their own. "
    "`ferrite bench` ran its runtime with one thread (TOKIO_WORKER_THREADS=1) like the "
    "single-threaded redis-benchmark: a second thread on the same CPU would only take turns with "
    "the first. The machine has {nproc} CPUs, so this is the whole machine.",
    "shared": "Nothing was pinned: each server and its load generator shared the machine's "
    "{nproc} CPUs as the scheduler placed them, and `ferrite bench` ran its runtime with one "
    "thread per CPU while redis-benchmark is single-threaded. Expect these figures to vary from "
    "run to run (see the next note).",
}

NOTES = [
    "Round trips between two processes on this machine are bimodal: about 18 us when the "
    "scheduler runs both on the same CPU, about 60 us when they are on different CPUs (a "
    "cross-CPU wake-up is expensive on this virtual machine; measured with taskset and "
    "`ferrite bench --outstanding 1`: 53k ops/s on one CPU, 15k ops/s across two). Unpinned runs "
    "land in either mode by chance and differed by up to 1.8x between two runs at the same point; "
    "that is why the default run pins.",
    "Ferrite ran its embedded default configuration (one shard, `mapstore` engine, `memory` "
    "backing: nothing persisted); Redis ran with `--save '' --appendonly no` (nothing persisted). "
    "Neither syncs to disk, so this compares request handling, not durability.",
    "\"Outstanding\" means different things to the two tools. `ferrite bench --outstanding N` runs "
    "N workers on one connection, each sending its next request as soon as its previous one is "
    "answered, so exactly N are always in flight. `redis-benchmark -c 1 -P N` is the closest "
    "equivalent: it writes a batch of N commands on one connection, waits for all N replies, then "
    "writes the next batch, so between 0 and N are in flight.",
    "Latency is measured differently too. Ferrite records each request from just before it is "
    "handed to the client library to when its reply reaches the worker. redis-benchmark records, "
    "for every command of a pipelined batch, the time from writing the batch to the first read "
    "of its replies, so at N > 1 its figures are per-batch round trips (and its percentiles have "
    "1 us resolution). Compare the two tools' latencies at 1 outstanding; above that, compare "
    "throughput.",
    "Keys: Ferrite used {key_size}-byte keys (zero-padded numbers, uniform over {keys} keys). "
    "redis-benchmark -r {keys} uses 16-byte keys (`key:` and 12 digits), uniform over the same "
    "key space; it cannot make shorter ones. Values are {value_size} bytes in both.",
    "Before any measured request both stores held every key of the key space, so every get hit "
    "and every put replaced an existing value. Redis was loaded with redis-benchmark's exact key "
    "names through `redis-cli --pipe`. Ferrite's get run stored every key first (its preload, in "
    "the JSON) and kept the pool for the put run at the same point; the pool was deleted after.",
    "redis-benchmark takes a request count, not a duration: a short calibration run at each point "
    "measured its rate, and the recorded run asked for rate x {seconds} s requests.",
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--out", required=True, help="output path without extension")
    parser.add_argument("--seconds", type=int, required=True)
    parser.add_argument("--outstanding", type=int, nargs="+", required=True)
    parser.add_argument("--key-size", type=int, required=True)
    parser.add_argument("--value-size", type=int, required=True)
    parser.add_argument("--keys", type=int, required=True)
    parser.add_argument("--quick", default="0")
    parser.add_argument("--placement", choices=["pinned", "shared"], required=True)
    parser.add_argument("--commit", default="unknown", help="the Ferrite commit measured")
    args = parser.parse_args()

    points = []
    for outstanding in args.outstanding:
        redis = read_redis(os.path.join(args.work, f"redis-{outstanding}.csv"))
        for workload, redis_test in WORKLOADS:
            with open(os.path.join(args.work, f"ferrite-{workload}-{outstanding}.json"), encoding="utf-8") as f:
                raw = json.load(f)
            ferrite = ferrite_point(raw)
            redis_point = redis.get(redis_test)
            ratio = None
            if redis_point and redis_point["ops_per_s"] > 0:
                ratio = round(ferrite["ops_per_s"] / redis_point["ops_per_s"], 3)
            points.append(
                {
                    "workload": workload,
                    "redis_test": redis_test,
                    "outstanding": outstanding,
                    "ferrite": ferrite,
                    "redis": redis_point,
                    "ferrite_over_redis": ratio,
                    "ferrite_raw": raw,
                }
            )

    with open(os.path.join(args.work, "commands.txt"), encoding="utf-8") as f:
        commands = [line.rstrip("\n") for line in f if line.strip()]
    host = machine(args.work)
    values = {
        "nproc": host["nproc"],
        "key_size": args.key_size,
        "value_size": args.value_size,
        "keys": args.keys,
        "seconds": args.seconds,
    }
    notes = [note.format(**values) for note in [PLACEMENT_NOTES[args.placement], *NOTES]]
    document = {
        "benchmark": "small-ops",
        "date": datetime.date.today().isoformat(),
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": args.quick == "1",
        "placement": args.placement,
        "ferrite_commit": args.commit,
        "seconds_per_point": args.seconds,
        "key_size": args.key_size,
        "value_size": args.value_size,
        "keys": args.keys,
        "clients": 1,
        "machine": host,
        "points": points,
        "notes": notes,
        "commands": commands,
    }
    with open(args.out + ".json", "w", encoding="utf-8") as f:
        json.dump(document, f, indent=2)
        f.write("\n")

    lines = [
        f"# Small operations: Ferrite vs Redis ({document['date']})",
        "",
        f"{args.key_size}-byte keys, {args.value_size}-byte values, {args.keys:,} keys, one client "
        f"connection, {args.seconds} s per point, "
        + ("server on CPU 0 and load generator on CPU 1" if args.placement == "pinned" else "unpinned")
        + (" (BENCH_QUICK smoke run: too short to quote)" if document["quick"] else "")
        + ". Generated by `bench/small-ops.sh`; raw data in the `.json` file beside this one.",
        "",
    ]
    for workload, redis_test in WORKLOADS:
        lines += [
            f"## {workload} (Redis {redis_test})",
            "",
            "| outstanding | Ferrite ops/s | Ferrite p50 us | Ferrite p99 us | Redis ops/s "
            "| Redis p50 us | Redis p99 us | Ferrite/Redis |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for point in points:
            if point["workload"] != workload:
                continue
            f_, r = point["ferrite"], point["redis"] or {}
            errors = f" ({f_['errors']} errors)" if f_["errors"] else ""
            lines.append(
                f"| {point['outstanding']} | {fmt(f_['ops_per_s'])}{errors} | {fmt(f_['p50_us'], 1)} "
                f"| {fmt(f_['p99_us'], 1)} | {fmt(r.get('ops_per_s'))} | {fmt(r.get('p50_us'), 1)} "
                f"| {fmt(r.get('p99_us'), 1)} | {fmt(point['ferrite_over_redis'], 2)} |"
            )
        lines.append("")
    lines += ["## How to read this", ""]
    lines += [f"- {note}" for note in notes]
    lines += ["", "## Machine", ""]
    lines += [
        f"- Ferrite commit: {args.commit}",
        f"- CPUs (nproc): {host['nproc']}",
        f"- CPU model: {host['cpu_model'] or 'unknown'}",
        f"- kernel: {host['kernel']}",
        f"- memory: {host['memory_gib']} GiB",
        f"- rustc: {host['rustc'] or 'unknown'}",
        f"- redis-server: {host['redis_server'] or 'unknown'}",
        f"- load average (1 min) at start / end: {host['load_average_1min_at_start']} / "
        f"{host['load_average_1min_at_end']} (includes the benchmark itself at the end)",
        "",
        "## Commands",
        "",
        "Run from the repository root, in this order (ports were picked free at run time):",
        "",
        "```sh",
        *commands,
        "```",
        "",
    ]
    with open(args.out + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
