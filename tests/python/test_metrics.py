"""The metrics endpoint: scraped during a workload, its counters match the operations sent, and
its text parses with the Prometheus project's own parser (OpenMetrics format)."""

import threading
import urllib.error
import urllib.request

import pytest
import redis
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import Server


@pytest.fixture
def metrics_server():
    server = Server(shards=2, extra_args=("--metrics-listen", "127.0.0.1:0"))
    yield server
    server.stop()


def scrape(server):
    with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        return response.read().decode()


def samples(text):
    """{(sample name, frozenset of labels): value} of every sample in a scrape."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(parsed, name, **labels):
    return parsed[(name, frozenset(labels.items()))]


def test_counters_match_the_operations_sent(metrics_server):
    before = samples(scrape(metrics_server))
    client = metrics_server.client(protocol=2, shard=1)
    for i in range(37):
        client.set(f"k{i}", b"v" * i)
    for i in range(23):
        assert client.get(f"k{i}") == b"v" * i
    assert client.delete("k0", "k1", "k2") == 3
    with pytest.raises(redis.ResponseError):
        client.get("k" * 70_000)  # over the key limit: a failed get on the pool
    after = samples(scrape(metrics_server))

    def grew(op):
        key = ("ferrite_operations_total", frozenset({"shard": "1", "op": op}.items()))
        return after[key] - before[key]

    assert (grew("put"), grew("get"), grew("erase")) == (37, 23, 3)

    def grew_by(name, **labels):
        key = (name, frozenset(labels.items()))
        return after[key] - before.get(key, 0)

    # Per pool, and the latency histograms: one observation per request, each bucket cumulative.
    assert grew_by("ferrite_pool_requests_total", shard="1", pool="@1/redis", op="put") == 37
    assert grew_by("ferrite_pool_requests_total", shard="1", pool="@1/redis", op="get") == 24
    assert grew_by("ferrite_pool_failures_total", shard="1", pool="@1/redis", op="get") == 1
    assert grew_by("ferrite_failures_total", shard="1", op="get") == 1
    assert grew_by("ferrite_failures_total", shard="1", op="put") == 0
    assert grew_by("ferrite_request_seconds_count", shard="1", op="put") == 37
    assert grew_by("ferrite_request_seconds_bucket", shard="1", op="get", le="+Inf") == 24
    assert value(after, "ferrite_request_seconds_sum", shard="1", op="put") > 0
    sent = 37 * len("SET k00 vvvv") + 23 * len("GET k00")
    assert grew_by("ferrite_received_bytes_total", shard="1") >= sent
    assert grew_by("ferrite_sent_bytes_total", shard="1") >= 37 * len("+OK\r\n")
    assert value(after, "ferrite_recovery_seconds", shard="1") >= 0
    puts = value(after, "ferrite_operations_total", shard="1", op="put")
    commits = value(after, "ferrite_wal_commits_total", shard="1")
    assert value(after, "ferrite_wal_puts_per_commit", shard="1") == pytest.approx(puts / commits)
    assert value(after, "ferrite_operations_total", shard="0", op="put") == 0, "shard 0 saw none of it"
    assert value(after, "ferrite_pool_objects", shard="1", pool="@1/redis") == 34
    assert value(after, "ferrite_connections", shard="1") >= 1
    # Every write was sync: durable by the time it was answered, so nothing lags.
    assert value(after, "ferrite_wal_durable_lag_records", shard="1") == 0
    assert value(after, "ferrite_wal_commits_total", shard="1") > value(before, "ferrite_wal_commits_total", shard="1")


def test_scrapes_during_a_workload_see_counts_only_grow(metrics_server):
    client = metrics_server.client(protocol=2)
    done = threading.Event()

    def write():
        for i in range(400):
            client.set(f"w{i}", b"x")
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    seen = []
    while not done.is_set():
        seen.append(value(samples(scrape(metrics_server)), "ferrite_operations_total", shard="0", op="put"))
    writer.join()
    seen.append(value(samples(scrape(metrics_server)), "ferrite_operations_total", shard="0", op="put"))
    assert seen == sorted(seen), seen
    assert seen[-1] == 400


def test_other_paths_and_methods_are_refused(metrics_server):
    base = metrics_server.metrics_url.rsplit("/", 1)[0]
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{base}/nothing", timeout=10)
    assert missing.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as posted:
        urllib.request.urlopen(urllib.request.Request(metrics_server.metrics_url, data=b"x"), timeout=10)
    assert posted.value.code == 405


def test_each_users_holdings_against_its_quota(tmp_path):
    """With users, the endpoint shows what each holds: connections over every shard, pools it
    created and their bytes."""
    import os
    import subprocess

    from test_auth import CLI_BINARY, PASSWORDS, add_user

    users_file = tmp_path / "users.toml"
    add_user(users_file, "writer", [("*", "all")])
    server = Server(shards=2, extra_args=("--metrics-listen", "127.0.0.1:0", "--users", str(users_file)))
    try:
        clients = [server.client(2, shard=shard, username="writer", password=PASSWORDS["writer"]) for shard in (0, 1)]
        for client in clients:
            assert client.ping()
        environment = {**os.environ, "FERRITE_USER": "writer", "FERRITE_PASSWORD": PASSWORDS["writer"]}
        address = "{}:{}".format(*server.native[0])
        created = subprocess.run([str(CLI_BINARY), "--addr", address, "pool", "create", "owned",
                                  "--size", "8MiB"], env=environment, capture_output=True, text=True, timeout=60)
        assert created.returncode == 0, created.stderr
        parsed = samples(scrape(server))
        assert value(parsed, "ferrite_user_connections", user="writer") == 2
        assert value(parsed, "ferrite_user_pools", user="writer") == 1
        assert value(parsed, "ferrite_user_pool_bytes", user="writer") == 8 << 20
        for client in clients:
            client.close()
    finally:
        server.stop()
