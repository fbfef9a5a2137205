"""Keep every copy of the shared deploy sources current (kustomize and Helm load no file outside their directory):

- deploy/kubernetes/rbac.yaml           = deploy/rbac.yaml (the read-only RBAC, unchanged)
- deploy/kubernetes/prometheusrule.yaml = deploy/prometheus-alerts.yaml's groups as a PrometheusRule (Prometheus Operator)
- deploy/helm/gpuwaste/files/           = the ClusterRole's rules, the alert and recording groups, the Grafana
  dashboard, and the opt-in acting role's rules (deploy/rbac-reclaim.yaml) by reclaim action (`reclaim.rbac`)
- deploy/kubernetes/{deployment,service,pvc,servicemonitor}.yaml = the Helm chart rendered with
  deploy/helm/gpuwaste/ci/kustomize-base.yaml (one source: the chart); needs helm-python-sdk (Helm's Go library,
  loaded in process), else these four are left as they are and `--check` says it skipped them.

    python deploy/kubernetes/sync.py          # rewrite them
    python deploy/kubernetes/sync.py --check  # exit 1 when any is out of date (the test suite does this)
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
DEPLOY = HERE.parent
CHART = DEPLOY / "helm" / "gpuwaste"
#: the chart's templates that make the kustomize base's files, by kind
RENDERED = {"Deployment": "deployment.yaml", "Service": "service.yaml", "PersistentVolumeClaim": "pvc.yaml",
            "ServiceMonitor": "servicemonitor.yaml"}
#: labels only a Helm release carries (dropped from the kustomize base)
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version")


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_Dumper.add_representer(str, _str)


def rbac() -> str:
    return ("# A copy of deploy/rbac.yaml (kustomize loads no file outside this directory); written by\n"
            "# `python deploy/kubernetes/sync.py`, checked by tests/unit/test_kubernetes_manifests.py.\n"
            + (DEPLOY / "rbac.yaml").read_text())


def prometheus_rule() -> str:
    groups = yaml.safe_load((DEPLOY / "prometheus-alerts.yaml").read_text())["groups"]
    doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
           "metadata": {"name": "gpuwaste-alerts",
                        "labels": {"app.kubernetes.io/name": "gpuwaste", "app.kubernetes.io/component": "alerts"}},
           "spec": {"groups": groups}}
    return ("# deploy/prometheus-alerts.yaml's groups as a PrometheusRule; written by `python deploy/kubernetes/sync.py`.\n"
            "# The Prometheus Operator's ruleSelector must match its labels (docs/alerts.md).\n"
            + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120))


def _chart_file(header: str, data: object) -> str:
    return f"# {header}; written by `python deploy/kubernetes/sync.py` (do not edit).\n" + \
        yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120)


def clusterrole_rules() -> str:
    role = next(d for d in yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()) if d and d["kind"] == "ClusterRole")
    return _chart_file("deploy/rbac.yaml's ClusterRole rules", role["rules"])


#: The reclaim action each rule of deploy/rbac-reclaim.yaml's ClusterRole serves, by its first resource (the
#: `ReclaimKind` names); a rule not named here stops the sync, so no new grant reaches the chart unnamed.
RECLAIM_ACTIONS = {"deployments/scale": "scale", "jobs": "suspend", "pods": "delete-orphan",
                   "notebooks": "stop-notebook"}


def reclaim_rules() -> str:
    """files/reclaim-rules.yaml: `[{action, rule}]`, deploy/rbac-reclaim.yaml's ClusterRole rules in its order.

    Raises:
        RuntimeError: a rule serves no action of `RECLAIM_ACTIONS`.
    """
    role = next(d for d in yaml.safe_load_all((DEPLOY / "rbac-reclaim.yaml").read_text())
                if d and d["kind"] == "ClusterRole")
    entries = []
    for rule in role["rules"]:
        action = RECLAIM_ACTIONS.get(rule["resources"][0])
        if action is None:
            raise RuntimeError(f"deploy/rbac-reclaim.yaml: rule {rule} serves no known reclaim action; add it to "
                               "RECLAIM_ACTIONS in deploy/kubernetes/sync.py")
        entries.append({"action": action, "rule": rule})
    return _chart_file("deploy/rbac-reclaim.yaml's ClusterRole rules, each with the reclaim action it serves", entries)


def alert_groups() -> str:
    return _chart_file("deploy/prometheus-alerts.yaml's groups",
                       yaml.safe_load((DEPLOY / "prometheus-alerts.yaml").read_text())["groups"])


def recording_groups() -> str:
    path = DEPLOY / "prometheus" / "gpuwaste-recording-rules.yml"
    return _chart_file("deploy/prometheus/gpuwaste-recording-rules.yml's groups", yaml.safe_load(path.read_text())["groups"])


def dashboard() -> str:
    return (DEPLOY / "grafana" / "gpuwaste.json").read_text()


COPIES = {HERE / "rbac.yaml": rbac, HERE / "prometheusrule.yaml": prometheus_rule,
          CHART / "files" / "clusterrole-rules.yaml": clusterrole_rules,
          CHART / "files" / "reclaim-rules.yaml": reclaim_rules,
          CHART / "files" / "alert-groups.yaml": alert_groups,
          CHART / "files" / "recording-groups.yaml": recording_groups,
          CHART / "files" / "gpuwaste.json": dashboard}


def render_chart(values: dict[str, object], *, name: str = "gpuwaste", namespace: str = "gpuwaste") -> dict[str, str]:
    """The chart's templates rendered offline by Helm's own library (helm-python-sdk): template path → manifest.

    Raises:
        ModuleNotFoundError: helm-python-sdk is not installed.
    """
    import helm_python

    chart = helm_python.Chart.load(str(CHART))
    try:
        return chart.render(values, name=name, namespace=namespace)
    finally:
        chart.close()


def kustomize_base() -> dict[Path, str]:
    """deploy/kubernetes/'s files made from the chart (ci/kustomize-base.yaml values), Helm's release labels dropped."""
    values = yaml.safe_load((CHART / "ci" / "kustomize-base.yaml").read_text())
    out: dict[Path, str] = {}
    for template, text in render_chart(values).items():
        if not template.endswith((".yaml", ".yml")):
            continue  # NOTES.txt
        for doc in yaml.safe_load_all(text):
            if not doc or doc["kind"] not in RENDERED:
                continue
            for labels in _label_maps(doc):
                for key in HELM_LABELS:
                    labels.pop(key, None)
            doc["metadata"].pop("namespace", None)  # kustomization.yaml sets it
            template = doc.get("spec", {}).get("template", {}).get("metadata", {})
            template.pop("annotations", None)  # the config checksum: kustomize's ConfigMap hash does that job
            out[HERE / RENDERED[doc["kind"]]] = (
                "# Rendered from the Helm chart deploy/helm/gpuwaste (values ci/kustomize-base.yaml) by\n"
                "# `python deploy/kubernetes/sync.py`; edit the chart, not this file.\n"
                + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120))
    missing = set(RENDERED.values()) - {p.name for p in out}
    if missing:
        raise RuntimeError(f"the chart rendered no {', '.join(sorted(missing))}")
    return out


def _label_maps(doc: dict) -> list[dict]:  # type: ignore[type-arg]
    found = [doc["metadata"].get("labels", {})]
    spec = doc.get("spec", {})
    for path in (("selector", "matchLabels"), ("selector",), ("template", "metadata", "labels")):
        node = spec
        for key in path:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            found.append(node)
    return found


def main(argv: list[str]) -> int:
    wanted = {path: make() for path, make in COPIES.items()}
    try:
        wanted.update(kustomize_base())
    except ModuleNotFoundError as exc:
        if exc.name != "helm_python":
            raise
        print("skipped deploy/kubernetes/{deployment,service,pvc,servicemonitor}.yaml: helm-python-sdk is not "
              "installed (pip install helm-python-sdk)", file=sys.stderr)
    stale = [path for path, text in wanted.items() if not path.exists() or path.read_text() != text]
    if "--check" in argv:
        for path in stale:
            print(f"{path.relative_to(DEPLOY.parent)} is out of date: run python deploy/kubernetes/sync.py", file=sys.stderr)
        return 1 if stale else 0
    for path, text in wanted.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
