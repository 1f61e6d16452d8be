"""Small-operation throughput of Ferrite's clients (Python, C, Rust), next to redis-py against
redis-server, in the same run.

Starts a one-shard ferrite-server and a redis-server (no persistence) on free ports, then for
each client style runs puts, then gets, of 16-byte values for a fixed time and prints ops/s:

- Python: ferrite blocking, one thread; ferrite blocking, 8 threads sharing one Session (every
  network wait releases the GIL); ferrite.aio, 64 calls in flight on one session (pipelined on
  one connection);
- C (libferrite, clients/c/bench/bench.c, built here with gcc): one blocking call at a time, and
  64 asynchronous calls in flight on one session;
- Rust (the `ferrite bench` command, the Rust client itself): one connection with one request in
  flight, and one connection with 64;
- redis-py blocking, one thread; redis-py, 8 threads sharing one connection pool; and
  redis.asyncio with 64 calls in flight, for comparison.

The ferrite pool is created with durability="async" (acknowledged once applied, like Redis
without persistence); pass --durability sync to wait for the disk instead.

    .venv/bin/python bench/clients.py                # release binaries if built, else debug
    .venv/bin/python bench/clients.py --seconds 5 --rounds 3

For meaningful figures build the release binaries (`cargo build --release -p ferrite-server -p
ferrite-cli -p ferrite-c`) and install the extension (`pip install ./clients/python` builds it in
release mode).
"""

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import ferrite
import ferrite.aio

REPO_ROOT = Path(__file__).resolve().parents[1]
VALUE = b"v" * 16
THREADS = 8
IN_FLIGHT = 64
KEYS = 10_000


def key(i: int) -> str:
    return f"key:{i % KEYS:08d}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop(process: subprocess.Popen):
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def start_ferrite(binary: Path, data_dir: str):
    process = subprocess.Popen(
        [str(binary), "--listen", "127.0.0.1:0", "--shards", "1", "--data-dir", data_dir, "--log-level", "warn"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    address = None
    for line in process.stdout:
        if line.startswith("shard 0: native "):
            address = line.split("native ", 1)[1].strip()
        if line.startswith("ready."):
            break
    # Keep draining stdout so the server never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
    if address is None:
        stop(process)
        sys.exit(f"{binary} did not start")
    return process, address


def start_redis(data_dir: str):
    if shutil.which("redis-server") is None:
        return None, None
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", data_dir],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    import redis

    deadline = time.monotonic() + 10
    while True:
        try:
            redis.Redis(port=port).ping()
            return process, port
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                stop(process)
                return None, None
            time.sleep(0.05)


def timed_loop(operation, seconds: float) -> float:
    """Calls operation(i) for `seconds`; returns ops/s."""
    count = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        for _ in range(100):
            operation(count)
            count += 1
        now = time.perf_counter()
        if now >= deadline:
            return count / (now - started)


def timed_threads(make_operation, seconds: float) -> float:
    counts = [0] * THREADS
    stop_at = time.perf_counter() + seconds
    barrier = threading.Barrier(THREADS + 1)

    def worker(index):
        operation = make_operation()
        barrier.wait()
        n = 0
        while time.perf_counter() < stop_at:
            for _ in range(50):
                operation(index * 1_000_003 + n)
                n += 1
        counts[index] = n

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - started)


async def timed_tasks(operation, seconds: float) -> float:
    counts = [0] * IN_FLIGHT
    stop_at = time.perf_counter() + seconds

    async def worker(index):
        n = 0
        while time.perf_counter() < stop_at:
            await operation(index * 1_000_003 + n)
            n += 1
        counts[index] = n

    started = time.perf_counter()
    await asyncio.gather(*(worker(t) for t in range(IN_FLIGHT)))
    return sum(counts) / (time.perf_counter() - started)


def populate(address: str, name: str):
    """Stores every key once, pipelined, so the gets always find theirs."""
    async def run():
        async with await ferrite.aio.connect(address, client_name="bench") as session:
            async with await session.open_pool(name) as pool:
                for start in range(0, KEYS, 1000):
                    await asyncio.gather(*(pool.put(key(i), VALUE) for i in range(start, start + 1000)))

    asyncio.run(run())


def bench_ferrite(address: str, seconds: float, durability: str) -> dict:
    results = {}
    with ferrite.connect(address, client_name="bench") as session:
        name = f"bench-{time.monotonic_ns()}"
        with session.create_pool(name, size_bytes=256 << 20, expected_objects=2 * KEYS, durability=durability) as pool:
            populate(address, name)
            results["ferrite blocking, 1 thread"] = (
                timed_loop(lambda i: pool.put(key(i), VALUE), seconds),
                timed_loop(lambda i: pool.get(key(i)), seconds),
            )
            results[f"ferrite blocking, {THREADS} threads, one session"] = (
                timed_threads(lambda: lambda i: pool.put(key(i), VALUE), seconds),
                timed_threads(lambda: lambda i: pool.get(key(i)), seconds),
            )

    async def aio():
        async with await ferrite.aio.connect(address, client_name="bench") as session:
            async with await session.open_pool(name) as pool:
                puts = await timed_tasks(lambda i: pool.put(key(i), VALUE), seconds)
                gets = await timed_tasks(lambda i: pool.get(key(i)), seconds)
            await session.delete_pool(name)
            return puts, gets

    results[f"ferrite.aio, {IN_FLIGHT} in flight, one session"] = asyncio.run(aio())
    return results


def bench_redis(port: int, seconds: float) -> dict:
    import redis
    import redis.asyncio

    results = {}
    client = redis.Redis(port=port)
    client.mset({key(i): VALUE for i in range(KEYS)})
    results["redis-py blocking, 1 thread"] = (
        timed_loop(lambda i: client.set(key(i), VALUE), seconds),
        timed_loop(lambda i: client.get(key(i)), seconds),
    )
    shared = redis.Redis(connection_pool=redis.ConnectionPool(port=port, max_connections=THREADS))
    results[f"redis-py blocking, {THREADS} threads, one client"] = (
        timed_threads(lambda: lambda i: shared.set(key(i), VALUE), seconds),
        timed_threads(lambda: lambda i: shared.get(key(i)), seconds),
    )

    async def aio():
        client = redis.asyncio.Redis(port=port, max_connections=IN_FLIGHT)
        puts = await timed_tasks(lambda i: client.set(key(i), VALUE), seconds)
        gets = await timed_tasks(lambda i: client.get(key(i)), seconds)
        await client.aclose()
        return puts, gets

    results[f"redis.asyncio, {IN_FLIGHT} in flight"] = asyncio.run(aio())
    return results


def build_c_bench(profile: str, directory: str) -> Path | None:
    """clients/c/bench/bench.c linked against target/PROFILE/libferrite.so; None without gcc."""
    library = REPO_ROOT / "target" / profile
    if shutil.which("gcc") is None or not (library / "libferrite.so").exists():
        return None
    # The binary needs the library by its SONAME (libferrite.so.0.2 for 0.2.x), and cargo builds
    # only libferrite.so: the SONAME is linked to it, as clients/c/install.sh does in a prefix.
    dynamic = subprocess.run(["objdump", "-p", str(library / "libferrite.so")], capture_output=True, text=True,
                             check=True).stdout
    soname = next(line.split()[1] for line in dynamic.splitlines() if line.split()[:1] == ["SONAME"])
    if not (library / soname).exists():
        (library / soname).symlink_to("libferrite.so")
    binary = Path(directory) / "bench-c"
    subprocess.run(["gcc", "-O2", "-I", str(REPO_ROOT / "clients" / "c" / "include"),
                    str(REPO_ROOT / "clients" / "c" / "bench" / "bench.c"), "-L", str(library), "-lferrite",
                    f"-Wl,-rpath,{library}", "-o", str(binary)], check=True)
    return binary


def bench_c(binary: Path, address: str, seconds: float) -> dict:
    results = {}
    for label, mode in (("C blocking, 1 thread", ["blocking"]),
                        (f"C async, {IN_FLIGHT} in flight, one session", ["async", str(IN_FLIGHT)])):
        output = subprocess.run([str(binary), address, str(seconds), *mode], check=True, capture_output=True,
                                text=True).stdout
        figures = json.loads(output)
        results[label] = (figures["put_ops_per_s"], figures["get_ops_per_s"])
    return results


def bench_rust(cli: Path, address: str, seconds: float) -> dict:
    """The Rust client through `ferrite bench`: one connection, 1 and 64 requests in flight."""
    results = {}
    for outstanding in (1, IN_FLIGHT):
        figures = []
        for workload in ("put", "get"):
            output = subprocess.run(
                [str(cli), "--addr", address, "bench", "--workload", workload, "--clients", "1", "--outstanding",
                 str(outstanding), "--keys", str(KEYS), "--value-size", str(len(VALUE)), "--durability", "async",
                 "--duration", str(seconds), "--json"],
                check=True, capture_output=True, text=True).stdout
            figures.append(json.loads(output)["ops_per_s"])
        label = "Rust, 1 in flight" if outstanding == 1 else f"Rust, {outstanding} in flight, one connection"
        results[label] = tuple(figures)
    return results


def best(rounds: list[dict]) -> dict:
    """The best figure of each measurement over the rounds."""
    return {name: tuple(max(r[name][i] for r in rounds) for i in range(2)) for name in rounds[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    release = REPO_ROOT / "target" / "release" / "ferrite-server"
    parser.add_argument("--server", type=Path, default=release if release.exists() else
                        REPO_ROOT / "target" / "debug" / "ferrite-server")
    parser.add_argument("--no-native", action="store_true", help="skip the C and Rust clients")
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement (default 3)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every measurement; the best counts")
    parser.add_argument("--durability", choices=["sync", "async"], default="async")
    parser.add_argument("--no-redis", action="store_true")
    args = parser.parse_args()

    profile = args.server.parent.name
    with tempfile.TemporaryDirectory(prefix="ferrite-clients-bench-") as directory:
        c_bench = None if args.no_native else build_c_bench(profile, directory)
        cli = args.server.with_name("ferrite")
        if not args.no_native and c_bench is None:
            print(f"gcc or target/{profile}/libferrite.so missing: skipping the C client", file=sys.stderr)
        server, address = start_ferrite(args.server, str(Path(directory) / "ferrite"))
        redis_server, port = (None, None) if args.no_redis else start_redis(directory)
        if not args.no_redis and redis_server is None:
            print("redis-server not found or not starting: skipping redis-py", file=sys.stderr)
        try:
            # Both servers run throughout and the clients take turns, round after round, so a
            # noisy moment on the machine does not land on one of them only.
            rounds = []
            for _ in range(args.rounds):
                results = bench_ferrite(address, args.seconds, args.durability)
                if c_bench is not None:
                    results.update(bench_c(c_bench, address, args.seconds))
                if not args.no_native and cli.exists():
                    results.update(bench_rust(cli, address, args.seconds))
                if redis_server is not None:
                    results.update(bench_redis(port, args.seconds))
                rounds.append(results)
        finally:
            stop(server)
            if redis_server is not None:
                stop(redis_server)

    shown = args.server.relative_to(REPO_ROOT) if args.server.is_relative_to(REPO_ROOT) else args.server
    print(f"16-byte values, best of {args.rounds} x {args.seconds:g} s per figure, server {shown}, "
          f"ferrite durability={args.durability} (C and Rust: async), {os.cpu_count()} CPUs")
    results = best(rounds)
    width = max(len(name) for name in results)
    print(f"| {'client':<{width}} | {'put ops/s':>10} | {'get ops/s':>10} |")
    print(f"|{'-' * (width + 2)}|{'-' * 11}:|{'-' * 11}:|")
    for name, (puts, gets) in results.items():
        print(f"| {name:<{width}} | {puts:>10,.0f} | {gets:>10,.0f} |")


if __name__ == "__main__":
    main()
