"""The RESP listener over TLS, reached by Redis's own tools: redis-py with `ssl=True` and
`redis-cli --tls`. Certificates are made by the test with the `openssl` command."""

import shutil
import subprocess
from pathlib import Path

import pytest
import redis

from conftest import Server


def make_certificates(directory: Path):
    """A CA, and a certificate for 127.0.0.1 and localhost that it signed."""
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory, timeout=60)

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca-key.pem",
            "-out", "ca.pem", "-days", "2", "-subj", "/CN=Ferrite test CA")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "server-key.pem",
            "-out", "server.csr", "-subj", "/CN=localhost")
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "san.ext")


@pytest.fixture
def tls_server(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    make_certificates(tmp_path)
    server = Server(extra_args=("--tls-cert", str(tmp_path / "server.pem"), "--tls-key", str(tmp_path / "server-key.pem")))
    yield server, tmp_path / "ca.pem"
    server.stop()


def test_redis_py_with_ssl(tls_server):
    server, ca = tls_server
    host, port = server.resp[0]
    client = redis.Redis(host=host, port=port, ssl=True, ssl_ca_certs=str(ca), socket_timeout=10)
    assert client.set("sealed", "value")
    assert client.get("sealed") == b"value"
    clear = redis.Redis(host=host, port=port, socket_timeout=10)
    with pytest.raises(redis.ConnectionError):
        clear.ping()
    assert client.ping(), "a clear client's failure leaves the others served"


def test_redis_cli_with_tls(tls_server):
    server, ca = tls_server
    host, port = server.resp[0]
    result = subprocess.run(["redis-cli", "--tls", "--cacert", str(ca), "-h", host, "-p", str(port), "PING"],
                            capture_output=True, text=True, timeout=30)
    assert result.stdout.strip() == "PONG", result.stdout + result.stderr
