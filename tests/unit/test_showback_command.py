"""`gpuwaste showback`: allocated / used / wasted GPU-hours and USD per team, namespace and allow-listed label, from the
same ledger and the same priced findings as the scan (issue 24 §2) — on the demo and the generator's mixed-allocation
fleet, groups adding up to the physical GPUs' cost to the cent."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.config import GpuWasteConfig
from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording

DEMO = local.demo_recording()


def invoke(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})


def _scan_findings(path: Path):  # type: ignore[no-untyped-def]
    cfg = GpuWasteConfig()
    sources = local.recording_sources(path, cfg)
    assert sources.recording is not None
    cfg, _ = local.recording_config(cfg, sources, config_given=False)
    return local.scan_service(sources, cfg, window_s=sources.recording.meta.window_s).scan(
        at=sources.recording.end_time()
    )


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    fleet = generate_fleet(FleetSpec(layout="allocation", cluster="mixed", label_style="pod", inference_metrics=False))
    return write_recording(fleet, tmp_path_factory.mktemp("mixed") / "rec", compress=False)


@pytest.mark.parametrize("which", ["demo", "mixed"])
def test_showback_groups_add_up_to_the_gpus_cost_and_carry_the_scans_waste(which: str, mixed: Path) -> None:
    path = DEMO if which == "demo" else mixed
    # WHEN showback runs by team, namespace and the team label
    result = invoke(
        "showback", "-r", str(path), "--by", "team", "--by", "namespace", "--by", "label:team", "-o", "json"
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    c = doc["conservation"]
    # THEN the check holds and every grouping adds up to the physical GPUs' cost, to the cent
    assert c["holds"] is True
    for by, rows in doc["groups"].items():
        cents = sum(round(r["allocated_usd"] * 100) for r in rows)
        assert cents == round(c["usd"] * 100), by
        assert sum(Decimal(str(r["allocated_gpu_hours"])) for r in rows) == pytest.approx(
            Decimal(str(c["gpu_hours"])), abs=Decimal("0.001")
        )
        for r in rows:
            assert 0 <= r["used_gpu_hours"] <= r["allocated_gpu_hours"] + 1e-4
            assert r["efficiency"] is None or 0 <= r["efficiency"] <= 1
    # AND the waste is the scan's own: the same findings, the same USD in the window (one number everywhere)
    report = _scan_findings(path)
    waste = [f for f in report.findings if f.kind.is_waste and not f.money_owner]
    expected = sum((f.cost.usd_in_window for f in waste if f.cost and f.cost.usd_in_window is not None), Decimal(0))
    got = sum(Decimal(str(r["wasted_usd"])) for r in doc["groups"]["team"])
    assert abs(got - expected) <= Decimal("0.01") * len(doc["groups"]["team"])  # each row rounds to the cent once
    assert expected > 0


def test_mixed_fleet_showback_names_the_unsold_slices_and_each_team(mixed: Path) -> None:
    result = invoke("showback", "-r", str(mixed), "--by", "namespace", "-o", "csv")
    assert result.exit_code == 0, result.output
    rows = {r["group"]: r for r in csv.DictReader(io.StringIO(result.output))}
    # THEN KAI's and MIG's unsold parts are their own line, and each namespace holds its true share over the window
    assert float(rows["(unsold slices)"]["allocated_gpu_hours"]) == pytest.approx(
        1.25 * 70 / 60, abs=1e-3
    )  # 0.75 + 0.5 GPUs
    assert {"research", "search", "inference", "embed", "genai", "ml", "viz", "(unallocated)"} <= set(rows)
    assert float(rows["embed"]["allocated_gpu_hours"]) == pytest.approx(1.0 * 70 / 60, abs=1e-3)  # 4 × HAMi 25 %
    assert "runai-reservation" not in rows  # infrastructure pods are never charged


def test_showback_refuses_a_label_not_on_the_allow_list() -> None:
    result = invoke("showback", "-r", str(DEMO), "--by", "label:secret-owner-email")
    assert result.exit_code == 2
    assert "not allow-listed" in result.output
    ok = invoke(
        "showback",
        "-r",
        str(DEMO),
        "--by",
        "label:secret-owner-email",
        "-o",
        "json",
        env={"GPUWASTE_SHOWBACK_LABELS": "secret-owner-email"},
    )
    assert ok.exit_code == 0, ok.output


def test_showback_table_prints_the_check() -> None:
    result = invoke("showback", "-r", str(DEMO))
    assert result.exit_code == 0, result.output
    assert "showback by team" in result.output and "share conservation holds" in result.output


def test_generated_mixed_allocation_fleet_and_the_demo_summary_show_the_funnel_and_the_check(tmp_path: Path) -> None:
    # GIVEN the mixed-allocation fleet written by the command line
    made = invoke("generate-fleet", str(tmp_path / "mixed"), "--layout", "allocation")
    assert made.exit_code == 0, made.output
    # WHEN scanned, THEN the header shows the funnel and the conservation check holding
    scanned = invoke("scan", "-r", str(tmp_path / "mixed"), "-q")
    assert scanned.exit_code == 0, scanned.output
    assert (
        "funnel: 22.0 GPUs → allocated" in scanned.output
        and "share conservation holds: 22 physical GPUs" in scanned.output
    )
    # AND the demo's summary ends with the last window's funnel, per-team showback and the check
    demo = invoke("demo")
    assert demo.exit_code == 0, demo.output
    tail = demo.output[demo.output.index("fleet funnel and showback") :]
    assert "funnel: 36.0 GPUs" in tail and "ml-serving: allocated" in tail and "share conservation holds" in tail
