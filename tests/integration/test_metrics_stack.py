"""Integration: `gpuwaste serve` scraped by a real Prometheus that also holds the demo fleet's DCGM telemetry.

The stack (tests/servers/metrics_stack.py): the demo fleet generated to end just after now and backfilled into
Prometheus, its cluster objects on the fake kube-apiserver, `gpuwaste serve` (the real command, a subprocess)
scanning both every 4 s and posting to the fake Slack, and Prometheus scraping it every second with the alert
rules of deploy/prometheus-alerts.yaml loaded. Expectations come from the fleet's ground truth (truth.json), the
fake Slack's received calls, and a scan of the same recording — never from what serve says it did.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording
from tests.servers.kube_api import write_kubeconfig
from tests.servers.metrics_stack import (
    ALERTS,
    ScrapingPrometheus,
    ServeProcess,
    demo_eval_time,
    gpuwaste_argv,
    kube_objects,
)
from tests.servers.prometheus import INSTALL_HINT, prometheus_available

if TYPE_CHECKING:
    from tests.servers.kube_api import KubeApiFactory
    from tests.servers.slack_api import FakeSlack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCAN_INTERVAL_S = 4
WASTE = ("idle_allocation", "underused_allocation", "unallocated_capacity")


@dataclass
class Stack:
    prometheus: ScrapingPrometheus
    serve: ServeProcess
    slack: FakeSlack
    recording: Path
    eval_time: datetime
    truth: list[dict[str, Any]]
    posts_after_two_scans: int
    posts_after_four_scans: int
    steady: float  # a time (unix s) after four scans, before the fix: the fleet as generated


def _require_prometheus() -> None:
    if not prometheus_available():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {INSTALL_HINT}", pytrace=False)
        pytest.skip(INSTALL_HINT)


def _successes(prom: ScrapingPrometheus) -> int:
    result = prom.query('gpuwaste_scans_total{outcome="success"}')
    return int(float(result[0]["value"][1])) if result else 0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, kube_api: KubeApiFactory, slack_server: FakeSlack) -> Iterator[Stack]:
    _require_prometheus()
    tmp = tmp_path_factory.mktemp("metrics-stack")
    eval_time = demo_eval_time()
    recording = write_recording(generate_fleet(FleetSpec(layout="demo", cluster="demo", eval_time=eval_time)),
                                tmp / "rec", compress=False)
    prom = ScrapingPrometheus(recording / "telemetry.om", workdir=tmp / "prom").start()
    serve: ServeProcess | None = None
    try:
        pods, nodes, others = kube_objects(recording / "cluster.json")
        kube = kube_api(pods, nodes, others, token="kube-token")
        kubeconfig = write_kubeconfig(tmp / "kubeconfig", kube.url, "kube-token")
        slack_server.reset()
        config = tmp / "gpuwaste.yaml"
        config.write_text(yaml.safe_dump({
            "clusters": [{"name": "demo", "prometheus": {"url": prom.url}, "kubernetes": {"kubeconfig": str(kubeconfig)}}],
            "serve": {"team_budgets_usd_per_day": {"research": 10, "vision": 300}},
            # the generated fleet holds 80 minutes: judge wrong hardware over them, as `scan -r` does for it
            "detectors": {"wrong_hardware": {"lookback_s": 4200}},
            "lifecycle": {"resolve_after_missed_scans": 1},
            "delivery": {"slack": {"base_url": slack_server.url}},  # the token comes from the environment (a Secret)
        }))
        env = {**os.environ, "GPUWASTE_SLACK_BOT_TOKEN": slack_server.token, "COLUMNS": "200"}
        serve = ServeProcess([*gpuwaste_argv(), "serve", "--config", str(config), "--state", str(tmp / "state.db"),
                              "--interval", f"{SCAN_INTERVAL_S}s", "--window", "70m"], env=env, workdir=tmp).start()
        prom.configure(targets=[f"127.0.0.1:{serve.port}"], rule_files=[ALERTS])
        try:
            prom.wait_for('gpuwaste_scans_total{outcome="success"} >= 2', timeout_s=120, what="two successful scans")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- serve log ---\n{serve.log()}") from exc
        posts = len(slack_server.calls_to("chat.postMessage"))
        prom.wait_for('gpuwaste_scans_total{outcome="success"} >= 4', timeout_s=60, what="four successful scans")
        posts_later = len(slack_server.calls_to("chat.postMessage"))
        steady = time.time()
        # THEN someone fixes the idle eval-sweep job (its pod goes away): the next scan resolves the finding, and the
        # realised savings counter starts to grow
        kube.set_objects(pods=[p for p in pods if not p["metadata"]["name"].startswith("eval-sweep")], nodes=nodes,
                         others=others)
        try:
            prom.wait_for("sum(gpuwaste_realised_savings_usd_total) > 0", timeout_s=60, what="realised savings")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- serve log ---\n{serve.log()}") from exc
        truth = json.loads((recording / "truth.json").read_text())
        yield Stack(prom, serve, slack_server, recording, eval_time, truth, posts, posts_later, steady)
    finally:
        if serve is not None:
            serve.stop()
        prom.stop()


def _by_key(result: list[dict[str, Any]]) -> dict[tuple[str, str, str], float]:
    """The series of the main waste kinds (WASTE) by (namespace, workload, kind); the demo's catalogue kinds aside."""
    return {(r["metric"].get("namespace", ""), r["metric"]["workload"], r["metric"]["kind"]): float(r["value"][1])
            for r in result if r["metric"]["kind"] in WASTE}


def _truth_waste(truth: list[dict[str, Any]]) -> dict[tuple[str, str, str], float]:
    return {(t["namespace"] or "", t["workload"] or t["node"], t["kind"]): t["gpus"] for t in truth if t["kind"] in WASTE}


def test_prometheus_scrapes_the_waste_of_the_ground_truth(stack: Stack) -> None:
    # GIVEN the stack after two scans
    # WHEN Prometheus is asked for the wasted GPUs it scraped from gpuwaste serve
    scraped = _by_key(stack.prometheus.query("gpuwaste_wasted_gpus", at=stack.steady))
    expected = _truth_waste(stack.truth)
    # THEN it holds exactly one series per expected waste finding of the fleet's ground truth
    assert set(scraped) == set(expected)
    # AND idle / unallocated GPUs are wasted whole (as the truth's GPU count); under-used ones in part
    for key, gpus in expected.items():
        if key[2] == "underused_allocation":
            assert 0 < scraped[key] <= gpus, key
        else:
            assert scraped[key] == pytest.approx(gpus, abs=1e-3), key


def test_usd_per_day_equals_a_scan_of_the_same_recording(stack: Stack) -> None:
    # GIVEN the same fleet scanned from its recording (files, not Prometheus or the API) at its end
    result = CliRunner().invoke(app, ["scan", "-r", str(stack.recording), "-o", "json", "-q",
                                      "--window", "70m"])
    assert result.exit_code == 0, result.output
    findings = json.loads(result.stdout)["findings"]
    offline: dict[tuple[str, str, str], Decimal] = {}
    for f in findings:
        if f["kind"] in WASTE and f.get("cost") and f["cost"].get("usd_per_day") is not None:
            s = f["subject"]
            key = (s.get("namespace") or "", s.get("workload_name") or s.get("node"), f["kind"])
            offline[key] = offline.get(key, Decimal(0)) + Decimal(str(f["cost"]["usd_per_day"]))
    # WHEN Prometheus is asked for USD/day
    scraped = _by_key(stack.prometheus.query("gpuwaste_waste_usd_per_day > 0", at=stack.steady))
    # THEN every priced waste series matches: idle and unallocated to the cent, under-used within 10 %
    assert set(scraped) == set(offline)
    for key, usd in offline.items():
        tolerance = 0.10 * float(usd) if key[2] == "underused_allocation" else 0.005
        assert scraped[key] == pytest.approx(float(usd), abs=tolerance), key
    assert sum(scraped.values()) > 1000  # the demo fleet wastes over a thousand USD/day


def test_wasted_gpu_hours_counter_grows_by_wasted_gpus_times_time_between_scans(stack: Stack) -> None:
    # GIVEN the counter and the last success time at one scan
    prom = stack.prometheus

    def reading() -> tuple[float, float, float]:
        at = time.time()
        counter = prom.query("sum(gpuwaste_wasted_gpu_hours_total)", at=at)
        success = prom.query("max(gpuwaste_last_success_timestamp_seconds)", at=at)
        wasted = prom.query("sum(gpuwaste_wasted_gpus)", at=at)
        return float(counter[0]["value"][1]), float(success[0]["value"][1]), float(wasted[0]["value"][1])

    c1, s1, _ = reading()
    # WHEN the next scan has been scraped
    deadline = time.monotonic() + 6 * SCAN_INTERVAL_S
    c2, s2, wasted = c1, s1, 0.0
    while s2 == s1 and time.monotonic() < deadline:
        time.sleep(0.5)
        c2, s2, wasted = reading()
    assert s2 > s1, "no new scan scraped"
    # THEN it grew by the GPUs that scan found wasted times the hours since the previous scan
    assert c2 - c1 == pytest.approx(wasted * (s2 - s1) / 3600, rel=1e-6)
    assert c2 > c1 > 0


def test_scan_health_is_exposed(stack: Stack) -> None:
    prom = stack.prometheus
    # GIVEN the stack WHEN the health families are queried
    last = float(prom.query("gpuwaste_last_success_timestamp_seconds")[0]["value"][1])
    gpus = float(prom.query('gpuwaste_gpus{cluster="demo"}')[0]["value"][1])
    problems = {r["metric"]["problem"] for r in prom.query("gpuwaste_data_quality_problems > 0")}
    failures = prom.query('gpuwaste_scans_total{outcome="failure"}')
    kinds = {r["metric"]["kind"] for r in prom.query("gpuwaste_scan_findings > 0")}
    duration = float(prom.query("gpuwaste_scan_duration_seconds")[0]["value"][1])
    # THEN the last success is recent, every GPU of the fleet was seen, the truth's telemetry problems are reported
    assert time.time() - last < 60
    assert gpus == len({g.uuid for g in generate_fleet(FleetSpec(layout="demo")).gpus})  # the demo fleet's GPUs
    assert {t["check"] for t in stack.truth if t["kind"] == "data_quality"} <= problems
    assert failures and float(failures[0]["value"][1]) == 0
    assert {"idle_allocation", "underused_allocation", "unallocated_capacity", "data_quality"} <= kinds
    assert 0 < duration < 60


def test_healthz_answers_ok_with_the_last_success(stack: Stack) -> None:
    # WHEN /healthz is fetched
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.serve.port}/healthz", timeout=5) as response:
        body = json.loads(response.read())
        status = response.status
    # THEN 200 with the cluster and a last success
    assert status == 200 and body["status"] == "ok" and body["cluster"] == "demo"
    assert body["last_success"] is not None and body["scans"]["success"] >= 2


def test_serve_delivers_to_slack_once_per_finding(stack: Stack) -> None:
    # GIVEN the fake Slack's received posts after two scans, and after two more of the same fleet
    posts = stack.slack.calls_to("chat.postMessage")
    # THEN the first scan told the owners (token from GPUWASTE_SLACK_BOT_TOKEN: the fake refuses any other), naming
    # the biggest idle workload, and later scans of the same waste posted nothing new
    assert stack.posts_after_two_scans > 0 and "llama-70b-vllm" in json.dumps(posts[: stack.posts_after_two_scans])
    assert stack.posts_after_four_scans == stack.posts_after_two_scans
    # AND the token never reached serve's output
    assert stack.slack.token not in stack.serve.log()


def test_a_fixed_workload_resolves_and_counts_as_realised_savings(stack: Stack) -> None:
    prom = stack.prometheus
    # GIVEN eval-sweep (2 idle A100s) fixed after the steady scans
    before = _by_key(prom.query('gpuwaste_waste_usd_per_day{workload="eval-sweep"}', at=stack.steady))
    # WHEN Prometheus is asked now
    now = _by_key(prom.query('gpuwaste_waste_usd_per_day{workload="eval-sweep"}'))
    savings = prom.query("sum by (namespace, kind, team) (gpuwaste_realised_savings_usd_total)")
    # THEN its waste series is gone and its saving is credited to its namespace, kind and team
    assert before and not now
    assert [(r["metric"]["namespace"], r["metric"]["kind"], r["metric"]["team"]) for r in savings] == [
        ("research", "idle_allocation", "research")]
    assert float(savings[0]["value"][1]) > 0


def test_alert_rules_evaluate_on_the_live_data(stack: Stack) -> None:
    prom = stack.prometheus
    # GIVEN the alert rules loaded next to the scrape (wait for their first evaluation)
    deadline = time.monotonic() + 30
    groups: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        groups = prom.get("/api/v1/rules")["data"]["groups"]
        if groups and all(r.get("lastEvaluation", "").startswith("20") and r["health"] != "unknown"
                          for g in groups for r in g["rules"]):
            break
        time.sleep(0.5)
    rules = {r["name"]: r for g in groups for r in g["rules"]}
    # THEN every rule evaluates without error
    assert set(rules) == {r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]}
    assert all(r["health"] == "ok" for r in rules.values()), {n: r.get("lastError") for n, r in rules.items()}
    # AND the waste and telemetry rules are active on the demo fleet (pending: their `for` has not passed), the
    # health rules are not
    over = rules["GpuWasteTeamOverBudget"]["alerts"]
    assert [a["labels"]["team"] for a in over] == ["research"]  # over its budget of 10; vision under its 300
    telemetry = {a["labels"]["problem"] for a in rules["GpuWasteTelemetryMissing"]["alerts"]}
    assert {"frozen_exporter", "partial_coverage"} <= telemetry
    for quiet in ("GpuWasteScansFailing", "GpuWasteScanStale", "GpuWasteMetricsAbsent", "GpuWasteNoDcgmTelemetry"):
        assert rules[quiet]["alerts"] == [], quiet
    # AND every series a rule reads is present
    for name, rule in rules.items():
        for metric in set(re.findall(r"\b(gpuwaste_[a-z_]+)", rule["query"])):
            assert prom.query(f"count({metric})"), f"{name}: {metric} has no series"
    # AND the idle rule, with its 6-hour threshold lowered to 1 hour, names exactly the truth's idle workloads
    # (serve first saw them seconds ago; their evidence window makes them idle for 70 minutes already)
    idle_query = rules["GpuWasteWorkloadIdleTooLong"]["query"].replace("6 * 3600", "3600")
    named = {(r["metric"]["namespace"], r["metric"]["workload"]) for r in prom.query(idle_query, at=stack.steady)}
    idle_kinds = ("idle_allocation", "inference_idle", "orphaned")  # the rule's kinds: GPUs held and unused
    assert named == {(t["namespace"], t["workload"]) for t in stack.truth if t["kind"] in idle_kinds}


# -- the Grafana dashboard -------------------------------------------------------------------------------------
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "gpuwaste.json"
#: dashboard variables as a user would pick them on the demo fleet (multi-value variables are regexes)
VARIABLES = {"$cluster": "demo", "$team": ".*", "$namespace": "research", "$workload": "eval-sweep",
             "$__range": "5m", "$__rate_interval": "15s"}


def _panel_queries() -> list[tuple[str, str, bool]]:
    doc = json.loads(DASHBOARD.read_text())
    out = []
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in sorted(VARIABLES.items(), key=lambda kv: -len(kv[0])):
                expr = expr.replace(name, value)
            out.append((panel["title"], expr, bool(target.get("instant"))))
    return out


def test_every_dashboard_panel_returns_data(stack: Stack) -> None:
    # GIVEN every panel query of the committed dashboard, with the demo's variables filled in
    queries = _panel_queries()
    assert len(queries) >= 15
    start = stack.steady - 30
    empty = []
    # WHEN each runs against the Prometheus holding the demo fleet and serve's scraped metrics (range panels over
    # the last minute or so, which spans the steady fleet and the fix; tables as instant queries)
    for title, expr, instant in queries:
        if instant:
            # the time-of-day bars sum the range in $__rate_interval steps (a subquery `[5m:15s]`): at `steady` the
            # counters may be younger than one step, so they are read at the end (as Grafana reads them: at now)
            result = stack.prometheus.query(expr, at=time.time() if "[5m:" in expr else stack.steady)
        else:
            result = stack.prometheus.query_range(expr, datetime.fromtimestamp(start, tz=UTC), datetime.now(tz=UTC), 1)
        if not result:
            empty.append(title)
    # THEN none returns nothing
    assert empty == []


def test_dashboard_shows_the_workload_dcgm_activity_next_to_its_waste(stack: Stack) -> None:
    # GIVEN the DCGM panel's query for eval-sweep (an idle job: its two A100s near 0 activity)
    (expr,) = [e for t, e, _ in _panel_queries() if t == "DCGM activity of the workload"]
    # WHEN it runs at the steady time
    result = stack.prometheus.query(expr, at=stack.steady)
    # THEN it shows one series per GPU of the job's pod, all below the idle threshold (5 %)
    pods = {r["metric"]["workload_pod"] for r in result}
    assert len(result) == 2 and all(p.startswith("eval-sweep-") for p in pods)
    assert all(float(r["value"][1]) < 0.05 for r in result)
