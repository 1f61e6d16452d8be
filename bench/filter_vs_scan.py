#!/usr/bin/env python3
"""Near-data filtering against a client-side scan: the `filter` plugin's answer (the matching keys)
next to fetching every value to the client (SCAN and MGET of 1,000 keys at a time), through the
RESP listener of a one-shard release server pinned to CPU 0 whose default pool has
`plugins = ["filter"]`. 100,000 keys of 12 bytes with 100-byte values, 1% of them matching; the
best of three runs. Prints one line: keys, bytes and milliseconds of each.

Run from the repository root after `make build`: `.venv/bin/python bench/filter_vs_scan.py`
(the venv is the one `make test` installs).
"""
import atexit
import re
import subprocess
import tempfile
import time

import redis
d = tempfile.mkdtemp()
cfg = subprocess.run(["target/release/ferrite-server", "--print-default-config"], capture_output=True, text=True).stdout
cfg += '\n[resp]\nenabled = true\nport = 0\nplugins = ["filter"]\n'
open(d + "/c.toml", "w").write(cfg)
p = subprocess.Popen(["taskset", "-c", "0", "target/release/ferrite-server", "--config", d + "/c.toml", "--listen", "127.0.0.1:0",
                      "--data-dir", d + "/data", "--log-level", "warn"], stdout=subprocess.PIPE, text=True)
atexit.register(p.kill)  # stopped by its own pid whatever happens below
port = None
for line in p.stdout:
    m = re.search(r"resp 127\.0\.0\.1:(\d+)", line)
    if m: port = int(m.group(1)); break
r = redis.Redis(port=port)
N = 100_000
pipe = r.pipeline(transaction=False)
for i in range(N):
    value = (b"needle " if i % 100 == 0 else b"hay ") + b"x" * 93
    pipe.set(b"key:%08d" % i, value)
    if i % 1000 == 999: pipe.execute()
pipe.execute()


def filtered():
    """The plugin's answer: (keys, bytes, seconds)."""
    start = time.perf_counter()
    answer = r.execute_command("FERRITE.INVOKE", "", "contains needle")
    seconds = time.perf_counter() - start
    return len(answer), sum(len(key) for key in answer), seconds


def scanned():
    """Every value fetched to the client: (pairs, bytes, matches, seconds)."""
    start = time.perf_counter()
    pairs = fetched = matches = 0
    keys = iter(r.scan_iter(count=1000))
    while batch := [key for _, key in zip(range(1000), keys)]:
        for key, value in zip(batch, r.mget(batch)):
            pairs += 1
            fetched += len(key) + len(value)
            matches += b"needle" in value
    return pairs, fetched, matches, time.perf_counter() - start


keys, filter_bytes, filter_s = min((filtered() for _ in range(3)), key=lambda run: run[2])
pairs, scan_bytes, matches, scan_s = min((scanned() for _ in range(3)), key=lambda run: run[3])
best = {"k": keys, "fb": filter_bytes, "f": filter_s, "n": pairs, "cb": scan_bytes, "m": matches, "c": scan_s}
print(f"{N} keys of 12 B with 100 B values, 1% match: filter {best['k']} keys, {best['fb']:,} bytes, {best['f']*1000:.1f} ms; "
      f"client scan+MGET of {best['n']} pairs: {best['cb']:,} bytes, {best['c']*1000:.1f} ms, {best['m']} matches")
p.kill(); p.wait()
