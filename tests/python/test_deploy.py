"""The deployment files in deploy/: each is checked by the tool that reads it, where this machine
has one, and against the server they deploy."""

import json
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from conftest import Server
from ferrite_process import REPO_ROOT, SERVER_BINARY

DEPLOY = REPO_ROOT / "deploy"


def test_the_shipped_configuration_is_valid():
    result = subprocess.run([str(SERVER_BINARY), "--check-config", str(DEPLOY / "ferrite.toml")],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert 'data_dir = "/var/lib/ferrite"' in result.stdout
    assert "enabled = true" in result.stdout, "RESP is on"
    assert 'listen = "0.0.0.0:9464"' in result.stdout, "metrics are on"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_the_systemd_unit_verifies(tmp_path):
    # systemd-analyze checks that ExecStart's binary exists: point it at the one just built.
    unit = (DEPLOY / "ferrite.service").read_text().replace("/usr/local/bin/ferrite-server", str(SERVER_BINARY))
    assert "Type=notify" in unit
    path = tmp_path / "ferrite.service"
    path.write_text(unit)
    result = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    complaints = [line for line in (result.stdout + result.stderr).splitlines() if "ferrite.service" in line]
    assert result.returncode == 0 and not complaints, result.stdout + result.stderr


def test_compose_and_kubernetes_files_name_the_servers_ports_and_volume():
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    service = compose["services"]["ferrite"]
    assert service["build"]["dockerfile"] == "deploy/Dockerfile"
    assert {port.rsplit(":", 1)[1] for port in service["ports"]} == {"11911", "6379", "9464"}
    assert service["volumes"] == ["ferrite-data:/var/lib/ferrite"]
    documents = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "statefulset.yaml").read_text()))
    kinds = {document["kind"]: document for document in documents}
    assert set(kinds) == {"Service", "StatefulSet"}
    pod = kinds["StatefulSet"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["readinessProbe"]["exec"]["command"][0] == "ferrite"
    assert container["volumeMounts"][0]["mountPath"] == "/var/lib/ferrite"
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_the_dockerfile_runs_as_a_user_with_a_volume_and_a_health_check():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    stages = re.findall(r"^FROM ", dockerfile, re.MULTILINE)
    assert len(stages) == 2, "a build stage and a small runtime stage"
    for instruction in ("USER 10001:10001", 'VOLUME ["/var/lib/ferrite"]', "HEALTHCHECK", "COPY deploy/ferrite.toml"):
        assert instruction in dockerfile, instruction


def test_the_dockerfile_passes_hadolint():
    hadolint = Path(sys.executable).with_name("hadolint")
    result = subprocess.run([str(hadolint), "--no-color", str(DEPLOY / "Dockerfile")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_metric_the_dashboard_plots_is_served():
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    plotted = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"\bferrite_[a-z_]+", target["expr"])}
    assert plotted, "the dashboard plots something"
    server = Server(extra_args=("--metrics-listen", "127.0.0.1:0"))
    try:
        server.client(protocol=2).set("k", "v")
        with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
            served = set(re.findall(r"^(ferrite_[a-z_]+)", response.read().decode(), re.MULTILINE))
    finally:
        server.stop()
    assert plotted <= served, f"plotted but not served: {plotted - served}"
