"""Write the two copies kustomize needs inside this directory (it loads no file outside it):

- rbac.yaml           = deploy/rbac.yaml (the read-only RBAC, unchanged)
- prometheusrule.yaml = deploy/prometheus-alerts.yaml's groups as a PrometheusRule (Prometheus Operator)

    python deploy/kubernetes/sync.py          # rewrite both
    python deploy/kubernetes/sync.py --check  # exit 1 when either is out of date (the test suite does this)
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
DEPLOY = HERE.parent


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


COPIES = {"rbac.yaml": rbac, "prometheusrule.yaml": prometheus_rule}


def main(argv: list[str]) -> int:
    stale = [name for name, make in COPIES.items() if (HERE / name).read_text() != make()]
    if "--check" in argv:
        for name in stale:
            print(f"deploy/kubernetes/{name} is out of date: run python deploy/kubernetes/sync.py", file=sys.stderr)
        return 1 if stale else 0
    for name, make in COPIES.items():
        (HERE / name).write_text(make())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
