"""The Grafana dashboard: the committed JSON is what deploy/grafana/generate.py builds (grafana-foundation-sdk)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest

from gpuwaste.sinks.prometheus_metrics import FAMILIES

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "deploy" / "grafana" / "generate.py"
DASHBOARD = ROOT / "deploy" / "grafana" / "gpuwaste.json"


def _generator() -> ModuleType:
    pytest.importorskip("grafana_foundation_sdk", reason="grafana-foundation-sdk (requirements-dev.txt) is not installed")
    spec = importlib.util.spec_from_file_location("gpuwaste_grafana_generate", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_dashboard_is_what_the_generator_builds() -> None:
    # GIVEN the generator WHEN it renders the dashboard
    generated = _generator().render()
    # THEN the committed file is byte for byte the same (regenerate: python deploy/grafana/generate.py > ...)
    assert DASHBOARD.read_text() == generated


def test_every_panel_reads_the_selected_prometheus_and_known_series() -> None:
    # GIVEN the committed dashboard
    doc = json.loads(DASHBOARD.read_text())
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    known = {f"{f}_total" for f in FAMILIES} | set(FAMILIES)
    # THEN each panel queries the dashboard's Prometheus variable, and every gpuwaste series it names is exposed
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            for name in re.findall(r"\b(gpuwaste_[a-z_]+)", target["expr"]):
                assert name in known, (panel["title"], name)
    # AND the variables the queries use are defined
    defined = {v["name"] for v in doc["templating"]["list"]}
    used = {m for p in panels for t in p["targets"] for m in re.findall(r"\$([a-z]+)", t["expr"])}
    assert used <= defined
    assert {"Waste by team", "Waste by kind", "Top workloads by waste", "DCGM activity of the workload",
            "Realised savings", "Scan errors by source"} <= {p["title"] for p in panels}
