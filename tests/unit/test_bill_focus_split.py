"""Bills as price input beyond plain CUR 2.0 (issue 24 §5): a FOCUS billing export and CUR 2.0 split cost allocation
data, written from the published column definitions.

* FOCUS: the FinOps Foundation's FOCUS 1.0 specification (columns ChargeCategory, ChargePeriodStart, ChargePeriodEnd,
  EffectiveCost, ConsumedQuantity, ConsumedUnit, PricingCategory, ResourceId, SkuPriceId) and AWS Data Exports
  "FOCUS 1.0 with AWS columns" (the provider columns x_UsageType, x_Operation, x_ServiceCode).
* Split cost allocation: AWS Data Exports "Split line item columns" (split_line_item_parent_resource_id,
  split_line_item_split_cost, split_line_item_unused_cost, split_line_item_net_split_cost,
  split_line_item_net_unused_cost, split_line_item_split_usage, split_line_item_split_usage_ratio) on the EKS pod lines
  (line_item_operation EKSPod-EC2, line_item_resource_id arn:aws:eks:…:pod/<cluster>/<namespace>/<pod>/<uid>).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.errors import InputFormatError
from gpuwaste.pricing.bill import parse_bill, read_bill
from tests.unit.test_bill_prices import line

DEMO = local.demo_recording()
FOCUS_COLUMNS = [
    "BilledCost", "BillingAccountId", "BillingCurrency", "BillingPeriodStart", "BillingPeriodEnd", "ChargeCategory",
    "ChargeDescription", "ChargePeriodStart", "ChargePeriodEnd", "CommitmentDiscountStatus", "ConsumedQuantity",
    "ConsumedUnit", "EffectiveCost", "ListCost", "PricingCategory", "PricingQuantity", "PricingUnit", "ProviderName",
    "RegionId", "ResourceId", "ServiceName", "SkuId", "SkuPriceId", "x_Operation", "x_ServiceCode", "x_UsageType",
]


def focus_line(usage_type: str, hours: str, effective: str, *, billed: str | None = None, category: str = "Usage",
               pricing: str = "Standard", start: str = "2024-03-01T00:00:00Z",
               end: str = "2024-04-01T00:00:00Z") -> dict[str, str]:
    return {
        "BilledCost": billed if billed is not None else effective, "BillingAccountId": "123456789012",
        "BillingCurrency": "USD", "BillingPeriodStart": "2024-03-01T00:00:00Z", "BillingPeriodEnd": "2024-04-01T00:00:00Z",
        "ChargeCategory": category, "ChargeDescription": usage_type, "ChargePeriodStart": start, "ChargePeriodEnd": end,
        "ConsumedQuantity": hours, "ConsumedUnit": "Hrs", "EffectiveCost": effective, "ListCost": effective,
        "PricingCategory": pricing, "PricingQuantity": hours, "PricingUnit": "Hrs", "ProviderName": "AWS",
        "RegionId": "us-east-1", "ResourceId": "i-0abc", "ServiceName": "Amazon Elastic Compute Cloud",
        "SkuId": "SKU1", "SkuPriceId": "SKU1.JRTCKXETXF", "x_Operation": "RunInstances", "x_ServiceCode": "AmazonEC2",
        "x_UsageType": usage_type,
    }


def write_focus(path: Path, lines: list[dict[str, str]], columns: list[str] = FOCUS_COLUMNS) -> Path:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    w.writeheader()
    w.writerows(lines)
    path.write_text(buf.getvalue(), encoding="utf-8")
    return path


def test_focus_export_gives_the_effective_rate_per_instance_hour_with_its_period(tmp_path: Path) -> None:
    # GIVEN a FOCUS month: 10 p5 hours, 6 under a savings plan (EffectiveCost 240 while BilledCost is 0) and 4 on
    # demand at $98.32; 8 g5 spot hours (PricingCategory Dynamic); a tax line and a data-transfer line
    bill = write_focus(tmp_path / "focus.csv", [
        focus_line("USE1-BoxUsage:p5.48xlarge", "6", "240", billed="0", pricing="Committed"),
        focus_line("USE1-BoxUsage:p5.48xlarge", "4", "393.28"),
        focus_line("USE1-SpotUsage:g5.12xlarge", "8", "17.60", pricing="Dynamic"),
        focus_line("USE1-DataTransfer-Out-Bytes", "100", "9.00"),
        focus_line("", "0", "12.00", category="Tax"),
    ])
    # WHEN read
    rates = read_bill(bill)
    # THEN p5 costs (240 + 393.28) / 10 h (EffectiveCost, not BilledCost) and g5 2.20 / h at spot, with the period
    # (ChargePeriodEnd is exclusive: March)
    assert rates.kind == "FOCUS" and rates.lines_used == 3
    assert rates.overrides["p5.48xlarge"].usd_per_hour == Decimal("63.328")
    g5 = rates.overrides["g5.12xlarge"]
    assert (g5.usd_per_hour, g5.capacity_type) == (Decimal("2.2"), "spot")
    assert rates.source == "your bill (FOCUS, 2024-03-01 – 2024-03-31)"
    assert rates.overrides["p5.48xlarge"].source == rates.source


def test_focus_without_the_provider_usage_type_is_refused_with_what_to_export(tmp_path: Path) -> None:
    bill = write_focus(tmp_path / "f.csv", [focus_line("USE1-BoxUsage:p5.48xlarge", "1", "50")],
                       [c for c in FOCUS_COLUMNS if c != "x_UsageType"])
    with pytest.raises(InputFormatError, match="FOCUS 1.0 with AWS columns"):
        read_bill(bill)


def test_a_bad_number_in_a_focus_bill_names_the_line_and_column(tmp_path: Path) -> None:
    bill = write_focus(tmp_path / "f.csv", [focus_line("USE1-BoxUsage:p5.48xlarge", "1", "fifty")])
    with pytest.raises(InputFormatError, match=r"f\.csv:2 EffectiveCost: not a number"):
        read_bill(bill)


def test_a_gzip_bill_is_read_as_aws_delivers_it(tmp_path: Path) -> None:
    plain = write_focus(tmp_path / "f.csv", [focus_line("USE1-BoxUsage:p5.48xlarge", "2", "100")])
    gz = tmp_path / "f.csv.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_bill(gz).overrides["p5.48xlarge"].usd_per_hour == Decimal(50)


SPLIT = ["line_item_operation", "split_line_item_parent_resource_id", "split_line_item_split_usage",
         "split_line_item_split_usage_ratio", "split_line_item_split_cost", "split_line_item_unused_cost",
         "split_line_item_net_split_cost", "split_line_item_net_unused_cost"]


def pod_line(cluster: str, namespace: str, pod: str, split: str, unused: str, *, net: tuple[str, str] | None = None,
             usage: str = "USE1-EKS-EC2-vCPU-Hours") -> dict[str, str]:
    row = line("Usage", usage, "0", "0")
    row.update({
        "line_item_operation": "EKSPod-EC2",
        "line_item_resource_id": f"arn:aws:eks:us-east-1:123456789012:pod/{cluster}/{namespace}/{pod}/uid-{pod}",
        "split_line_item_parent_resource_id": "i-0parent", "split_line_item_split_usage": "1",
        "split_line_item_split_usage_ratio": "0.25", "split_line_item_split_cost": split,
        "split_line_item_unused_cost": unused,
        "split_line_item_net_split_cost": net[0] if net else "", "split_line_item_net_unused_cost": net[1] if net else "",
    })
    return row


def test_split_cost_allocation_pod_lines_are_kept_per_pod_and_never_priced_as_instance_hours(tmp_path: Path) -> None:
    # GIVEN a CUR 2.0 with split cost allocation data: the parent p5 instance-hours, and AWS's split of them to two
    # pods (vCPU and memory lines each; one pod's lines carry the net pair of an account with discounts)
    import tests.unit.test_bill_prices as base

    columns = base.COLUMNS + SPLIT
    rows = [
        {**line("Usage", "USE1-BoxUsage:p5.48xlarge", "10", "983.20", itype="p5.48xlarge"), "line_item_operation": "RunInstances"},
        pod_line("prod", "ml", "trainer-0", "300", "100"),
        pod_line("prod", "ml", "trainer-0", "200", "50", usage="USE1-EKS-EC2-GB-Hours"),
        pod_line("prod", "web", "api-1", "250", "83.20", net=("200", "60")),
    ]
    path = tmp_path / "cur.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in columns})
    # WHEN read
    rates = read_bill(path)
    # THEN the rate comes from the instance line alone, and each pod carries split + unused cost (net when given)
    assert rates.overrides["p5.48xlarge"].usd_per_hour == Decimal("98.32") and rates.lines_used == 1
    trainer, api = rates.pods[("prod", "ml", "trainer-0")], rates.pods[("prod", "web", "api-1")]
    assert trainer.usd == Decimal(650) and trainer.parents == ("i-0parent",)
    assert api.usd == Decimal(260)
    assert trainer.source == "your bill (CUR 2.0 split cost allocation, 2024-01-01 – 2024-01-31)"
    # AND the command line says what AWS split, and the showback document sets it beside its own groups, per cluster
    # and namespace over the bill's period
    out = CliRunner().invoke(app, ["showback", "-r", str(DEMO), "--bill", str(path), "-o", "json"])
    assert out.exit_code == 0, out.output
    assert "AWS split $910.00 of instances to 2 EKS pods" in out.stderr
    split = json.loads(out.stdout)["bill_split_cost"]
    assert split["source"] == trainer.source and Decimal(split["usd"]) == Decimal(910)
    assert [(n["cluster"], n["namespace"], Decimal(n["usd"]), n["pods"]) for n in split["namespaces"]] == [
        ("prod", "ml", Decimal(650), 1), ("prod", "web", Decimal(260), 1)]


def test_a_file_that_is_neither_bill_names_both_formats(tmp_path: Path) -> None:
    with pytest.raises(InputFormatError, match="not a CUR 2.0 export.*or a FOCUS export"):
        parse_bill("a,b\n1,2\n", "x.csv")


def test_a_focus_bill_changes_the_scan_prices_with_its_provenance(tmp_path: Path) -> None:
    # GIVEN a FOCUS bill pricing the demo's p5.48xlarge at $40/h effective (list: ~$98/h)
    bill = write_focus(tmp_path / "focus.csv", [focus_line("USE1-BoxUsage:p5.48xlarge", "100", "4000", billed="0")])
    result = CliRunner().invoke(app, ["export", "-r", str(DEMO), "--bill", str(bill), "--out", str(tmp_path / "o.csv")])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO((tmp_path / "o.csv").read_text())))
    p5 = [r for r in rows if r["x_PriceSource"].startswith("your bill (FOCUS, 2024-03-01 – 2024-03-31)")]
    # THEN the p5 rows are priced at $5 per GPU-hour (40 / 8 GPUs) and name the bill
    assert p5 and all(Decimal(r["ListUnitPrice"]) == Decimal(5) for r in p5)
