"""Users and TLS: `connect(user=, password=)` and `connect(tls_ca_file=)` against servers that need them.

The users file is written by the real `ferrite user` CLI. Proves that a user with rights on every
pool works normally, that a wrong password, an unknown user and no user at all raise
`AuthenticationFailed` (in both APIs), that a user with read rights only gets `PermissionDenied`
on a write, and that a server speaking TLS is reached with its CA, refuses a client in the clear,
and is refused when the client does not trust it.
"""

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest

import ferrite
import ferrite.aio
from ferrite_servers import Server, ferrite_user

PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def users_server(tmp_path_factory):
    directory = tmp_path_factory.mktemp("users")
    users = directory / "users.toml"
    ferrite_user(users, "add", "alice", password=PASSWORD)
    ferrite_user(users, "grant", "alice", "*", "all")
    ferrite_user(users, "add", "reader", password="reader-password")
    ferrite_user(users, "grant", "reader", "*", "read")
    server = Server(shards=1, extra_args=("--users", str(users)))
    yield server
    server.stop()


def test_a_user_with_every_right(users_server):
    with ferrite.connect(users_server.address, user="alice", password=PASSWORD) as session:
        with session.create_pool("alices") as pool:
            pool.put("k", "v")
            assert pool.get("k") == b"v"


@pytest.mark.parametrize(
    ("user", "password"),
    [("alice", "wrong password"), ("mallory", PASSWORD), (None, None), ("alice", None)],
    ids=["wrong-password", "unknown-user", "no-user", "no-password"],
)
def test_authentication_failures(users_server, user, password):
    with pytest.raises(ferrite.AuthenticationFailed) as raised:
        ferrite.connect(users_server.address, user=user, password=password)
    assert raised.value.code == "authentication_failed" and raised.value.number == 25


def test_authentication_failure_through_asyncio(users_server):
    async def main():
        with pytest.raises(ferrite.AuthenticationFailed):
            await ferrite.aio.connect(users_server.address, user="alice", password="nope")
        async with await ferrite.aio.connect(users_server.address, user="alice", password=PASSWORD) as session:
            assert [s["shard"] for s in await session.stats()] == [0]

    asyncio.run(main())


def test_a_reader_may_not_write(users_server):
    with ferrite.connect(users_server.address, user="alice", password=PASSWORD) as session:
        session.create_pool("shared").close()
    with ferrite.connect(users_server.address, user="reader", password="reader-password") as session:
        with session.open_pool("shared") as pool:
            with pytest.raises(ferrite.PermissionDenied) as raised:
                pool.put("k", "v")
            assert raised.value.code == "permission_denied"
            with pytest.raises(ferrite.KeyNotFound):
                pool.get("k")


def make_certificates(directory: Path):
    """A CA, and a certificate for 127.0.0.1 and localhost that it signed."""
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory, timeout=60)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca-key.pem",
            "-out", "ca.pem", "-days", "2", "-subj", "/CN=Ferrite Python test CA")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "server-key.pem",
            "-out", "server.csr", "-subj", "/CN=localhost")
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "san.ext")


def test_tls(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    make_certificates(tmp_path)
    server = Server(shards=2, extra_args=("--tls-cert", str(tmp_path / "server.pem"),
                                          "--tls-key", str(tmp_path / "server-key.pem")))
    try:
        with ferrite.connect(server.address, tls_ca_file=tmp_path / "ca.pem") as session:
            for name in ("sealed-a", "sealed-b", "sealed-c"):  # pools on both shards
                with session.create_pool(name) as pool:
                    pool.put("k", name)
                    assert pool.get("k") == name.encode()
        with pytest.raises(ferrite.ConnectionFailed, match="speaks TLS and this client connected in clear"):
            ferrite.connect(server.address, connect_timeout=3)  # in the clear
        with pytest.raises(ferrite.ConnectionFailed, match="TLS"):
            ferrite.connect(server.address, tls_ca_file=tmp_path / "server.pem")  # not the CA

        async def main():
            async with await ferrite.aio.connect(server.address, tls_ca_file=str(tmp_path / "ca.pem")) as session:
                async with await session.open_pool("sealed-a") as pool:
                    return await pool.get("k")

        assert asyncio.run(main()) == b"sealed-a"
    finally:
        server.stop()
