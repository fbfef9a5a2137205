"""Integration: every panel and variable of the committed Grafana dashboard gives the same groups when Prometheus
scrapes gpuwaste with `honor_labels: false` (gpuwaste's `namespace` renamed `exported_namespace`, `namespace` set to
the target's: gpuwaste's own) as with `honor_labels: true`, on a real Prometheus backfilled with promtool.

The series are the demo scan's own exposition (`gpuwaste scan -o prometheus`) plus the serve-only families the
dashboard reads (the GPU-hours and savings counters, growing over two hours; team budgets), each relabelled as
Prometheus relabels a scraped sample for a prometheus-operator target (job, instance, namespace, pod, service,
endpoint, container): honour keeps the sample's labels and adds the missing target labels; no honour renames a
sample label the target also has to `exported_<name>` and sets the target's (Prometheus'
scrape.mutateSampleLabels). Each panel query then runs with the variables at All and at one namespace/workload.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.sources.exposition import RecordedSeries, write_openmetrics
from tests.servers.prometheus import PrometheusFactory

pytestmark = pytest.mark.integration

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "gpuwaste.json"
T0 = 1_704_067_200  # 2024-01-01T00:00:00Z
STEPS = 121  # one sample a minute for two hours
END = T0 + 60 * (STEPS - 1)
#: a prometheus-operator ServiceMonitor target's labels for the gpuwaste pod
TARGET = {"job": "gpuwaste", "instance": "10.0.4.7:9402", "namespace": "gpuwaste", "pod": "gpuwaste-6d5f7c9b8-x2x4z",
          "service": "gpuwaste", "endpoint": "metrics", "container": "gpuwaste"}
#: the variables as a user picks them: all, then one namespace and one of its workloads
PICKS = {"all": {"$cluster": ".*", "$team": ".*", "$namespace": ".*", "$workload": ".*"},
         "one": {"$cluster": ".*", "$team": ".*", "$namespace": "research", "$workload": "eval-sweep"}}
WINDOWS = {"$__range": "1h", "$__rate_interval": "4m"}


def honoured(labels: dict[str, str]) -> dict[str, str]:
    """honor_labels: true — the sample's labels win; target labels only where the sample has none."""
    return {**TARGET, **{k: v for k, v in labels.items() if v}}


def not_honoured(labels: dict[str, str]) -> dict[str, str]:
    """honor_labels: false — a sample label the target also has is kept as exported_<name>; the target's is set."""
    out = {k: v for k, v in labels.items() if v}
    for name, value in TARGET.items():
        if out.get(name):
            out[f"exported_{name}"] = out[name]
        out[name] = value
    return out


@functools.cache
def _scan() -> list[tuple[str, dict[str, str], float]]:
    """The demo scan's samples (name, labels, value) and the serve-only families the dashboard reads (one scan,
    cached: both servers get the same scan times)."""
    result = CliRunner().invoke(app, ["scan", "-r", str(local.demo_recording()), "-q", "-o", "prometheus"])
    assert result.exit_code == 0, result.output
    samples = [(s.name, dict(s.labels), s.value) for f in text_string_to_metric_families(result.stdout)
               for s in f.samples if not s.name.endswith("_created")]
    wasted = [(labels, value) for name, labels, value in samples if name == "gpuwaste_wasted_gpus"]
    assert wasted, "the demo scan exposes no wasted GPUs"
    extra: list[tuple[str, dict[str, str], float]] = []
    rates: dict[tuple[str, ...], float] = {}  # one counter per label set, as serve keeps it (findings of one
    for labels, value in wasted:  # cluster/namespace/kind/team add up): GPU-hours at the wasted GPUs' rate
        key = tuple(labels[k] for k in ("cluster", "namespace", "kind", "team"))
        rates[key] = rates.get(key, 0.0) + value
    for key, value in rates.items():  # savings for half of them
        total = dict(zip(("cluster", "namespace", "kind", "team"), key, strict=True))
        extra.append(("gpuwaste_wasted_gpu_hours_total", total, value))
        if len(extra) % 2:
            extra.append(("gpuwaste_realised_savings_usd_total", total, 24 * value))
    teams = {labels["team"] for labels, _ in wasted}
    extra += [("gpuwaste_team_budget_usd_per_day", {"team": t}, 100.0) for t in sorted(teams)]
    return samples + extra


def _backfill(path: Path, relabel: Callable[[dict[str, str]], dict[str, str]]) -> Path:
    series = []
    stamps = [(T0 + 60 * i) * 1000 for i in range(STEPS)]
    for name, labels, value in _scan():
        if name.endswith("_total"):  # a counter: grows by `value` per hour
            values = [value * i / 60 for i in range(STEPS)]
        else:
            values = [value] * STEPS
        series.append(RecordedSeries(name, relabel(labels), stamps, values))
    types = {s.name: "counter" for s in series if s.name.endswith("_total")}
    with path.open("w") as out:
        write_openmetrics(series, out, types=types)
    return path


def _panel_queries() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in doc["panels"] for t in p.get("targets", [])
            if "gpuwaste_" in t["expr"]]


def _filled(expr: str, picks: dict[str, str]) -> str:
    for name, value in sorted({**picks, **WINDOWS}.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    return expr


def _groups(url: str, expr: str) -> dict[frozenset[tuple[str, str]], float]:
    """The query's result at the end, keyed by its labels (those the query grouped by), values rounded."""
    body: dict[str, Any] = requests.get(f"{url}/api/v1/query", params={"query": expr, "time": END}, timeout=60).json()
    assert body["status"] == "success", (expr, body)
    return {frozenset(r["metric"].items()): round(float(r["value"][1]), 6) for r in body["data"]["result"]}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, prometheus_factory: PrometheusFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("exported")
    return {"honour": prometheus_factory(_backfill(tmp / "honour.om", honoured)).url,
            "exported": prometheus_factory(_backfill(tmp / "exported.om", not_honoured)).url}


def test_the_backfilled_series_carry_the_exported_labels(servers: dict[str, str]) -> None:
    # GIVEN the two Prometheus servers, THEN only the one that did not honour labels has exported_namespace, and
    # there every waste series in a namespace has it, with namespace the target's
    query = 'count by (namespace, exported_namespace) (gpuwaste_waste_usd_per_day)'
    honour, exported = _groups(servers["honour"], query), _groups(servers["exported"], query)
    assert honour and not [g for g in honour if dict(g).get("exported_namespace")]
    assert {dict(g)["namespace"] for g in exported} == {"gpuwaste"}
    assert {dict(g).get("exported_namespace") for g in exported} >= {"research", "inference"}


@pytest.mark.parametrize("pick", sorted(PICKS))
def test_every_panel_gives_the_same_groups_with_and_without_exported_labels(servers: dict[str, str], pick: str) -> None:
    # GIVEN every gpuwaste panel query of the committed dashboard with the variables filled in
    queries = _panel_queries()
    assert len(queries) >= 20
    answered = 0
    for title, expr in queries:
        # WHEN it runs on the Prometheus that honoured gpuwaste's labels and on the one that exported them
        filled = _filled(expr, PICKS[pick])
        honour, exported = _groups(servers["honour"], filled), _groups(servers["exported"], filled)
        # THEN both give the same groups (the labels the query groups by) and the same values (a top-k: the same
        # values, and the same groups above its last value, where equal values tie in either order)
        if filled.startswith("topk(") and honour:
            cut = min(honour.values())
            assert sorted(exported.values()) == sorted(honour.values()), (title, filled)
            exported, honour = ({g: v for g, v in r.items() if v > cut} for r in (exported, honour))
        assert exported == honour, (title, filled)
        answered += bool(honour)
    # AND most panels answer something (not vacuous: the waste, GPU-hours, savings, budget and scan panels)
    assert answered >= (15 if pick == "all" else 8), answered


def test_the_namespace_grouping_is_gpuwastes_namespace_in_both(servers: dict[str, str]) -> None:
    # GIVEN the top-workloads table's query (grouped by cluster, namespace, workload, kind, team)
    (expr,) = [e for t, e in _panel_queries() if t.startswith("Top workloads")]
    groups = {s: _groups(url, _filled(expr, PICKS["all"])) for s, url in servers.items()}
    # THEN its namespaces are the workloads' (research, inference, ...), never only gpuwaste's own, in both
    namespaces = {s: {dict(g)["namespace"] for g in r} for s, r in groups.items()}
    assert namespaces["exported"] == namespaces["honour"] and {"research", "inference"} <= namespaces["honour"]


def test_the_variables_list_the_same_values_with_and_without_exported_labels(servers: dict[str, str]) -> None:
    # GIVEN the dashboard's Namespace and Workload variables (Grafana's query_result with a regex)
    variables = {v["name"]: v for v in json.loads(DASHBOARD.read_text())["templating"]["list"]}
    for name, picks in (("namespace", PICKS["all"]), ("workload", PICKS["one"])):
        variable = variables[name]
        inner = re.fullmatch(r"query_result\((.*)\)", variable["query"], re.S)
        assert inner, variable["query"]
        pattern = re.compile(variable["regex"].strip("/"))
        listed = {}
        for server, url in servers.items():
            # WHEN Grafana runs its query (an instant query at the range's end) and reads each line by the regex
            result = _groups(url, _filled(inner.group(1), picks))
            lines = [("{" + ", ".join(f'{k}="{v}"' for k, v in sorted(g)) + "}") for g in result]
            listed[server] = {m.group(1) for line in lines for m in [pattern.search(line)] if m}
        # THEN both list the same values: the namespaces of the waste, the picked namespace's workloads
        assert listed["exported"] == listed["honour"] and listed["honour"], (name, listed)
    assert "research" in listed["honour"] or "eval-sweep" in listed["honour"]
