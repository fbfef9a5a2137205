"""`gpuwaste export`: FOCUS rows (GPU cost per workload per UTC day, `x_` columns for waste) that add up to the share
ledger, checked against the FOCUS 1.0 column set and — where it is installed — by the FinOps Foundation's own
validator (`focus-validator`, run in its own venv: it pins pandas/pandera/sqlglot the product does not use).

The validator is looked up at $GPUWASTE_FOCUS_VALIDATOR, else `.venv-focus/bin/focus-validator` in the repository
(`python -m venv .venv-focus && .venv-focus/bin/pip install focus-validator==1.0.0 'multimethod<1.11'`). Its 1.0.0
release checks five rules by FOCUS 1.0-preview column names; `tests/fixtures/focus/validator-1.0.0-overrides.yaml`
skips exactly those (the file says why) and the test asserts that only they were skipped.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import xml.etree.ElementTree as ET
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording

DEMO = local.demo_recording()
ROOT = Path(__file__).resolve().parents[2]
OVERRIDES = ROOT / "tests" / "fixtures" / "focus" / "validator-1.0.0-overrides.yaml"
#: FOCUS 1.0 columns a cost and usage dataset carries (the published column names; Mandatory and the Conditional
#: ones that apply to a usage-only provider).
FOCUS_10 = (
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargeFrequency",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "CommitmentDiscountCategory",
    "CommitmentDiscountId",
    "CommitmentDiscountName",
    "CommitmentDiscountStatus",
    "CommitmentDiscountType",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "ListUnitPrice",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "RegionId",
    "RegionName",
    "ResourceId",
    "ResourceName",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "SkuId",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "Tags",
)


def _validator() -> Path | None:
    env = os.environ.get("GPUWASTE_FOCUS_VALIDATOR")
    path = Path(env) if env else ROOT / ".venv-focus" / "bin" / "focus-validator"
    return path if path.exists() else None


def export(path: Path, out: Path, *extra: str) -> tuple[list[dict[str, str]], str]:
    result = CliRunner().invoke(app, ["export", "-r", str(path), "--out", str(out), *extra], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8")))), result.output


def showback_total(path: Path) -> tuple[Decimal, int]:
    import json

    result = CliRunner().invoke(app, ["showback", "-r", str(path), "-o", "json"])
    assert result.exit_code == 0, result.output
    c = json.loads(result.output)["conservation"]
    assert abs(Decimal(str(c["usd"])) - Decimal(str(c["usd_exact"]))) <= Decimal("0.005") * c["physical_gpus"]
    return Decimal(str(c["usd_exact"])).quantize(Decimal("0.01")), c["unpriced_gpus"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    fleet = generate_fleet(FleetSpec(layout="allocation", cluster="mixed", label_style="pod", inference_metrics=False))
    return write_recording(fleet, tmp_path_factory.mktemp("mixed") / "rec", compress=False)


@pytest.mark.parametrize("which", ["demo", "mixed"])
def test_focus_rows_carry_the_focus_columns_and_add_up_to_the_ledger(which: str, mixed: Path, tmp_path: Path) -> None:
    path = DEMO if which == "demo" else mixed
    # WHEN exported
    rows, said = export(path, tmp_path / "focus.csv")
    # THEN every FOCUS 1.0 column is there, in the spec's names, and gpuwaste's own columns are x_-prefixed
    header = list(rows[0])
    assert set(FOCUS_10) <= set(header)
    assert all(c in FOCUS_10 or c == "AvailabilityZone" or c.startswith("x_") for c in header)
    # AND costs are decimals, periods are whole UTC days inside their billing month, quantities are GPU-hours
    for r in rows:
        assert Decimal(r["BilledCost"]) >= 0 and r["BilledCost"] == r["EffectiveCost"] == r["ListCost"]
        start, end = (
            datetime.fromisoformat(r[c].replace("Z", "+00:00")) for c in ("ChargePeriodStart", "ChargePeriodEnd")
        )
        assert (end - start).days == 1 and start.hour == 0
        assert r["BillingPeriodStart"] <= r["ChargePeriodStart"] < r["BillingPeriodEnd"]
        assert r["ConsumedUnit"] == r["PricingUnit"] == "GPU-Hours" and r["ChargeCategory"] == "Usage"
        assert Decimal(r["BilledCost"]) == pytest.approx(
            Decimal(r["ListUnitPrice"]) * Decimal(r["PricingQuantity"]), abs=Decimal("1e-8")
        )
        assert r["x_LineKind"] in ("holder", "unsold slices", "unallocated")
        assert 0 <= Decimal(r["x_Efficiency"] or "0") <= 1
    # AND the rows add up to the physical GPUs' (exact) cost the showback's conservation check states, to the cent
    total, unpriced = showback_total(path)
    assert sum(Decimal(r["BilledCost"]) for r in rows).quantize(Decimal("0.01")) == total
    assert ("unpriced GPUs" in said) == (unpriced > 0)  # unpriced GPUs are left out and said, never $0
    if which == "mixed":  # the unsold part of shared GPUs (KAI's 0.75 GPU) is a row of its own
        assert any(r["x_LineKind"] == "unsold slices" and r["x_Node"] == "ip-10-1-0-40.ec2.internal" for r in rows)
        assert not any(r["x_Namespace"] == "runai-reservation" for r in rows)
    # AND the waste columns carry the scan's waste kinds
    assert any("idle_allocation" in (r["x_WasteKind"] or "") and Decimal(r["x_WastedGpuHours"]) > 0 for r in rows)


def _run_validator(validator: Path, data: Path, report: Path) -> ET.Element:
    site = next((validator.parent.parent / "lib").glob("python*/site-packages"))  # it reads its currency list from cwd
    subprocess.run(
        [
            str(validator),
            "--data-file",
            str(data),
            "--column-namespace",
            "x",
            "--validate-version",
            "1.0",
            "--override-file",
            str(OVERRIDES),
            "--output-type",
            "unittest",
            "--output-destination",
            str(report),
        ],
        cwd=site,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return ET.parse(report).getroot()


def test_the_finops_foundation_validator_accepts_the_export(mixed: Path, tmp_path: Path) -> None:
    validator = _validator()
    if validator is None:
        pytest.skip(
            "focus-validator not installed: python -m venv .venv-focus && .venv-focus/bin/pip install "
            "focus-validator==1.0.0 'multimethod<1.11' (or set GPUWASTE_FOCUS_VALIDATOR)"
        )
    skipped_rules = len(yaml.safe_load(OVERRIDES.read_text())["overrides"])
    for name, path in (("demo", DEMO), ("mixed", mixed)):
        export(path, tmp_path / f"{name}.csv")
        # WHEN the FinOps Foundation's validator checks the file against FOCUS 1.0
        root = _run_validator(validator, tmp_path / f"{name}.csv", tmp_path / f"{name}.xml")
        # THEN every rule passes; only the overridden preview-name rules are skipped
        assert (root.get("failures"), root.get("errors")) == ("0", "0"), name
        assert int(root.get("skipped") or 0) <= skipped_rules and int(root.get("tests") or 0) > 100
    # AND it fails a file with a null cost (the validator can fail): an unpriced row written as empty
    rows = list(csv.DictReader(io.StringIO((tmp_path / "demo.csv").read_text())))
    rows[0]["BilledCost"] = ""
    bad = tmp_path / "bad.csv"
    with bad.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    root = _run_validator(validator, bad, tmp_path / "bad.xml")
    assert root.get("failures") != "0"
