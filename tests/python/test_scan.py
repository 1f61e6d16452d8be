"""`SCAN` against `redis-server` in the same test: the same keys, the same commands, the same
answers where Redis promises them (which keys a whole walk returns, how `MATCH`, `COUNT` and
`TYPE` filter, the errors), and Redis's guarantee under change: every key present for the whole walk
is returned at least once, while keys are added (growing the table) and erased between calls.
"""

import pytest
import redis


def walk(client: redis.Redis, between=None, **options):
    """A whole `SCAN` walk: the keys returned (with repeats) and the number of calls."""
    cursor, keys, calls = 0, [], 0
    while True:
        cursor, page = client.scan(cursor, **options)
        keys.extend(page)
        calls += 1
        if cursor == 0:
            return keys, calls
        if between is not None:
            between(calls)
        assert calls < 1_000_000, "the walk does not end"


def load(client: redis.Redis, keys, value=b"v", batch=1000):
    keys = list(keys)
    for start in range(0, len(keys), batch):
        client.mset({key: value for key in keys[start:start + batch]})


KEYS = (
    [f"user:{i}" for i in range(1000)]
    + [f"item:{i:04}" for i in range(1000)]
    + ["hello", "hallo", "hxllo", "heeeello", "a*b", "a?b", "[x]", "back\\slash", "", "\u00e9t\u00e9"]
)

PATTERNS = [
    "*", "user:*", "user:1?", "*:1[0-3]*", "item:0[!0-8]*", "h?llo", "h*llo", "h[ae]llo", "h[^e]llo",
    "h[a-b]llo", "a\\*b", "a\\?b", "\\[x\\]", "back\\\\slash", "", "nothing*", "\u00e9*", "*9",
]


def test_match_returns_what_redis_returns(ferrite_and_redis):
    ferrite, reference = ferrite_and_redis
    for client in ferrite_and_redis:
        load(client, KEYS)
    for pattern in PATTERNS:
        expected, _ = walk(reference, match=pattern, count=100)
        found, _ = walk(ferrite, match=pattern, count=100)
        assert sorted(found) == sorted(expected), f"MATCH {pattern!r}"
        assert len(found) == len(set(found)), f"MATCH {pattern!r} without growth returns each key once"


def test_count_and_type_answer_as_redis_does(ferrite_and_redis):
    ferrite, reference = ferrite_and_redis
    for client in ferrite_and_redis:
        load(client, KEYS)
    everything = sorted(key.encode() for key in KEYS)
    for count in [1, 10, 100, 1000, 100_000]:
        results = {}
        for name, client in (("ferrite", ferrite), ("redis", reference)):
            keys, calls = walk(client, count=count)
            assert sorted(keys) == everything, f"{name} COUNT {count}"
            results[name] = calls
        # COUNT is a hint to both: a step returns about COUNT keys, so the walks take a similar
        # number of calls (tables of different shapes, so not the same number).
        assert results["ferrite"] <= 2 * results["redis"] + 2, f"COUNT {count}: {results}"
        assert results["redis"] <= 2 * results["ferrite"] + 2, f"COUNT {count}: {results}"
    for client in ferrite_and_redis:
        assert sorted(walk(client, _type="string")[0]) == everything
        assert walk(client, _type="hash")[0] == []
        assert walk(client, _type="hash", match="user:*")[0] == []


def test_errors_are_redis_errors(ferrite_and_redis):
    answers = []
    for client in ferrite_and_redis:
        errors = []
        for args in (["abc"], ["-1x"], ["0", "COUNT", "0"], ["0", "COUNT", "-3"], ["0", "COUNT", "x"],
                     ["0", "MATCH"], ["0", "BOGUS", "1"], ["0", "COUNT"]):
            try:
                client.execute_command("SCAN", *args)
                errors.append(None)
            except redis.ResponseError as error:
                errors.append(str(error))
        answers.append(errors)
    assert answers[0] == answers[1]
    assert all(answers[0]), "every one of these is refused"


@pytest.mark.parametrize("count", [10, 500])
def test_every_key_present_throughout_is_returned_across_growth(ferrite_and_redis, count):
    stable = [f"stable:{i}".encode() for i in range(20_000)]
    doomed = [f"doomed:{i}".encode() for i in range(20_000)]
    for name, client in zip(("ferrite", "redis"), ferrite_and_redis):
        load(client, stable)
        load(client, doomed)
        added = []

        def change(call):
            # Grow the table well past its first size, and erase keys not in the stable set.
            if len(added) < 150_000:
                batch = [f"added:{call}:{i}".encode() for i in range(2000)]
                load(client, batch)
                added.extend(batch)
            start = (call * 50) % len(doomed)
            client.delete(*doomed[start:start + 50])

        keys, calls = walk(client, between=change, count=count)
        seen = set(keys)
        missing = [key for key in stable if key not in seen]
        assert not missing, f"{name}: {len(missing)} keys present throughout were not returned"
        ever_present = set(stable) | set(doomed) | set(added)
        assert seen <= ever_present, f"{name} returned keys that never existed"
        assert client.dbsize() > 150_000, f"{name}: the walk ended before the table grew"
