"""The Grafana dashboard: the committed JSON is what deploy/grafana/generate.py builds (grafana-foundation-sdk), and
it keeps Grafana's conventions, checked as properties of the generated JSON (not a snapshot): money panels say
USD/day, every panel has explicit thresholds (savings never red), the variables filter every panel by each label its
series carry, kinds, problems and the team-less group are in people's words in legends and tables, budgets and
unpriced findings are shown, and the top-workloads table links to the workload row."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gpuwaste.models.findings import IdleMode, WasteKind
from gpuwaste.people import kind_heading, kind_label
from gpuwaste.sinks.prometheus_metrics import FAMILIES, TOTAL_LABELS, WASTE_LABELS

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "deploy" / "grafana" / "generate.py"
DASHBOARD = ROOT / "deploy" / "grafana" / "gpuwaste.json"
#: the dashboard's label variables (each filters the label of the same name)
VARIABLES = ("cluster", "team", "namespace", "workload")
#: the labels each gpuwaste family carries (gpuwaste.sinks.prometheus_metrics)
FAMILY_LABELS = {
    **dict.fromkeys(("gpuwaste_waste_usd_per_day", "gpuwaste_wasted_gpus", "gpuwaste_open_findings",
                     "gpuwaste_unpriced_findings", "gpuwaste_open_since_timestamp_seconds"), set(WASTE_LABELS)),
    **dict.fromkeys(("gpuwaste_wasted_gpu_hours_total", "gpuwaste_realised_savings_usd_total"), set(TOTAL_LABELS)),
    "gpuwaste_team_budget_usd_per_day": {"team"},
}
#: the problems the data-quality detector reports (read from its source: a new one must get a people's name)
PROBLEMS = set(re.findall(r'_dq\(\s*ctx,\s*[^,]+,\s*"([a-z_]+)"',
                          (ROOT / "shared" / "gpuwaste" / "detectors" / "data_quality.py").read_text()))
_IDS = sorted({k.value for k in WasteKind if "_" in k.value} | {m.value for m in IdleMode} | PROBLEMS, key=len, reverse=True)
INTERNAL = re.compile(rf"(?<![\w.$])({'|'.join(_IDS)})(?![\w.])|\(B\d\d\)|\bunassigned\b")


def _generator() -> ModuleType:
    pytest.importorskip("grafana_foundation_sdk", reason="grafana-foundation-sdk (requirements-dev.txt) is not installed")
    spec = importlib.util.spec_from_file_location("gpuwaste_grafana_generate", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def panels() -> list[dict[str, Any]]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def _renames(panel: dict[str, Any]) -> dict[str, str]:
    """Field name → display name from the panel's by-name overrides."""
    out = {}
    for o in panel["fieldConfig"]["overrides"]:
        for prop in o["properties"]:
            if o["matcher"]["id"] == "byName" and prop["id"] == "displayName":
                out[o["matcher"]["options"]] = prop["value"]
    return out


def _people_text(node: Any, key: str = "") -> list[str]:
    """Every string a person reads on the dashboard: titles, descriptions, display names, mapped texts, link titles
    (never a query, a matcher or a URL)."""
    if isinstance(node, dict):
        if node.get("id") == "displayName":
            return [node["value"]]
        skipped = ("expr", "matcher", "url", "query", "definition", "transformations")
        return [t for k, v in node.items() if k not in skipped for t in _people_text(v, k)]
    if isinstance(node, list):
        return [t for v in node for t in _people_text(v, key)]
    if isinstance(node, str) and key in ("title", "description", "text", "legendFormat", "label"):
        return [node]
    return []


def test_committed_dashboard_is_what_the_generator_builds() -> None:
    # GIVEN the generator WHEN it renders the dashboard
    generated = _generator().render()
    # THEN the committed file is byte for byte the same (regenerate: python deploy/grafana/generate.py > ...)
    assert DASHBOARD.read_text() == generated


def test_every_panel_reads_the_selected_prometheus_and_known_series(panels: list[dict[str, Any]]) -> None:
    # GIVEN the committed dashboard
    doc = json.loads(DASHBOARD.read_text())
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
    assert {"Waste by team (USD/day)", "Waste by kind (USD/day)", "Top workloads by waste (USD/day)",
            "DCGM activity of the workload", "Realised savings (USD/day)", "Scan errors by source"} <= {p["title"] for p in panels}


def test_the_variables_filter_every_panel_by_each_label_its_series_carry(panels: list[dict[str, Any]]) -> None:
    # GIVEN every gpuwaste selector of every panel
    checked = 0
    for panel in panels:
        exprs = [t["expr"] for t in panel["targets"]]
        # THEN every panel is filtered by at least one variable
        assert any(f"${v}" in e for v in VARIABLES for e in exprs), panel["title"]
        for expr in exprs:
            for name, matchers in re.findall(r"\b(gpuwaste_[a-z_]+)\{([^}]*)\}", expr):
                labels = FAMILY_LABELS.get(name, {"cluster"})  # the scan-health families carry cluster only
                # AND each variable whose label the series carries filters it
                for var in (v for v in VARIABLES if v in labels):
                    assert f'{var}=~"${var}"' in matchers, (panel["title"], name, var)
                    checked += 1
                # AND gpuwaste's namespace is read under either name: `namespace` where Prometheus honoured it,
                # `exported_namespace` where it did not (honor_labels: false), and grouped as `namespace`
                if "namespace" in labels:
                    assert matchers.endswith(('namespace=~"$namespace", exported_namespace=""',
                                              'exported_namespace=~"$namespace", exported_namespace!=""')), matchers
                    assert ('exported_namespace=~"$namespace", exported_namespace!=""' in expr
                            and '"namespace", "$1", "exported_namespace", "(.+)"' in expr), (panel["title"], expr)
    assert checked >= 30  # not vacuous: the waste panels carry four variables each


def test_money_is_per_day_and_every_panel_has_explicit_thresholds_savings_never_red(panels: list[dict[str, Any]]) -> None:
    money = [p for p in panels if p["fieldConfig"]["defaults"].get("unit") == "currencyUSD"]
    assert len(money) >= 7
    for panel in money:
        totals = any("[$__range]" in t["expr"] for t in panel["targets"])
        # THEN a rate of money says USD/day in its title; a total over the range says USD and the range
        if totals:
            assert "(USD)" in panel["title"] and "range" in panel["title"], panel["title"]
        elif "window_cost" in "".join(t["expr"] for t in panel["targets"]):  # the showback row: USD of each scan's window
            assert "(USD per scan window)" in panel["title"], panel["title"]
        else:
            assert "(USD/day)" in panel["title"], panel["title"]
    for panel in panels:
        steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        # AND no panel keeps Grafana's implicit default (green, red at 80): a base step, then rising values
        assert panel["fieldConfig"]["defaults"]["thresholds"]["mode"] == "absolute", panel["title"]
        assert steps[0]["value"] is None and steps[0]["color"], panel["title"]
        values = [s["value"] for s in steps[1:]]
        assert values == sorted(values), panel["title"]
        if "savings" in panel["title"].lower():
            # AND savings are never red, by threshold or colour: a fixed green
            assert all(s["color"] == "green" for s in steps), panel["title"]
            assert panel["fieldConfig"]["defaults"]["color"]["fixedColor"] == "green", panel["title"]
    budget = [p for p in panels if any("gpuwaste_team_budget_usd_per_day" in t["expr"] for t in p["targets"])]
    # AND budgets are shown, red over budget (the alert's GpuWasteTeamOverBudget, a ratio of 1)
    ratio = [p for p in budget if p["fieldConfig"]["defaults"]["unit"] == "percentunit"]
    assert ratio and ratio[0]["fieldConfig"]["defaults"]["thresholds"]["steps"][-1] == {"color": "red", "value": 1}
    # AND unpriced findings are shown
    assert any("gpuwaste_unpriced_findings" in t["expr"] for p in panels for t in p["targets"])


def test_legends_name_kinds_problems_and_teams_in_peoples_words(panels: list[dict[str, Any]]) -> None:
    checked = 0
    for panel in panels:
        legends = [t.get("legendFormat", "") for t in panel["targets"]]
        renames = _renames(panel)
        # THEN every panel whose legend shows a kind names each kind by its heading, never its JSON value
        if any("{{kind}}" in legend for legend in legends):
            assert {k.value: renames.get(k.value) for k in WasteKind} == {k.value: kind_heading(k) for k in WasteKind}
            checked += 1
        # AND each data-quality problem the detector reports has a name
        if any("{{problem}}" in legend for legend in legends):
            assert PROBLEMS and set(renames) >= PROBLEMS, PROBLEMS - set(renames)
            assert all("_" not in renames[p] for p in PROBLEMS)
            checked += 1
        # AND the team-less group is "no owner"
        if any("{{team}}" in legend for legend in legends):
            assert renames.get("unassigned") == "no owner", panel["title"]
            checked += 1
    assert checked >= 7


def test_top_workloads_table_names_its_columns_and_links_the_workload_row(panels: list[dict[str, Any]]) -> None:
    (top,) = [p for p in panels if p["type"] == "table"]
    renames = _renames(top)
    # THEN every label column and the value have a name people read
    assert set(renames) == {"cluster", "namespace", "workload", "kind", "team", "Value"}
    assert all(name[0].isupper() for name in renames.values()) and renames["Value"] == "Waste (USD/day)"
    # AND the kind column shows each kind's label (as the terminal's tables), the team-less group "no owner"
    props = {o["matcher"]["options"]: {p["id"]: p["value"] for p in o["properties"]} for o in top["fieldConfig"]["overrides"]}
    kinds = props["kind"]["mappings"][0]
    assert kinds["type"] == "value"
    assert {k: v["text"] for k, v in kinds["options"].items()} == {k.value: kind_label(k) for k in WasteKind}
    assert props["team"]["mappings"][0]["options"]["unassigned"]["text"] == "no owner"
    # AND a workload cell opens this dashboard's workload row for that namespace and workload
    (link,) = props["workload"]["links"]
    doc = json.loads(DASHBOARD.read_text())
    assert link["url"].startswith(f"/d/{doc['uid']}?")
    assert "var-namespace=${__data.fields.namespace}" in link["url"] and "var-workload=${__value.raw}" in link["url"]
    assert any(r["title"].startswith("Workload: $namespace / $workload") for r in doc["panels"] if r["type"] == "row")


def test_no_internal_id_or_code_reaches_people_on_the_dashboard() -> None:
    # GIVEN every text a person reads on the dashboard (titles, descriptions, display names, mapped values)
    texts = _people_text(json.loads(DASHBOARD.read_text()))
    assert len(texts) >= 60
    # THEN none is a kind's or idle mode's JSON value, a data-quality problem id, a field-guide code or "unassigned"
    assert [m.group(0) for t in texts for m in INTERNAL.finditer(t)] == []


def test_dcgm_query_groups_by_one_host_label_from_hostname_or_Hostname() -> None:  # noqa: N802
    # GIVEN the DCGM panel's query
    expr = _generator().dcgm_activity("research", "eval-sweep")
    # THEN it groups by the normalised host label only, filled from both spellings (run against a real Prometheus in
    # tests/integration/test_grafana_dcgm_query.py)
    assert re.findall(r"max by \(([^)]*)\)", expr) == ["workload_pod, gpu, gpu_host"] * 2
    assert '"Hostname", "(.+)"' in expr and '"hostname", "(.+)"' in expr
