"""Configuration never changes a verdict silently: the demo scanned without a config, with an empty one and with one
that sets delivery only gives the same findings, kinds and total; a config that sets the wrong-hardware look-back
itself is the one that changes the answer, and the scan says which setting did."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app

DEMO = local.demo_recording()


def _scan(*extra: str) -> tuple[dict[str, str], str]:
    result = CliRunner().invoke(app, ["scan", "--recording", str(DEMO), "-o", "json", *extra])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    return {f["fingerprint"][:12]: f["kind"] for f in doc["findings"]}, doc["total_usd_per_day"]


def test_an_empty_or_delivery_only_config_gives_the_same_findings_and_total(tmp_path: Path) -> None:
    # GIVEN no config, an empty config, and a config that sets delivery only
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    delivery = tmp_path / "delivery.yaml"
    delivery.write_text("delivery:\n  default_channel: '#gpu-waste'\nlifecycle:\n  ticket_usd_per_day: 0\n")
    # WHEN the demo is scanned with each
    base = _scan()
    # THEN each gives the same findings (same IDs, same kinds) and the same total
    assert _scan("--config", str(empty)) == base
    assert _scan("--config", str(delivery)) == base
    kinds = set(base[0].values())
    assert "wrong_hardware" in kinds and base[1].startswith("1509.2")


def test_a_config_that_sets_the_look_back_is_what_changes_the_answer(tmp_path: Path) -> None:
    # GIVEN a config that sets the wrong-hardware look-back to a real cluster's 7 days
    cfg = tmp_path / "lookback.yaml"
    cfg.write_text("detectors:\n  wrong_hardware:\n    lookback_s: 604800\n")
    # WHEN the demo is scanned with it
    findings, _total = _scan("--config", str(cfg))
    # THEN the wrong-hardware verdict is gone (70 min of telemetry cannot show a 7-day peak)
    assert "wrong_hardware" not in set(findings.values())
    # AND without that setting the table says which setting shortens the look-back
    table = CliRunner().invoke(app, ["scan", "--recording", str(DEMO)], env={"COLUMNS": "200"})
    assert "detectors.wrong_hardware.lookback_s" in table.output
