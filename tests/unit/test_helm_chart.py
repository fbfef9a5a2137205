"""The Helm chart deploy/helm/gpuwaste: every value set (the defaults and ci/*.yaml) linted strictly and rendered by
Helm's own Go library (helm-python-sdk, loaded in process through ctypes; no helm binary), every rendered built-in
object validated offline against the Kubernetes schemas (kubernetes-validate), and what the schemas cannot see
checked: the configuration it builds is gpuwaste's, the RBAC, rules and dashboard are the shared sources', the
scenarios render what they say, values.schema.json refuses bad values, the README's values table and the kustomize
base (rendered from the chart) are current. Skipped without helm-python-sdk (pip install helm-python-sdk)."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuwaste.commands.serve import SECRET_ENV
from gpuwaste.config import parse_config

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install helm-python-sdk)")
kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gpuwaste"
VERSIONS = ("1.30.0", "1.37.0")
CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
VALUE_SETS = ["defaults", *sorted(p.stem for p in (CHART / "ci").glob("*.yaml"))]
SECRET_FIELDS = ("bot_token", "signing_secret", "api_token", "bearer_token", "password")


def _values(name: str) -> dict[str, Any]:
    return {} if name == "defaults" else yaml.safe_load((CHART / "ci" / f"{name}.yaml").read_text()) or {}


def _render(values: dict[str, Any], chart: Path = CHART) -> list[dict[str, Any]]:
    loaded = helm.Chart.load(str(chart))
    try:
        out = loaded.render(values, name="gpuwaste", namespace="gpuwaste")
    finally:
        loaded.close()
    return [d for path, text in out.items() if path.endswith(".yaml") for d in yaml.safe_load_all(text) if d]


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def _config(docs: list[dict[str, Any]]) -> Any:
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in d.get("data", {}))
    return parse_config(cm["data"]["config.yaml"], source="the chart's ConfigMap"), cm["data"]["config.yaml"]


@pytest.mark.parametrize("name", VALUE_SETS)
def test_value_set_lints_renders_and_validates(name: str) -> None:
    # GIVEN one value set WHEN Helm lints it strictly for the oldest supported Kubernetes and renders it
    report = helm.lint(str(CHART), _values(name), strict=True, kube_version=f"v{VERSIONS[0]}")
    docs = _render(_values(name))
    # THEN lint finds nothing (no warning, no error) and every built-in object validates strictly on both versions
    assert report["total_charts_linted"] == 1 and not report["errors"]
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
    assert {"Deployment", "Service"} <= {d["kind"] for d in docs}
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CRDS:
            continue
        for version in VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
    # AND the pod is locked down, one replica, tokens only from the Secret under names serve reads
    spec = _one(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert (
        spec["securityContext"]["runAsNonRoot"] is True
        and spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    )
    sc = container["securityContext"]
    assert (
        sc["readOnlyRootFilesystem"] is True
        and sc["allowPrivilegeEscalation"] is False
        and sc["capabilities"]["drop"] == ["ALL"]
    )
    secret_env = {e["name"] for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    assert secret_env == set(SECRET_ENV)
    assert not [d for d in docs if d["kind"] == "Secret"]


def test_defaults_render_the_objects_the_readme_describes() -> None:
    docs = _render({})
    assert sorted(d["kind"] for d in docs) == sorted(
        [
            "ConfigMap",
            "Deployment",
            "Service",
            "PersistentVolumeClaim",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
        ]
    )
    cfg, text = _config(docs)
    # the configuration is gpuwaste's, serves at the container's port with its state on the claim, holds no secret
    (container,) = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert cfg.serve.host == "0.0.0.0" and cfg.serve.port == container["ports"][0]["containerPort"]
    assert cfg.serve.state == "/var/lib/gpuwaste/state.db" and cfg.clusters[0].kubernetes.mode == "in-cluster"
    assert not any(re.search(rf"\b{f}\s*:", text) for f in SECRET_FIELDS)
    assert container["image"] == "registry.example.com/gpuwaste:0.1.0"
    # the ClusterRole is deploy/rbac.yaml's, read-only, bound to the pod's ServiceAccount
    canonical = next(
        d for d in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()) if d and d["kind"] == "ClusterRole"
    )
    assert _one(docs, "ClusterRole")["rules"] == canonical["rules"]
    binding = _one(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": _one(docs, "ServiceAccount")["metadata"]["name"], "namespace": "gpuwaste"}
    ]


def test_amp_scenario_uses_sigv4_and_irsa() -> None:
    docs = _render(_values("amp"))
    cfg, _ = _config(docs)
    auth = cfg.clusters[0].prometheus.auth
    assert auth.kind == "sigv4" and auth.sigv4_region == "us-east-1"
    assert "eks.amazonaws.com/role-arn" in _one(docs, "ServiceAccount")["metadata"]["annotations"]
    assert {"PodDisruptionBudget", "NetworkPolicy"} <= {d["kind"] for d in docs}
    assert "ServiceMonitor" not in {d["kind"] for d in docs}


def test_external_prometheus_scenario_pins_the_digest_and_mounts_the_api_token() -> None:
    docs = _render(_values("external-prometheus"))
    cfg, _ = _config(docs)
    assert cfg.clusters[0].prometheus.url == "https://mimir.example.com/prometheus"
    # the bearer kind comes with the token from the Secret, as serve reads it
    from gpuwaste.commands.serve import with_env_secrets

    assert with_env_secrets(cfg, {"GPUWASTE_PROMETHEUS_BEARER_TOKEN": "t"}).clusters[0].prometheus.auth.kind == "bearer"
    spec = _one(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["image"] == "ghcr.io/example/gpuwaste@sha256:" + "0123456789abcdef" * 4
    assert container["args"][3:] == ["--api-token-file", "/var/run/secrets/gpuwaste/api-token", "--mcp-port", "9403"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"metrics": 9402, "mcp": 9403}
    assert {p["name"]: p["targetPort"] for p in _one(docs, "Service")["spec"]["ports"]} == {
        "metrics": "metrics",
        "mcp": "mcp",
    }
    assert {"port": "mcp", "protocol": "TCP"} in _one(docs, "NetworkPolicy")["spec"]["ingress"][0]["ports"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["api-token"]["secret"] == {
        "secretName": "gpuwaste-tokens",
        "items": [{"key": "api-token", "path": "api-token"}],
    }
    assert {m["name"] for m in container["volumeMounts"]} >= {"api-token", "ca"}
    assert spec["imagePullSecrets"] == [{"name": "ghcr-pull"}] and spec["tolerations"] and spec["affinity"]


def test_servicemonitor_scenarios() -> None:
    on, off = _render(_values("servicemonitor-on")), _render(_values("servicemonitor-off"))
    monitor, service = _one(on, "ServiceMonitor"), _one(on, "Service")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    groups = _one(on, "PrometheusRule")["spec"]["groups"]
    alerts = yaml.safe_load((ROOT / "deploy" / "prometheus-alerts.yaml").read_text())["groups"]
    recording = yaml.safe_load((ROOT / "deploy" / "prometheus" / "gpuwaste-recording-rules.yml").read_text())["groups"]
    assert groups == alerts + recording
    dashboard = next(d for d in on if d["kind"] == "ConfigMap" and "gpuwaste.json" in d["data"])
    assert (
        dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
        and dashboard["metadata"]["namespace"] == "monitoring"
    )
    assert json.loads(dashboard["data"]["gpuwaste.json"]) == json.loads(
        (ROOT / "deploy" / "grafana" / "gpuwaste.json").read_text()
    )
    kinds = {d["kind"] for d in off}
    assert not kinds & {"ServiceMonitor", "PrometheusRule", "PersistentVolumeClaim"}
    assert not [d for d in off if d["kind"] == "ConfigMap"]  # existingConfigMap
    volumes = {v["name"]: v for v in _one(off, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == "my-gpuwaste-config"
    assert volumes["state"]["persistentVolumeClaim"]["claimName"] == "my-gpuwaste-state"


def test_prometheus_only_keeps_state_in_an_empty_dir() -> None:
    docs = _render(_values("prometheus-only"))
    volumes = {v["name"]: v for v in _one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["state"] == {"name": "state", "emptyDir": {}}
    assert "PersistentVolumeClaim" not in {d["kind"] for d in docs}


@pytest.mark.parametrize(
    "bad",
    [
        {"image": {"digest": "latest"}},
        {"colour": "red"},
        {"prometheus": {"url": "ftp://x"}},
        {"prometheus": {"auth": {"kind": "oauth"}}},
        {"service": {"port": 0}},
        {"reclaim": {"rbac": {"create": True, "namespaces": ["ml-team"], "actions": ["scale", "evict"]}}},
        {"reclaim": {"rbac": {"create": True, "namespaces": ["ML_Team"]}}},
        {"reclaim": {"rbac": {"create": True, "namespaces": ["ml-team"], "actions": []}}},
        {"reclaim": {"rbac": {"create": "yes"}}},
    ],
)
def test_values_schema_refuses_bad_values(bad: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        _render(bad)


def _reclaim_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "reclaim"]


def test_reclaim_role_is_opt_in_and_deploy_rbac_reclaim() -> None:
    from tests.hardening.test_least_privilege import ACTING_ROLE, rbac_violations

    # GIVEN deploy/rbac-reclaim.yaml's ClusterRole, the defaults and the value set with reclaim on
    canonical = next(
        d
        for d in yaml.safe_load_all((ROOT / "deploy" / "rbac-reclaim.yaml").read_text())
        if d and d["kind"] == "ClusterRole"
    )
    values = _values("reclaim")
    # WHEN each is rendered
    defaults = _render({})
    with_rbac_off = _render({"reclaim": {"rbac": {"namespaces": ["ml-team"]}}})
    docs = _render(values)
    # THEN nothing that acts is rendered unless asked for: no write verb anywhere in the defaults
    assert _reclaim_objects(defaults) == [] and _reclaim_objects(with_rbac_off) == []
    assert all(
        set(r["verbs"]) <= {"get", "list", "watch"}
        for d in defaults
        if d["kind"] in ("Role", "ClusterRole")
        for r in d["rules"]
    )
    # AND with it on, the acting ClusterRole is deploy/rbac-reclaim.yaml's, granted only by RoleBindings, one per
    # opted-in namespace, to the pod's ServiceAccount (the same namespaces the configuration lets reclaim act in)
    acting = _reclaim_objects(docs)
    (role,) = [d for d in acting if d["kind"] == "ClusterRole"]
    assert role["metadata"]["name"] == ACTING_ROLE and role["rules"] == canonical["rules"]
    bindings = [d for d in acting if d["kind"] != "ClusterRole"]
    assert {d["kind"] for d in bindings} == {"RoleBinding"}
    assert sorted(d["metadata"]["namespace"] for d in bindings) == sorted(values["reclaim"]["rbac"]["namespaces"])
    sa = _one(docs, "ServiceAccount")["metadata"]["name"]
    assert all(
        d["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": "gpuwaste"}]
        and d["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ACTING_ROLE}
        for d in bindings
    )
    cfg, _ = _config(docs)
    assert cfg.reclaim.enabled and set(cfg.reclaim.namespaces) == set(values["reclaim"]["rbac"]["namespaces"])
    # AND the least-privilege checker finds nothing beyond the reclaim calls in the rendered chart
    assert rbac_violations([("chart", d) for d in docs]) == []
    # AND fewer actions grant fewer rules: only scale → the scale subresource only
    scale_only = _render({"reclaim": {"rbac": {"create": True, "namespaces": ["a"], "actions": ["scale"]}}})
    (small,) = [d for d in _reclaim_objects(scale_only) if d["kind"] == "ClusterRole"]
    assert small["rules"] == [r for r in canonical["rules"] if r["resources"][0] == "deployments/scale"]
    # AND without namespaces it is a clear render error (never bound cluster-wide instead)
    with pytest.raises(helm.HelmError, match="reclaim.rbac.namespaces"):
        _render({"reclaim": {"rbac": {"create": True}}})


def test_sigv4_without_a_region_and_mcp_without_the_api_are_clear_render_errors() -> None:
    with pytest.raises(helm.HelmError, match="sigv4Region"):
        _render({"prometheus": {"auth": {"kind": "sigv4"}}})
    with pytest.raises(helm.HelmError, match="api.enabled"):
        _render({"mcp": {"enabled": True}})


def test_lint_fails_a_broken_chart(tmp_path: Path) -> None:
    # GIVEN a copy of the chart with a template that does not parse
    broken = tmp_path / "gpuwaste"
    shutil.copytree(CHART, broken)
    (broken / "templates" / "service.yaml").write_text("{{ .Values.service.port \n")
    # THEN lint reports an error (the lint above can fail)
    report = helm.lint(str(broken), {}, strict=True)
    assert report["errors"] or [m for m in report["messages"] if m["severity"] == 3]


def test_readme_values_table_and_kustomize_base_are_current() -> None:
    readme = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "helm" / "readme.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert readme.returncode == 0, readme.stderr
    synced = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "kubernetes" / "sync.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert synced.returncode == 0 and "skipped" not in synced.stderr, synced.stderr


def test_every_documented_value_is_in_the_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(node: dict[str, Any], props: dict[str, Any], path: str) -> None:
        for key, value in node.items():
            assert key in props, f"{path}{key} is not in values.schema.json"
            sub = props[key]
            if isinstance(value, dict) and "properties" in sub:
                walk(value, sub["properties"], f"{path}{key}.")

    walk(values, schema["properties"], "")
    assert copy.deepcopy(values) == values
