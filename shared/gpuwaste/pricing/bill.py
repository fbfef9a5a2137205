"""Pricing (pure): prices from the bill — effective USD per instance-hour from an AWS Cost and Usage Report 2.0 file.

Reads a CUR 2.0 CSV (AWS Data Exports, the published column names: `line_item_line_item_type`,
`line_item_usage_type`, `line_item_usage_amount`, `line_item_unblended_cost`,
`savings_plan_savings_plan_effective_cost`, `reservation_effective_cost`, `product` — a map, written as JSON in CSV
— or `product_instance_type`, `line_item_usage_start_date`, `bill_billing_period_start_date`). Each EC2 instance-hour
line (usage type `…BoxUsage:<type>` or `…SpotUsage:<type>`) costs what the bill says it effectively cost:

* `SavingsPlanCoveredUsage` → `savings_plan_savings_plan_effective_cost`
* `DiscountedUsage` (reserved instances) → `reservation_effective_cost`
* `Usage` (on-demand, spot) → `line_item_unblended_cost`

Per instance type: Σ effective cost ÷ Σ instance-hours = USD per instance-hour, at the capacity type with the most
hours (spot when `SpotUsage` dominates). The result is a rate card (`PriceOverrides`) whose source names the bill
and its period, so every priced finding says "your bill (CUR 2.0, 2024-01-01 – 2024-01-31)"; list prices remain
for every instance type the bill does not cover. Split cost allocation data (`split_line_item_*`) is not read yet.
"""

from __future__ import annotations

import contextlib
import csv
import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from decimal import Decimal, InvalidOperation
from pathlib import Path

from gpuwaste.errors import InputFormatError
from gpuwaste.pricing.prices import InstanceOverride, PriceOverrides

REQUIRED = ("line_item_line_item_type", "line_item_usage_type", "line_item_usage_amount", "line_item_unblended_cost")
_COST_COLUMN = {
    "SavingsPlanCoveredUsage": "savings_plan_savings_plan_effective_cost",
    "DiscountedUsage": "reservation_effective_cost",
    "Usage": "line_item_unblended_cost",
}


@dataclass(frozen=True)
class BillRates:
    """Effective USD per instance-hour per instance type from one bill, with its period and line counts."""

    overrides: dict[str, InstanceOverride]
    period_start: date | None
    period_end: date | None
    lines_used: int
    source: str


def _dec(raw: str | None, where: str) -> Decimal:
    try:
        return Decimal((raw or "0").strip() or "0")
    except InvalidOperation as exc:
        raise InputFormatError(f"{where}: not a number: {raw!r}") from exc


def _instance_type(row: dict[str, str]) -> str | None:
    direct = (row.get("product_instance_type") or "").strip()
    if direct:
        return direct
    product = (row.get("product") or "").strip()
    if product.startswith("{"):
        try:
            value = json.loads(product).get("instance_type")
        except (ValueError, AttributeError):
            value = None
        if value:
            return str(value)
    usage = row.get("line_item_usage_type") or ""
    return usage.split(":", 1)[1] if ":" in usage else None


def read_cur2(path: Path) -> BillRates:
    """The effective instance-hour rates of a CUR 2.0 CSV file.

    Raises:
        InputFormatError: the file is not CSV with the CUR 2.0 line-item columns, or a number does not parse.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise InputFormatError(f"{path}: cannot read the bill: {exc.strerror or exc}") from exc
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise InputFormatError(
            f"{path}: not a CUR 2.0 export (missing {', '.join(missing)}); export CUR 2.0 as CSV from AWS Data Exports"
        )
    hours: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    cost: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    days: list[date] = []
    used = 0
    for n, row in enumerate(reader, start=2):
        usage_type = row.get("line_item_usage_type") or ""
        item_type = (row.get("line_item_line_item_type") or "").strip()
        if item_type not in _COST_COLUMN or not ("BoxUsage" in usage_type or "SpotUsage" in usage_type):
            continue
        itype = _instance_type(row)
        amount = _dec(row.get("line_item_usage_amount"), f"{path}:{n} line_item_usage_amount")
        if not itype or amount <= 0:
            continue
        capacity = "spot" if "SpotUsage" in usage_type else "on-demand"
        hours[(itype, capacity)] += amount
        cost[(itype, capacity)] += _dec(row.get(_COST_COLUMN[item_type]), f"{path}:{n} {_COST_COLUMN[item_type]}")
        used += 1
        for col in ("line_item_usage_start_date", "bill_billing_period_start_date", "line_item_usage_end_date"):
            raw = (row.get(col) or "").strip()
            if raw:
                with contextlib.suppress(ValueError):
                    days.append(date.fromisoformat(raw[:10]))
    start, end = (min(days), max(days)) if days else (None, None)
    source = f"your bill (CUR 2.0, {start.isoformat()} – {end.isoformat()})" if start and end else "your bill (CUR 2.0)"
    by_type: dict[str, list[tuple[str, Decimal]]] = defaultdict(list)
    for (itype, capacity), h in hours.items():
        by_type[itype].append((capacity, h))
    overrides: dict[str, InstanceOverride] = {}
    for itype, options in sorted(by_type.items()):
        capacity, h = max(options, key=lambda o: (o[1], o[0]))
        rate = (cost[(itype, capacity)] / h).quantize(Decimal("0.000001"))
        if rate <= 0:
            continue
        overrides[itype] = InstanceOverride(
            usd_per_hour=rate,
            capacity_type=capacity,
            source=source,
            effective_date=start,
        )
    return BillRates(overrides, start, end, used, source)


def with_bill(pricing: PriceOverrides, bill: BillRates) -> PriceOverrides:
    """`pricing` with the bill's instance rates layered on top (the bill wins for the instance types it covers)."""
    return pricing.model_copy(update={"instance_types": {**pricing.instance_types, **bill.overrides}})


__all__ = ["BillRates", "read_cur2", "with_bill"]
