"""Prices from the bill (issue 24 §5): an AWS CUR 2.0 CSV (columns as AWS Data Exports defines them) replaces list
prices with the effective cost per instance-hour — savings plans, reservations, spot — and every priced finding and
the FOCUS export name the bill and its period; instance types the bill does not cover keep list prices."""

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
from gpuwaste.errors import InputFormatError
from gpuwaste.pricing.bill import read_cur2
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.pricing.prices import PriceOverrides

DEMO = local.demo_recording()
COLUMNS = [
    "bill_billing_period_start_date",
    "bill_billing_period_end_date",
    "line_item_line_item_type",
    "line_item_usage_type",
    "line_item_usage_start_date",
    "line_item_usage_end_date",
    "line_item_usage_amount",
    "line_item_unblended_cost",
    "line_item_resource_id",
    "savings_plan_savings_plan_effective_cost",
    "reservation_effective_cost",
    "product",
    "pricing_public_on_demand_cost",
]


def write_cur(path: Path, lines: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        for line in lines:
            w.writerow({c: line.get(c, "") for c in COLUMNS})
    return path


def line(
    item: str, usage: str, hours: str, unblended: str, *, sp: str = "", ri: str = "", itype: str | None = None
) -> dict[str, str]:
    return {
        "bill_billing_period_start_date": "2024-01-01T00:00:00Z",
        "bill_billing_period_end_date": "2024-02-01T00:00:00Z",
        "line_item_line_item_type": item,
        "line_item_usage_type": usage,
        "line_item_usage_start_date": "2024-01-01T00:00:00Z",
        "line_item_usage_end_date": "2024-01-31T23:00:00Z",
        "line_item_usage_amount": hours,
        "line_item_unblended_cost": unblended,
        "savings_plan_savings_plan_effective_cost": sp,
        "reservation_effective_cost": ri,
        "product": json.dumps({"instance_type": itype}) if itype else "{}",
        "line_item_resource_id": "i-0abc",
    }


def test_effective_rate_per_instance_hour_from_savings_plans_reservations_and_on_demand(tmp_path: Path) -> None:
    # GIVEN 10 p5 hours: 6 covered by a savings plan at $40/h effective, 4 on demand at $98.32/h; 5 g5 reserved hours
    cur = write_cur(
        tmp_path / "cur.csv",
        [
            line("SavingsPlanCoveredUsage", "USE1-BoxUsage:p5.48xlarge", "6", "589.92", sp="240", itype="p5.48xlarge"),
            line("Usage", "USE1-BoxUsage:p5.48xlarge", "4", "393.28", itype="p5.48xlarge"),
            line(
                "DiscountedUsage", "USE1-BoxUsage:g5.12xlarge", "5", "0", ri="20.00"
            ),  # instance type from the usage type
            line("Usage", "USE1-DataTransfer-Out-Bytes", "100", "9.00"),  # not an instance-hour
            line("Tax", "", "0", "12.00"),
        ],
    )
    # WHEN read
    rates = read_cur2(cur)
    # THEN p5 costs (240 + 393.28) / 10 h and g5 20 / 5 h, said to come from the bill and its period
    assert rates.overrides["p5.48xlarge"].usd_per_hour == Decimal("63.328")
    assert rates.overrides["g5.12xlarge"].usd_per_hour == Decimal("4")
    assert rates.lines_used == 3 and set(rates.overrides) == {"p5.48xlarge", "g5.12xlarge"}
    assert rates.source == "your bill (CUR 2.0, 2024-01-01 – 2024-01-31)"
    # AND the price book prices a p5 GPU-hour at the bill's rate ÷ 8 GPUs, with the provenance in its basis
    book = PriceBook.bundled().with_overrides(PriceOverrides(instance_types=rates.overrides))
    rate = book.gpu_hour_rate(
        instance_type="p5.48xlarge",
        capacity_type="on-demand",
        gpu_model=None,
        physical_gpus=8,
        region="us-east-1",
        accelerator=None,
    )
    assert rate.usd_per_gpu_hour == Decimal("7.916")  # type: ignore[union-attr]
    assert "your bill (CUR 2.0, 2024-01-01 – 2024-01-31)" in rate.basis  # type: ignore[union-attr]


def test_spot_hours_price_spot_nodes(tmp_path: Path) -> None:
    cur = write_cur(
        tmp_path / "cur.csv", [line("Usage", "USE1-SpotUsage:g5.12xlarge", "10", "22.00", itype="g5.12xlarge")]
    )
    o = read_cur2(cur).overrides["g5.12xlarge"]
    assert (o.usd_per_hour, o.capacity_type) == (Decimal("2.2"), "spot")


def test_not_a_bill_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(InputFormatError, match="not a CUR 2.0 export"):
        read_cur2(bad)
    result = CliRunner().invoke(app, ["showback", "-r", str(DEMO), "--bill", str(bad)])
    assert result.exit_code == 2 and "not a CUR 2.0 export" in result.output


def test_a_bill_changes_the_scan_prices_with_its_provenance(tmp_path: Path) -> None:
    # GIVEN a bill that says the demo's p5.48xlarge costs $40/h effective (list: ~$98/h)
    cur = write_cur(
        tmp_path / "cur.csv",
        [line("SavingsPlanCoveredUsage", "USE1-BoxUsage:p5.48xlarge", "100", "9832", sp="4000", itype="p5.48xlarge")],
    )
    runner = CliRunner()
    plain = json.loads(runner.invoke(app, ["scan", "-r", str(DEMO), "-o", "json", "-q"]).output)
    billed_run = runner.invoke(app, ["scan", "-r", str(DEMO), "-o", "json", "-q", "--bill", str(cur)])
    assert billed_run.exit_code == 0, billed_run.output
    billed = json.loads(billed_run.stdout)
    # THEN findings on p5 nodes are priced at $5/GPU-h from the bill, with its provenance; the others keep list prices

    def p5(doc):  # type: ignore[no-untyped-def]
        return [
            f
            for f in doc["findings"]
            if f["subject"].get("instance_type") == "p5.48xlarge" and (f.get("cost") or {}).get("usd_per_gpu_hour")
        ]

    assert p5(billed) and all(Decimal(f["cost"]["usd_per_gpu_hour"]) == Decimal(5) for f in p5(billed))
    assert all(
        "your bill (CUR 2.0, 2024-01-01 – 2024-01-31)"
        in f["cost"]["formula"] + f["cost"].get("source", "") + json.dumps(f["cost"])
        for f in p5(billed)
    )
    assert all(Decimal(f["cost"]["usd_per_gpu_hour"]) > Decimal(5) for f in p5(plain))
    others = {
        f["fingerprint"]: f["cost"]["usd_per_gpu_hour"]
        for f in plain["findings"]
        if (f.get("cost") or {}).get("usd_per_gpu_hour")
        and f["subject"].get("instance_type") not in ("p5.48xlarge", None)
    }
    assert others and all(
        {f["fingerprint"]: f["cost"]["usd_per_gpu_hour"] for f in billed["findings"]}.get(k) == v
        for k, v in others.items()
    )
    # AND the FOCUS export's rows on p5 nodes name the bill
    export = runner.invoke(app, ["export", "-r", str(DEMO), "--bill", str(cur), "--out", str(tmp_path / "f.csv")])
    assert export.exit_code == 0, export.output
    rows = list(csv.DictReader(io.StringIO((tmp_path / "f.csv").read_text())))
    assert any(r["x_PriceSource"].startswith("your bill (CUR 2.0") for r in rows)
    assert any(r["x_PriceSource"] != "" and not r["x_PriceSource"].startswith("your bill") for r in rows)
