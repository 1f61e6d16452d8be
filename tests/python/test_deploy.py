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


def test_the_compose_file_names_the_servers_ports_and_volume():
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    service = compose["services"]["ferrite"]
    assert service["build"]["dockerfile"] == "deploy/Dockerfile"
    assert {port.rsplit(":", 1)[1] for port in service["ports"]} == {"11911", "6379", "9464"}
    assert service["volumes"] == ["ferrite-data:/var/lib/ferrite"]


def option(command: list, name: str) -> str:
    return command[command.index(name) + 1]


def test_the_cluster_compose_file_gives_each_node_its_id_name_ports_and_volume():
    services = yaml.safe_load((DEPLOY / "docker-compose.cluster.yml").read_text())["services"]
    nodes = {name: service for name, service in services.items() if "--node-id" in service.get("command", [])}
    assert sorted(nodes) == ["node1", "node2", "node3"]
    assert sorted(int(option(node["command"], "--node-id")) for node in nodes.values()) == [1, 2, 3]
    host_ports = []
    for name, node in nodes.items():
        assert option(node["command"], "--advertise-host") == name, "each node advertises its service name"
        assert option(node["command"], "--peer-listen") == "0.0.0.0:7300"
        assert node["volumes"] == [f"{name}-data:/var/lib/ferrite"], "a volume of its own"
        assert node["healthcheck"]["test"][:2] == ["CMD", "ferrite"]
        assert {port.rsplit(":", 1)[1] for port in node["ports"]} == {"11911", "6379"}
        assert all(port.startswith("127.0.0.1:") for port in node["ports"]), "published on loopback only"
        host_ports += [re.search(r"-(\d+)}", port).group(1) for port in node["ports"]]
    assert len(set(host_ports)) == len(host_ports), f"every node on host ports of its own: {host_ports}"
    init = services["cluster-init"]
    assert init["entrypoint"] == ["ferrite"] and init["command"][2:4] == ["cluster", "init"]
    members = [init["command"][index + 1] for index, word in enumerate(init["command"]) if word == "--node"]
    assert members == [f"{name}:11911" for name in sorted(nodes)]
    assert set(init["depends_on"]) == set(nodes)


@pytest.mark.parametrize("tool", [["docker", "compose"], ["docker-compose"]], ids=" ".join)
@pytest.mark.parametrize("file", ["docker-compose.yml", "docker-compose.cluster.yml"])
def test_the_compose_files_are_valid(tool, file):
    if shutil.which(tool[0]) is None or subprocess.run([*tool, "version"], capture_output=True).returncode != 0:
        pytest.skip(f"{' '.join(tool)} is not installed here")
    result = subprocess.run([*tool, "--file", str(DEPLOY / file), "config", "--quiet"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def kubernetes_documents(name: str) -> dict:
    return {document["kind"]: document for document in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text())}


def test_the_statefulset_runs_three_nodes_named_by_their_ordinal():
    kinds = kubernetes_documents("statefulset.yaml")
    assert set(kinds) == {"Service", "PodDisruptionBudget", "StatefulSet"}
    service = kinds["Service"]["spec"]
    assert service["clusterIP"] == "None" and service["publishNotReadyAddresses"] is True
    statefulset = kinds["StatefulSet"]["spec"]
    assert statefulset["replicas"] == 3 and statefulset["ordinals"]["start"] == 1
    assert statefulset["serviceName"] == kinds["Service"]["metadata"]["name"]
    pod = statefulset["template"]["spec"]
    container = pod["containers"][0]
    env = {variable["name"]: variable["valueFrom"]["fieldRef"]["fieldPath"] for variable in container["env"]}
    assert env["NODE_ID"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    assert option(container["args"], "--node-id") == "$(NODE_ID)"
    assert option(container["args"], "--advertise-host").startswith("$(POD_NAME).ferrite.")
    assert option(container["args"], "--peer-listen") == "0.0.0.0:7300"
    assert {port["containerPort"] for port in container["ports"]} == {port["port"] for port in service["ports"]}
    assert container["readinessProbe"]["exec"]["command"][0] == "ferrite"
    assert container["volumeMounts"][0]["mountPath"] == "/var/lib/ferrite"
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_the_init_job_names_every_pod_of_the_statefulset():
    statefulset = kubernetes_documents("statefulset.yaml")["StatefulSet"]
    first = statefulset["spec"]["ordinals"]["start"]
    pods = [f"{statefulset['metadata']['name']}-{first + index}.{statefulset['spec']['serviceName']}:11911"
            for index in range(statefulset["spec"]["replicas"])]
    container = kubernetes_documents("cluster-init.yaml")["Job"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["ferrite"] and container["args"][2:4] == ["cluster", "init"]
    assert [container["args"][index + 1] for index, word in enumerate(container["args"]) if word == "--node"] == pods
    assert option(container["args"], "--addr") in pods


# The oldest Kubernetes the manifests name (pod-index label, start ordinals), and the newest known.
@pytest.mark.parametrize("version", ["1.28", "1.37"])
def test_the_kubernetes_manifests_validate(version):
    validate = Path(sys.executable).with_name("kubernetes-validate")
    result = subprocess.run([str(validate), "--strict", "--quiet", "--kubernetes-version", version,
                             *sorted(str(path) for path in (DEPLOY / "kubernetes").glob("*.yaml"))],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dockerfile_runs_as_a_user_with_a_volume_and_a_health_check():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    stages = re.findall(r"^FROM ", dockerfile, re.MULTILINE)
    assert len(stages) == 2, "a build stage and a small runtime stage"
    for instruction in ("USER 10001:10001", 'VOLUME ["/var/lib/ferrite"]', "HEALTHCHECK", "COPY deploy/ferrite.toml"):
        assert instruction in dockerfile, instruction


def instructions(dockerfile: str, *names: str) -> list[str]:
    """The instructions with these names, each on one line."""
    joined = dockerfile.replace("\\\n", " ")
    return [re.sub(r"\s+", " ", line) for line in joined.splitlines() if line.split(" ", 1)[0] in names]


def test_the_offline_image_pulls_nothing_and_runs_as_the_registry_one_does():
    offline = (DEPLOY / "docker" / "Dockerfile.offline").read_text()
    assert re.findall(r"^FROM .*", offline, re.MULTILINE) == ["FROM scratch"]
    assert "ADD rootfs.tar /" in offline
    shared = ("USER", "VOLUME", "EXPOSE", "HEALTHCHECK", "STOPSIGNAL", "ENTRYPOINT")
    assert instructions(offline, *shared) == instructions((DEPLOY / "Dockerfile").read_text(), *shared)


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "docker/Dockerfile.offline"])
def test_the_dockerfiles_pass_hadolint(dockerfile):
    hadolint = Path(sys.executable).with_name("hadolint")
    result = subprocess.run([str(hadolint), "--no-color", str(DEPLOY / dockerfile)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_script_passes_shellcheck():
    shellcheck = Path(sys.executable).with_name("shellcheck")
    result = subprocess.run([str(shellcheck), str(DEPLOY / "docker" / "build-image.sh")], capture_output=True,
                            text=True, timeout=60)
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
