"""Users on the RESP listener (`ferrite-server --users FILE`), end to end.

The users file is written by the real `ferrite user` CLI (passwords on standard input), then a
server started on it is reached by redis-py, by `redis-cli` and by raw RESP bytes, in clear and
over TLS. Covered:

- the CLI: the file it builds lists the grants and never a password hash, and is owner-only;
- the rights matrix: users `writer` (read,write on the default pool), `reader` (read),
  `stranger` (rights on other pools only), `default` (read, authenticated by password alone)
  and `scribe` (write without read) run GET, MGET, EXISTS, SCAN, DBSIZE, SET, DEL, MSET and
  INCR, in clear and over TLS, with RESP2 (`AUTH [user] password`) and RESP3 (`HELLO 3 AUTH
  user password`); a refused command answers NOPERM and changes nothing, as the writer reads
  back;
- before authentication: NOAUTH for everything but AUTH, HELLO with AUTH and QUIT; WRONGPASS
  (the same text for a wrong password and an unknown user) leaves the connection open and
  unauthenticated; `HELLO 3 AUTH` answers the server map;
- `redis-cli --user/--pass` (and `-a`), in clear and with `--tls`;
- SIGHUP: rights granted, revoked or deleted in the file apply to connections already
  authenticated once the server has reloaded it; a file that does not load changes nothing;
- the per-user connection quota, and the room a closed connection gives back;
- a server without users answers AUTH as Redis does when the default user has no password.

Each server is a `conftest.Server` child process, stopped by its own process id.
"""

import json
import os
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conftest import RedisServer, Server
from ferrite_process import CLI_BINARY, ferrite_user
from test_tls import make_certificates


# `[resp] pool` defaults to "redis", and shard i serves `@i/<pool>` (`RespConfig::pool_name`);
# `test_server_log_names_the_default_pool` checks that this is the pool the server created.
DEFAULT_POOL = "@0/redis"

PASSWORDS = {
    "writer": "writer-secret-1",
    "reader": "reader-secret-1",
    "stranger": "stranger-secret-1",
    "default": "default-secret-1",
    "scribe": "scribe-secret-1",
}

NOAUTH = "NOAUTH Authentication required."
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
RELOADED = "reloaded the users file"
RELOAD_REJECTED = "kept the previous users"
WAIT_TIMEOUT_S = 10


# ---------------------------------------------------------------------------------------------
# The users file, through `ferrite user`.


def add_user(users_file: Path, name: str, grants: tuple = ()):
    """Adds `name` with its password from PASSWORDS and the (pools, rights) grants."""
    output = ferrite_user(users_file, "add", name, password=PASSWORDS[name])
    assert f"added user '{name}'" in output, output
    for pools, rights in grants:
        output = ferrite_user(users_file, "grant", name, pools, rights)
        assert f"to user '{name}'" in output, output


def write_users_file(directory: Path) -> Path:
    """The users of the matrix: writer, reader, stranger, default and scribe."""
    users_file = directory / "users.toml"
    add_user(users_file, "writer", [(DEFAULT_POOL, "read,write")])
    add_user(users_file, "reader", [(DEFAULT_POOL, "read")])
    # Every right, but on pools other than the default one: none of them on `@0/redis`.
    add_user(users_file, "stranger", [("elsewhere*", "all"), ("@1/redis", "read,write")])
    add_user(users_file, "default", [(DEFAULT_POOL, "read")])
    # Write without read: what tells a command that needs `write` from one that also reads.
    add_user(users_file, "scribe", [(DEFAULT_POOL, "write")])
    return users_file


# ---------------------------------------------------------------------------------------------
# Raw RESP, for what redis-py hides: replies before authentication, exact error texts.


@dataclass(frozen=True)
class Error:
    """An error reply, by its full text (`NOAUTH ...`)."""
    text: str


class Wire:
    """One RESP connection spoken byte by byte: `command` sends one command and returns its
    reply (an `Error` for an error reply, bytes for bulk strings, str for simple strings)."""

    def __init__(self, address: tuple, ca: Path | None = None):
        sock = socket.create_connection(address, timeout=10)
        if ca is not None:
            context = ssl.create_default_context(cafile=str(ca))
            sock = context.wrap_socket(sock, server_hostname=address[0])
        self.sock = sock
        self.reader = sock.makefile("rb")

    def command(self, *args):
        encoded = [arg if isinstance(arg, bytes) else str(arg).encode() for arg in args]
        frame = b"*%d\r\n" % len(encoded) + b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in encoded)
        self.sock.sendall(frame)
        return self.reply()

    def reply(self):
        line = self.reader.readline()
        if not line:
            raise ConnectionError("the server closed the connection")
        assert line.endswith(b"\r\n"), f"unterminated line {line!r}"
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return Error(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            length = int(rest)
            return None if length < 0 else self.reader.read(length + 2)[:-2]
        if kind == b"*":
            length = int(rest)
            return None if length < 0 else [self.reply() for _ in range(length)]
        if kind == b"%":
            return {self.reply(): self.reply() for _ in range(int(rest))}
        if kind == b"_":
            return None
        raise AssertionError(f"unexpected reply {line!r}")

    def closed_by_server(self) -> bool:
        """Whether the server has closed the connection (reads nothing more)."""
        return self.reader.read(1) == b""

    def close(self):
        self.reader.close()
        self.sock.close()


def authenticated_wire(address: tuple, user: str, ca: Path | None = None) -> Wire:
    wire = Wire(address, ca)
    assert wire.command("AUTH", user, PASSWORDS[user]) == "OK"
    return wire


# ---------------------------------------------------------------------------------------------
# Servers.


def users_client(server: Server, user: str, protocol: int, ca: Path | None = None, **options) -> redis.Redis:
    """A redis-py client authenticated as `user`: with RESP2 redis-py sends `AUTH user password`
    (`AUTH password` for `default`), with RESP3 `HELLO 3 AUTH user password`."""
    credentials = {"password": PASSWORDS[user]}
    if user != "default":
        credentials["username"] = user
    tls = {"ssl": True, "ssl_ca_certs": str(ca)} if ca is not None else {}
    return server.client(protocol, **credentials, **tls, **options)


def start_server(users_file: Path | None, tls_dir: Path | None = None) -> Server:
    args = []
    if users_file is not None:
        args += ["--users", str(users_file)]
    if tls_dir is not None:
        args += ["--tls-cert", str(tls_dir / "server.pem"), "--tls-key", str(tls_dir / "server-key.pem")]
    return Server(extra_args=tuple(args))


def stop_checked(server: Server):
    status = server.process.poll()
    server.stop()
    assert status is None, f"the server died during the test (status {status})"


def wait_for_log(server: Server, text: str, count: int):
    """Waits until the server's log holds `text` at least `count` times."""
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while server.stderr_text().count(text) < count:
        assert server.process.poll() is None, f"the server exited:\n{server.stderr_text()}"
        assert time.monotonic() < deadline, f"no {count}x '{text}' in the log within {WAIT_TIMEOUT_S} s"
        time.sleep(0.05)


def reload_users(server: Server, expect: str = RELOADED):
    """Sends SIGHUP and waits until the server logs that it read the file (`expect`)."""
    seen = server.stderr_text().count(expect)
    os.kill(server.process.pid, signal.SIGHUP)
    wait_for_log(server, expect, seen + 1)


@dataclass
class UsersServer:
    server: Server
    users_file: Path
    ca: Path | None
    transport: str

    @property
    def address(self) -> tuple:
        return self.server.resp[0]

    def client(self, user: str, protocol: int = 2, **options) -> redis.Redis:
        return users_client(self.server, user, protocol, self.ca, **options)

    def wire(self) -> Wire:
        return Wire(self.address, self.ca)


def need_openssl():
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")


def need_redis_cli():
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not installed (make deps)")


@pytest.fixture(scope="module", params=["clear", "tls"])
def users_server(request, tmp_path_factory):
    """A server with the matrix's users, shared by the tests of a module that only read or write
    their own keys: one in clear, one over TLS."""
    directory = tmp_path_factory.mktemp(f"users-{request.param}")
    ca = None
    if request.param == "tls":
        need_openssl()
        make_certificates(directory)
        ca = directory / "ca.pem"
    users_file = write_users_file(directory)
    server = start_server(users_file, directory if ca else None)
    yield UsersServer(server, users_file, ca, request.param)
    stop_checked(server)


@pytest.fixture
def own_server(tmp_path):
    """A clear server with the matrix's users that this test alone uses (and may reconfigure)."""
    users_file = write_users_file(tmp_path)
    servers = []

    def start() -> UsersServer:
        server = start_server(users_file)
        servers.append(server)
        return UsersServer(server, users_file, None, "clear")

    yield start
    for server in servers:
        stop_checked(server)


# ---------------------------------------------------------------------------------------------
# The users file.


def test_cli_builds_the_users_file(tmp_path):
    users_file = write_users_file(tmp_path)
    assert stat.S_IMODE(users_file.stat().st_mode) == 0o600, "the file holds password hashes"
    listing = subprocess.run([str(CLI_BINARY), "--json", "user", "list", "--file", str(users_file)],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    users = json.loads(listing)["users"]
    assert sorted(users) == ["default", "reader", "scribe", "stranger", "writer"]
    assert users["writer"]["grants"] == [{"pools": DEFAULT_POOL, "rights": ["read", "write"]}]
    assert users["reader"]["grants"] == [{"pools": DEFAULT_POOL, "rights": ["read"]}]
    assert all(user["password"] is True for user in users.values())
    assert "argon2" not in listing and "argon2" in users_file.read_text(), "hashes stay in the file"
    short = subprocess.run([str(CLI_BINARY), "user", "add", "shorty", "--file", str(users_file)],
                           input="short\n", capture_output=True, text=True, timeout=60)
    assert short.returncode != 0 and "at least 8" in short.stderr, short.stderr
    assert "shorty" not in users_file.read_text()


def test_server_log_names_the_default_pool(users_server):
    # The shard creates its default pool when the first RESP client connects.
    client = users_server.client("writer")
    assert client.ping() is True
    client.close()
    wait_for_log(users_server.server, f"created the RESP default pool shard=0 pool={DEFAULT_POOL}", 1)


# ---------------------------------------------------------------------------------------------
# The rights matrix.

READ, WRITE = "read", "write"

# The rights each user holds on the default pool.
RIGHTS = {"writer": {READ, WRITE}, "reader": {READ}, "stranger": set(), "default": {READ}, "scribe": {WRITE}}


@dataclass(frozen=True)
class Keys:
    """A test's own keys: `key` holds "before", `counter` holds "41", `absent` does not exist."""
    prefix: str

    @property
    def key(self):
        return f"{self.prefix}:key"

    @property
    def counter(self):
        return f"{self.prefix}:counter"

    @property
    def absent(self):
        return f"{self.prefix}:absent"


def scan_all(client: redis.Redis, pattern: str) -> set:
    found, cursor = set(), 0
    while True:
        cursor, keys = client.scan(cursor, match=pattern, count=100)
        found.update(keys)
        if cursor == 0:
            return found


@dataclass(frozen=True)
class Command:
    """A command of the matrix: the rights it needs, how to run it, and what an allowed run
    must have answered and left behind (checked through the writer)."""
    name: str
    needs: frozenset
    run: object
    check: object


def check_get(result, writer, keys):
    assert result == b"before"


def check_mget(result, writer, keys):
    assert result == [b"before", None]


def check_exists(result, writer, keys):
    assert result == 2, "key and counter exist"


def check_scan(result, writer, keys):
    assert result == {keys.key.encode(), keys.counter.encode()}


def check_dbsize(result, writer, keys):
    assert result == writer.dbsize() and result >= 2


def check_set(result, writer, keys):
    assert result is True
    assert writer.get(keys.key) == b"after"


def check_del(result, writer, keys):
    assert result == 1
    assert writer.exists(keys.key) == 0


def check_mset(result, writer, keys):
    assert result is True
    assert writer.mget(keys.key, keys.absent) == [b"after", b"new"]


def check_incr(result, writer, keys):
    assert result == 42
    assert writer.get(keys.counter) == b"42"


COMMANDS = [
    Command("GET", frozenset({READ}), lambda c, k: c.get(k.key), check_get),
    Command("MGET", frozenset({READ}), lambda c, k: c.mget(k.key, k.absent), check_mget),
    Command("EXISTS", frozenset({READ}), lambda c, k: c.exists(k.key, k.counter, k.absent), check_exists),
    Command("SCAN", frozenset({READ}), lambda c, k: scan_all(c, f"{k.prefix}:*"), check_scan),
    Command("DBSIZE", frozenset({READ}), lambda c, k: c.dbsize(), check_dbsize),
    Command("SET", frozenset({WRITE}), lambda c, k: c.set(k.key, "after"), check_set),
    Command("DEL", frozenset({WRITE}), lambda c, k: c.delete(k.key), check_del),
    Command("MSET", frozenset({WRITE}), lambda c, k: c.mset({k.key: "after", k.absent: "new"}), check_mset),
    # On a pool without a plugin INCR needs no `invoke`; it reads the counter and writes it
    # back, so it needs `read` too, as Redis's key permissions want both (%RW) for INCR.
    Command("INCR", frozenset({READ, WRITE}), lambda c, k: c.incr(k.counter), check_incr),
]


def assert_noperm(raised: Exception, user: str, rights: set):
    """`raised` is Redis's NOPERM error, naming the user, one of `rights` and the pool."""
    text = str(raised)
    assert isinstance(raised, redis.exceptions.NoPermissionError) or text.startswith("NOPERM"), repr(raised)
    text = text.removeprefix("NOPERM ")
    assert any(text == f"user '{user}' has no {right} right on pool '{DEFAULT_POOL}'" for right in rights), text


def assert_unchanged(writer: redis.Redis, keys: Keys):
    assert writer.mget(keys.key, keys.counter, keys.absent) == [b"before", b"41", None]


@pytest.fixture(scope="module")
def clients(users_server):
    """One redis-py client per (user, protocol) on the module's server, closed at the end."""
    made = {}

    def get(user: str, protocol: int) -> redis.Redis:
        if (user, protocol) not in made:
            made[user, protocol] = users_server.client(user, protocol)
        return made[user, protocol]

    yield get
    for client in made.values():
        client.close()


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2-auth", "resp3-hello-auth"])
@pytest.mark.parametrize("user", list(RIGHTS))
@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: command.name)
def test_rights_matrix(users_server, clients, command, user, protocol):
    writer = clients("writer", 2)
    keys = Keys(f"{users_server.transport}:{protocol}:{user}:{command.name}")
    writer.mset({keys.key: "before", keys.counter: "41"})
    writer.delete(keys.absent)
    client = clients(user, protocol)
    if command.needs <= RIGHTS[user]:
        command.check(command.run(client, keys), writer, keys)
    else:
        with pytest.raises(redis.exceptions.ResponseError) as raised:
            command.run(client, keys)
        assert_noperm(raised.value, user, command.needs - RIGHTS[user])
        assert_unchanged(writer, keys)
    assert client.ping() is True, "a refusal leaves the connection usable"


# ---------------------------------------------------------------------------------------------
# Before authentication.


def test_only_auth_hello_and_quit_before_authentication(users_server):
    wire = users_server.wire()
    try:
        for command in [("PING",), ("GET", "noauth:key"), ("SET", "noauth:key", "v"), ("DBSIZE",),
                        ("MULTI",), ("CLIENT", "ID"), ("SELECT", "0")]:
            assert wire.command(*command) == Error(NOAUTH), command
        refused = wire.command("HELLO", "3")
        assert isinstance(refused, Error) and refused.text.startswith("NOAUTH "), refused
        assert wire.command("PING") == Error(NOAUTH), "HELLO without AUTH authenticated nothing"
        assert wire.command("AUTH", "writer", PASSWORDS["writer"]) == "OK"
        assert wire.command("PING") == "PONG", "the protocol stayed RESP2: HELLO 3 was refused"
        assert wire.command("EXISTS", "noauth:key") == 0, "the SET before AUTH changed nothing"
    finally:
        wire.close()


def test_quit_before_authentication(users_server):
    wire = users_server.wire()
    try:
        assert wire.command("QUIT") == "OK"
        assert wire.closed_by_server()
    finally:
        wire.close()


def test_wrong_password_leaves_the_connection_open(users_server):
    wire = users_server.wire()
    try:
        assert wire.command("AUTH", "writer", "not-the-password") == Error(WRONGPASS)
        assert wire.command("AUTH", "nobody-here", "not-the-password") == Error(WRONGPASS), \
            "an unknown user is told the same as a wrong password"
        assert wire.command("AUTH", "not-the-password") == Error(WRONGPASS), "AUTH password is the default user's"
        assert wire.command("AUTH", PASSWORDS["writer"]) == Error(WRONGPASS), "the writer's password is not default's"
        assert wire.command("HELLO", "3", "AUTH", "writer", "not-the-password") == Error(WRONGPASS)
        assert wire.command("GET", "k") == Error(NOAUTH), "still unauthenticated"
        assert wire.command("AUTH", "writer", PASSWORDS["writer"]) == "OK"
        assert wire.command("SET", "wrongpass:key", "v") == "OK"
        assert wire.command("GET", "wrongpass:key") == b"v"
        # A failed AUTH on an authenticated connection keeps who it acts for.
        assert wire.command("AUTH", "reader", "not-the-password") == Error(WRONGPASS)
        assert wire.command("SET", "wrongpass:key", "w") == "OK", "still the writer"
    finally:
        wire.close()


def test_auth_password_is_the_default_user(users_server):
    wire = users_server.wire()
    try:
        assert wire.command("AUTH", PASSWORDS["default"]) == "OK"
        assert wire.command("GET", "default:key") is None
        reply = wire.command("SET", "default:key", "v")
        assert reply == Error(f"NOPERM user 'default' has no write right on pool '{DEFAULT_POOL}'"), reply
    finally:
        wire.close()


def test_hello_auth_answers_the_server_map(users_server):
    wire = users_server.wire()
    try:
        reply = wire.command("HELLO", "3", "AUTH", "reader", PASSWORDS["reader"], "SETNAME", "auth-test")
        assert isinstance(reply, dict), reply
        assert reply[b"server"] == b"ferrite" and reply[b"proto"] == 3, reply
        assert isinstance(reply[b"id"], int)
        assert wire.command("CLIENT", "GETNAME") == b"auth-test"
        assert wire.command("GET", "hello:key") is None
        refused = wire.command("SET", "hello:key", "v")
        assert refused == Error(f"NOPERM user 'reader' has no write right on pool '{DEFAULT_POOL}'"), refused
        # Once authenticated, HELLO needs no AUTH; in RESP2 the map is a flat array.
        fields = wire.command("HELLO", "2")
        assert isinstance(fields, list) and dict(zip(fields[::2], fields[1::2]))[b"proto"] == 2, fields
    finally:
        wire.close()


def test_redis_py_before_and_after_authentication(users_server):
    options = {"ssl": True, "ssl_ca_certs": str(users_server.ca)} if users_server.ca else {}
    # redis-py retries a refused connection (with backoff) by default: a refusal is final here.
    options["retry"] = Retry(NoBackoff(), 0)
    anonymous = users_server.server.client(2, **options)
    with pytest.raises(redis.exceptions.AuthenticationError, match="NOAUTH|Authentication required"):
        anonymous.ping()
    with pytest.raises(redis.exceptions.AuthenticationError):
        anonymous.set("redis-py:key", "v")
    anonymous.close()
    anonymous = users_server.server.client(3, **options)
    with pytest.raises(redis.exceptions.AuthenticationError, match="HELLO must be called with the client already"):
        anonymous.ping()  # redis-py connects with HELLO 3, without AUTH
    anonymous.close()
    wrong = users_server.server.client(3, username="writer", password="not-the-password", **options)
    with pytest.raises(redis.exceptions.AuthenticationError, match="invalid username-password pair"):
        wrong.ping()
    wrong.close()
    writer = users_server.client("writer", 3)
    assert writer.ping() is True
    assert writer.exists("redis-py:key") == 0
    connection = writer.connection_pool.get_connection()
    try:
        metadata = connection.handshake_metadata
        assert metadata[b"server"] == b"ferrite" and metadata[b"proto"] == 3, metadata
    finally:
        writer.connection_pool.release(connection)
        writer.close()


# ---------------------------------------------------------------------------------------------
# redis-cli.


def redis_cli(server: UsersServer, *args: str) -> subprocess.CompletedProcess:
    host, port = server.address
    tls = ["--tls", "--cacert", str(server.ca)] if server.ca else []
    return subprocess.run(["redis-cli", *tls, "--no-auth-warning", "-h", host, "-p", str(port), *args],
                          capture_output=True, text=True, timeout=30)


def test_redis_cli_with_user_and_password(users_server):
    need_redis_cli()
    writer = ["--user", "writer", "--pass", PASSWORDS["writer"]]
    result = redis_cli(users_server, *writer, "SET", "cli:key", "from redis-cli")
    assert result.stdout.strip() == "OK", result.stdout + result.stderr
    result = redis_cli(users_server, *writer, "GET", "cli:key")
    assert result.stdout.strip() == "from redis-cli", result.stdout + result.stderr

    result = redis_cli(users_server, "--user", "reader", "--pass", PASSWORDS["reader"], "SET", "cli:key", "nope")
    assert "NOPERM" in result.stdout + result.stderr, result.stdout + result.stderr
    result = redis_cli(users_server, "-a", PASSWORDS["default"], "GET", "cli:key")
    assert result.stdout.strip() == "from redis-cli", result.stdout + result.stderr

    result = redis_cli(users_server, "--user", "writer", "--pass", "not-the-password", "SET", "cli:key", "wrong")
    output = result.stdout + result.stderr
    assert "WRONGPASS" in output or "AUTH failed" in output, output
    assert "NOAUTH" in output, f"the command ran unauthenticated and was refused: {output}"
    assert users_server.client("writer").get("cli:key") == b"from redis-cli"


# ---------------------------------------------------------------------------------------------
# SIGHUP.


def test_sighup_applies_grants_to_authenticated_connections(own_server):
    server = own_server()
    reader = server.client("reader", single_connection_client=True)
    writer = server.client("writer", single_connection_client=True)
    writer.set("hup:key", "before")
    with pytest.raises(redis.exceptions.ResponseError) as raised:
        reader.set("hup:key", "by reader")
    assert_noperm(raised.value, "reader", {WRITE})

    ferrite_user(server.users_file, "grant", "reader", DEFAULT_POOL, "write")
    with pytest.raises(redis.exceptions.ResponseError):
        reader.set("hup:key", "by reader")
    assert writer.get("hup:key") == b"before", "the file is read on SIGHUP, not when it changes"

    reload_users(server.server)
    assert reader.set("hup:key", "by reader") is True, "the same connection now has write"
    assert writer.get("hup:key") == b"by reader"

    ferrite_user(server.users_file, "revoke", "reader", DEFAULT_POOL, "read,write")
    reload_users(server.server)
    with pytest.raises(redis.exceptions.ResponseError) as raised:
        reader.get("hup:key")
    assert_noperm(raised.value, "reader", {READ})

    # A file that does not load changes nothing.
    good = server.users_file.read_text()
    server.users_file.write_text(good + "\n[users.broken\n")
    reload_users(server.server, expect=RELOAD_REJECTED)
    assert writer.set("hup:key", "still the writer") is True
    with pytest.raises(redis.exceptions.ResponseError):
        reader.get("hup:key")
    server.users_file.write_text(good)

    # A deleted user is refused from then on, on its open connection and at AUTH.
    ferrite_user(server.users_file, "del", "writer")
    reload_users(server.server)
    with pytest.raises(redis.exceptions.ResponseError) as raised:
        writer.get("hup:key")
    assert_noperm(raised.value, "writer", {READ})
    wire = server.wire()
    try:
        assert wire.command("AUTH", "writer", PASSWORDS["writer"]) == Error(WRONGPASS)
    finally:
        wire.close()
    reader.close()
    writer.close()


# ---------------------------------------------------------------------------------------------
# Connection quota.


def test_connection_quota(own_server, tmp_path):
    users_file = tmp_path / "users.toml"
    output = ferrite_user(users_file, "quota", "writer", "--connections", "2")
    assert "connections 2" in output, output
    server = own_server()
    first = authenticated_wire(server.address, "writer")
    second = Wire(server.address)
    third = Wire(server.address)
    try:
        hello = second.command("HELLO", "3", "AUTH", "writer", PASSWORDS["writer"])
        assert isinstance(hello, dict), f"HELLO AUTH counts like AUTH: {hello}"
        refused = third.command("AUTH", "writer", PASSWORDS["writer"])
        assert isinstance(refused, Error) and "quota" in refused.text and "connections" in refused.text, refused
        assert refused.text.startswith("ERR "), refused
        assert third.command("HELLO", "3", "AUTH", "writer", PASSWORDS["writer"]) == refused
        assert third.command("GET", "quota:key") == Error(NOAUTH), "the refused connection acts for nobody"
        assert first.command("AUTH", "writer", PASSWORDS["writer"]) == "OK", "the same user again takes no slot"

        assert first.command("SET", "quota:key", "one") == "OK"
        assert second.command("GET", "quota:key") == b"one"

        assert third.command("AUTH", "reader", PASSWORDS["reader"]) == "OK", "quotas are per user"
        assert third.command("AUTH", "writer", PASSWORDS["writer"]) == refused
        assert third.command("GET", "quota:key") == b"one", "still the reader"
        assert third.command("SET", "quota:key", "x") == \
            Error(f"NOPERM user 'reader' has no write right on pool '{DEFAULT_POOL}'")

        first.close()
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        while (reply := third.command("AUTH", "writer", PASSWORDS["writer"])) != "OK":
            assert reply == refused, reply
            assert time.monotonic() < deadline, "a closed connection did not give its slot back"
            time.sleep(0.05)
        assert third.command("SET", "quota:key", "three") == "OK"
        assert second.command("GET", "quota:key") == b"three"
    finally:
        for wire in (first, second, third):
            wire.close()


# ---------------------------------------------------------------------------------------------
# Without users.


def auth_replies(address: tuple) -> list:
    wire = Wire(address)
    try:
        return [
            wire.command("AUTH", "some-password"),
            wire.command("AUTH", "default", "any-password"),
            wire.command("AUTH", "somebody", "any-password"),
            wire.command("PING"),
        ]
    finally:
        wire.close()


NO_USERS_AUTH_REPLIES = [
    Error("ERR AUTH <password> called without any password configured for the default user. "
          "Are you sure your configuration is correct?"),
    "OK",
    Error(WRONGPASS),
    "PONG",
]


def test_auth_without_users_answers_as_redis(server):
    assert auth_replies(server.resp[0]) == NO_USERS_AUTH_REPLIES
    if shutil.which("redis-server") is not None:
        reference = RedisServer()
        try:
            assert auth_replies(("127.0.0.1", reference.port)) == NO_USERS_AUTH_REPLIES
        finally:
            reference.stop()
