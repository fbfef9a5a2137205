"""Integration: a smoke run of the fleet-scale benchmark (`bench/run.py --sizes 8 --quick`), so the scripts cannot rot.

It runs every part of `make bench` on an 8-GPU fleet (real Prometheus backfilled with promtool, the fake
kube-apiserver, the scan in a child process, the floor, the naive strategy, the local chain, moto, the Slack
fake, the projection) and checks the report's shape and that its values are sane. No timing is asserted:
speed numbers belong to `make bench`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers.prometheus import INSTALL_HINT, prometheus_available

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SIZE_KEYS = {
    "gpus", "pods", "findings", "queries", "bytes_received", "ours_s", "ours_cpu_s", "peak_rss_mb", "prom_eval_s", "floor_s",
    "ours_over_floor", "scan_over_floor", "naive_loopback_s", "naive_2ms_s", "naive_over_ours_loopback", "naive_over_ours_2ms",
    "naive_unseen_gpus", "split_s", "per_query", "minimal_floor_s", "plan_floor_over_minimal", "scan_over_minimal", "rules",
    "recording_s", "recording_peak_mb", "recording_kb_per_gpu", "api_cs_added_s", "ksm_cs_added_s",
}


@pytest.fixture(scope="module")
def smoke_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, str]:
    if not prometheus_available():
        pytest.skip(INSTALL_HINT)
    out = tmp_path_factory.mktemp("bench")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}"}
    proc = subprocess.run(
        [sys.executable, "bench/run.py", "--sizes", "8", "--quick", "--results", str(out / "RESULTS.md"), "--json", str(out / "r.json"),
         "--workdir", str(out / "work"), "--cache-dir", str(out / "cache")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((out / "r.json").read_text())
    report["_cache_dir"] = str(out / "cache")
    return report, (out / "RESULTS.md").read_text(), proc.stdout


def test_bench_smoke_reports_every_measure_per_size(smoke_report: tuple[dict, str, str]) -> None:
    # GIVEN the smoke run's report
    report, _, _ = smoke_report
    # WHEN we look at its one size
    (size,) = report["sizes"]
    # THEN every measure is there, and the values are sane
    assert set(size) >= SIZE_KEYS
    assert size["gpus"] >= 8
    assert size["queries"] > 0
    assert size["queries"] == size["query_count_reported"]
    assert size["findings"] > 0
    assert size["bytes_received"] > 0
    assert size["scan_gpus_seen"] == size["gpus"]
    assert size["ours_s"] > 0 and size["floor_s"] > 0 and size["peak_rss_mb"] > 0
    assert size["naive_unseen_gpus"] == size["unheld_gpus"]
    # AND the raw plan ran first, the shipped rules (backfilled by promtool) served the second pass, the recording path ran too
    assert size["plan"] == "raw" and size["rules"]["plan"] == "recording rules"
    assert size["rules"]["findings"] == size["findings"] == size["recording_findings"]
    assert size["rules"]["minimal_floor_s"] > 0 and size["recording_gpus"] == size["gpus"]
    assert len(size["per_query"]) == size["queries"]
    # AND the cluster-state cost of each source: a scan with the state handed in already read finds what the scan with
    # the read finds (the same state), and the wall time the read adds is measured next to its own wall time
    for src in ("api", "ksm"):
        assert size[f"{src}_cs_given_findings"] == size[f"{src}_cs_findings"] and sum(size[f"{src}_cs_findings"].values()) > 0
        assert size[f"{src}_cs_own_s"] > 0 and size[f"{src}_cs_given_scan_s"] > 0
        assert size[f"{src}_cs_added_s"] == size[f"{src}_cs_scan_s"] - size[f"{src}_cs_given_scan_s"]


def test_bench_smoke_keeps_the_generated_data_for_the_next_run_and_states_the_machine(smoke_report: tuple[dict, str, str]) -> None:
    # GIVEN the smoke run's report and its cache folder
    report, text, _ = smoke_report
    (size,) = report["sizes"]
    entries = list(Path(report["_cache_dir"]).iterdir())
    # THEN the data was generated now and kept: the recording, the backfilled TSDB and the rule blocks of this rules file
    assert size["cache"] == "generated now" and size["rules_cache"] == "miss"
    (entry,) = [e for e in entries if e.is_dir()]
    assert entry.name.startswith("gpus-8-full-") and (entry / "meta.json").exists() and (entry / "data").is_dir()
    assert (entry / "recording" / "telemetry.om").exists() and any(e.name.startswith("rule-blocks-") for e in entry.iterdir())
    # AND the report states the load, the CLI start-up and the ratio rows of issue 13
    assert report["load_average_start"] and report["load_average_end"] and size["load_average"]
    assert report["startup"]["--help"]["median_s"] > 0 and report["startup"]["scan demo"]["median_s"] > 0
    for row in ("scan ÷ minimal floor", "plan floor ÷ minimal floor", "KSM-only cluster state", "recording path peak MB",
                "CLI start-up s", "load average 1/5/15 min"):
        assert row in text, row


def test_bench_smoke_measures_the_chain_aws_calls_and_slack(smoke_report: tuple[dict, str, str]) -> None:
    # GIVEN the smoke run's report
    report, _, _ = smoke_report
    # WHEN we read the stages after the scan
    chain = report["chain"]
    # THEN each was measured, not skipped with an error
    assert "error" not in chain["local"], chain["local"]
    assert chain["local"]["findings"] > 0 and chain["local"]["failed"] == 0
    assert chain["local"]["slack_posts"] > 0
    assert chain["aws"]["sqs_calls_per_finding"] > 0
    assert chain["aws"]["dynamodb_calls_per_finding"] > 0
    assert chain["aws"]["steady"]["dynamodb_calls_per_finding"] > 0
    assert chain["slack"]["messages"] > 0


def test_bench_smoke_writes_table_results_and_projection(smoke_report: tuple[dict, str, str]) -> None:
    # GIVEN the smoke run's outputs
    report, results_md, stdout = smoke_report
    # WHEN we read the printed table, the Markdown report and the projection
    projection = report["projection"]
    # THEN the table has both ratios, RESULTS.md has the machine and targets, the projection has a cost
    assert "scan ÷ plan floor" in stdout and "scan ÷ minimal floor" in stdout and "naive ÷ ours (+2 ms)" in stdout
    assert "with the shipped recording rules" in stdout and "recording path" in stdout
    assert "## Targets" in results_md and "cores" in results_md and "Lambda memory and timeout" in results_md
    assert projection["total_usd_per_month"] > 0
    assert projection["scan"]["memory_mb"] >= 512


def test_bench_smoke_prints_the_scale_out_proof_of_issue_23(smoke_report: tuple[dict, str, str]) -> None:
    # GIVEN the smoke run's report and what it printed
    report, results_md, stdout = smoke_report
    shards, pipeline = report["shards"], report["pipeline"]
    # THEN (a): the fleet scanned as 2 shards gives exactly the whole scan's findings, none twice
    assert shards["shard_count"] == 2 and len(shards["shards"]) == 2
    assert shards["same_findings"] and shards["duplicate_fingerprints"] == 0
    assert shards["findings"][0] == shards["findings"][1] > 0 and shards["gpus"][0] == shards["gpus"][1]
    # AND (b): every case went through price and dedupe on moto, SQS's limit enforced and never hit, store units
    # counted at the client, the missed findings resolved by the completion that missed them
    cases = pipeline["results"]
    assert [(r["clusters"], r["findings_per_cluster"]) for r in cases] == [(1, 10), (1, 30), (2, 10)]
    for r in cases:
        assert 0 < r["largest_sqs_message_bytes"] <= 262_144 and r["sqs_refused"] == 0
        assert r["first"]["alerts"].get("new", 0) > 0 and r["first"]["units"]["table_write"] > 0
        assert r["tenth_gone"]["missed"] == r["clusters"] * (r["findings_per_cluster"] // 10)
        assert r["resolved"] == r["tenth_gone"]["missed"]
        assert r["tenth_gone"]["completion_units"].get("items_read", 0) > 0
        assert r["first"]["dedupe_peak_mb"] > 0
    # AND (a)-(d) are printed, and written to RESULTS.md
    for part in ("(a) ", "(b) pipeline on moto", "(c) sizing per shard", "(d) scan targets side by side", "per finding from 10 to 30"):
        assert part in stdout, part
    assert "## Scale-out proof (issue 23 item 7)" in results_md and "GPUs per shard" in results_md
