"""Pricing (pure): prices from the bill — effective USD per instance-hour from a CUR 2.0 or FOCUS billing export.

**CUR 2.0** (AWS Data Exports, the published column names: `line_item_line_item_type`, `line_item_usage_type`,
`line_item_usage_amount`, `line_item_unblended_cost`, `savings_plan_savings_plan_effective_cost`,
`reservation_effective_cost`, `product` — a map, written as JSON in CSV — or `product_instance_type`,
`line_item_usage_start_date`, `bill_billing_period_start_date`). Each EC2 instance-hour line (usage type
`…BoxUsage:<type>` or `…SpotUsage:<type>`) costs what the bill says it effectively cost:

* `SavingsPlanCoveredUsage` → `savings_plan_savings_plan_effective_cost`
* `DiscountedUsage` (reserved instances) → `reservation_effective_cost`
* `Usage` (on-demand, spot) → `line_item_unblended_cost`

**Split cost allocation data** (CUR 2.0 with `INCLUDE_SPLIT_COST_ALLOCATION_DATA`; AWS Data Exports "Split line item
columns"): the EKS pod lines (`line_item_operation` `EKSPod-EC2`, `line_item_resource_id`
`arn:aws:eks:<region>:<account>:pod/<cluster>/<namespace>/<pod>/<uid>`) carry AWS's own split of each parent instance
(`split_line_item_parent_resource_id`) to its pods: `split_line_item_split_cost` + `split_line_item_unused_cost` (the
pod-attribution view; the `net_` pair when present). They are not instance-hours and never enter the rates; they are
kept per pod (`BillRates.pods`) with their provenance, so a showback can set AWS's split beside gpuwaste's GPU-share
ledger.

**FOCUS** (FinOps Open Cost and Usage Specification 1.x, as AWS Data Exports "FOCUS 1.0 with AWS columns" writes it):
`ChargeCategory` `Usage` lines of instance-hours — the instance type from `x_UsageType` (`…BoxUsage:<type>`,
`…SpotUsage:<type>`; spot also when `PricingCategory` is `Dynamic`) — cost `EffectiveCost` (amortised: savings plans
and reservations included) over `ConsumedQuantity` hours; the period from `ChargePeriodStart` / `ChargePeriodEnd`.

Per instance type: Σ effective cost ÷ Σ instance-hours = USD per instance-hour, at the capacity type with the most
hours (spot when spot hours dominate). The result is a rate card (`PriceOverrides`) whose source names the bill and
its period, so every priced finding says "your bill (CUR 2.0, 2024-01-01 – 2024-01-31)" (or "your bill (FOCUS, …)");
list prices remain for every instance type the bill does not cover.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path

from gpuwaste.errors import InputFormatError
from gpuwaste.pricing.prices import InstanceOverride, PriceOverrides

REQUIRED = ("line_item_line_item_type", "line_item_usage_type", "line_item_usage_amount", "line_item_unblended_cost")
#: the FOCUS columns a FOCUS bill must have (FOCUS 1.0 column ids)
FOCUS_REQUIRED = ("ChargeCategory", "ChargePeriodStart", "ChargePeriodEnd", "EffectiveCost", "ConsumedQuantity")
#: the largest bill read (decompressed): a month of CUR 2.0 for a large account is hundreds of MB
MAX_BILL_BYTES = 512 * 1024 * 1024
_COST_COLUMN = {
    "SavingsPlanCoveredUsage": "savings_plan_savings_plan_effective_cost",
    "DiscountedUsage": "reservation_effective_cost",
    "Usage": "line_item_unblended_cost",
}
_ZERO = Decimal(0)


@dataclass(frozen=True)
class PodSplitCost:
    """AWS's split of parent instances to one EKS pod (CUR 2.0 split cost allocation data), over the bill's period.

    Attributes:
        cluster, namespace, pod: from the pod's `line_item_resource_id` ARN.
        usd: Σ `split_line_item_split_cost` + `split_line_item_unused_cost` (the `net_` pair when the bill has it).
        parents: the parent instances (`split_line_item_parent_resource_id`).
        source: the provenance, e.g. "your bill (CUR 2.0 split cost allocation, 2024-01-01 – 2024-01-31)".
    """

    cluster: str
    namespace: str
    pod: str
    usd: Decimal
    parents: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class BillRates:
    """Effective USD per instance-hour per instance type from one bill, with its period and line counts."""

    overrides: dict[str, InstanceOverride]
    period_start: date | None
    period_end: date | None
    lines_used: int
    source: str
    #: AWS's per-pod split (CUR 2.0 split cost allocation data), keyed (cluster, namespace, pod); empty without it
    pods: dict[tuple[str, str, str], PodSplitCost] = field(default_factory=dict)
    #: the bill's format: "CUR 2.0" or "FOCUS"
    kind: str = "CUR 2.0"


def _dec(raw: str | None, where: str) -> Decimal:
    try:
        value = Decimal((raw or "0").strip() or "0")
    except InvalidOperation as exc:
        raise InputFormatError(f"{where}: not a number: {raw!r}") from exc
    if not value.is_finite():
        raise InputFormatError(f"{where}: not a finite number: {raw!r}")
    return value


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


def bill_text(data: bytes, where: str) -> str:
    """The text of a bill file's bytes: gzip-compressed (AWS Data Exports delivers `.csv.gz`) or plain UTF-8 CSV.

    Raises:
        InputFormatError: larger than `MAX_BILL_BYTES` once decompressed, a broken gzip stream, or not UTF-8.
    """
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
                data = gz.read(MAX_BILL_BYTES + 1)
        except (OSError, EOFError) as exc:
            raise InputFormatError(f"{where}: not a readable gzip file: {exc}") from exc
    if len(data) > MAX_BILL_BYTES:
        raise InputFormatError(f"{where}: the bill is over {MAX_BILL_BYTES // 2**20} MiB; export one month, or filter "
                               "the export to EC2 (line_item_product_code AmazonEC2)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputFormatError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def read_cur2(path: Path) -> BillRates:
    """The effective instance-hour rates of a CUR 2.0 CSV file (`read_bill`, refusing a FOCUS file).

    Raises:
        InputFormatError: the file is not CSV with the CUR 2.0 line-item columns, or a number does not parse.
    """
    return parse_cur2(_read(path), str(path))


def read_bill(path: Path) -> BillRates:
    """The effective instance-hour rates of a bill file: CUR 2.0 or FOCUS, CSV or gzip'd CSV, told by its header.

    Raises:
        InputFormatError: neither format, unreadable, or a number does not parse.
    """
    return parse_bill(_read(path), str(path))


def _read(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_BILL_BYTES + 1)
    except OSError as exc:
        raise InputFormatError(f"{path}: cannot read the bill: {exc.strerror or exc}") from exc
    return bill_text(data, str(path))


def parse_bill(text: str, where: str) -> BillRates:
    """CUR 2.0 or FOCUS, told by the header (`parse_cur2`, `parse_focus`).

    Raises:
        InputFormatError: neither format, or a number does not parse.
    """
    header = next(csv.reader(io.StringIO(text.split("\n", 1)[0])), [])
    if all(c in header for c in FOCUS_REQUIRED) and "line_item_line_item_type" not in header:
        return parse_focus(text, where)
    return parse_cur2(text, where)


def _period_source(kind: str, days: list[date]) -> tuple[date | None, date | None, str]:
    start, end = (min(days), max(days)) if days else (None, None)
    source = f"your bill ({kind}, {start.isoformat()} – {end.isoformat()})" if start and end else f"your bill ({kind})"
    return start, end, source


def _rates(hours: dict[tuple[str, str], Decimal], cost: dict[tuple[str, str], Decimal], start: date | None,
           source: str) -> dict[str, InstanceOverride]:
    by_type: dict[str, list[tuple[str, Decimal]]] = defaultdict(list)
    for (itype, capacity), h in hours.items():
        by_type[itype].append((capacity, h))
    overrides: dict[str, InstanceOverride] = {}
    for itype, options in sorted(by_type.items()):
        capacity, h = max(options, key=lambda o: (o[1], o[0]))
        rate = (cost[(itype, capacity)] / h).quantize(Decimal("0.000001"))
        if rate <= 0:
            continue
        overrides[itype] = InstanceOverride(usd_per_hour=rate, capacity_type=capacity, source=source,
                                            effective_date=start)
    return overrides


def parse_cur2(text: str, where: str) -> BillRates:
    """The effective instance-hour rates of CUR 2.0 CSV text (and its split cost allocation pod lines).

    Raises:
        InputFormatError: not CSV with the CUR 2.0 line-item columns, or a number does not parse.
    """
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise InputFormatError(
            f"{where}: not a CUR 2.0 export (missing {', '.join(missing)}); export CUR 2.0 as CSV from AWS Data "
            "Exports (or a FOCUS export: ChargeCategory, ChargePeriodStart, ChargePeriodEnd, EffectiveCost, "
            "ConsumedQuantity)"
        )
    hours: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    cost: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    days: list[date] = []
    split: list[tuple[str, dict[str, str]]] = []
    used = 0
    for n, row in enumerate(reader, start=2):
        if (row.get("line_item_operation") or "").strip() == "EKSPod-EC2":
            split.append((f"{where}:{n}", row))
            continue
        usage_type = row.get("line_item_usage_type") or ""
        item_type = (row.get("line_item_line_item_type") or "").strip()
        if item_type not in _COST_COLUMN or not ("BoxUsage" in usage_type or "SpotUsage" in usage_type):
            continue
        itype = _instance_type(row)
        amount = _dec(row.get("line_item_usage_amount"), f"{where}:{n} line_item_usage_amount")
        if not itype or amount <= 0:
            continue
        capacity = "spot" if "SpotUsage" in usage_type else "on-demand"
        hours[(itype, capacity)] += amount
        cost[(itype, capacity)] += _dec(row.get(_COST_COLUMN[item_type]), f"{where}:{n} {_COST_COLUMN[item_type]}")
        used += 1
        _days(row, ("line_item_usage_start_date", "bill_billing_period_start_date", "line_item_usage_end_date"), days)
    start, end, source = _period_source("CUR 2.0", days)
    split_days: list[date] = []
    for _, row in split:
        _days(row, ("line_item_usage_start_date", "line_item_usage_end_date"), split_days)
    pods = _pods(split, _period_source("CUR 2.0 split cost allocation", split_days or days)[2])
    return BillRates(_rates(hours, cost, start, source), start, end, used, source, pods, "CUR 2.0")


def _days(row: dict[str, str], columns: Iterable[str], days: list[date]) -> None:
    for col in columns:
        raw = (row.get(col) or "").strip()
        if raw:
            with contextlib.suppress(ValueError):
                days.append(date.fromisoformat(raw[:10]))


def _pods(lines: list[tuple[str, dict[str, str]]], source: str) -> dict[tuple[str, str, str], PodSplitCost]:
    """Per-pod Σ split + unused cost of the split cost allocation pod lines (the net pair when it is filled)."""
    usd: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
    parents: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for where, row in lines:
        arn = (row.get("line_item_resource_id") or "").strip()
        # arn:aws:eks:<region>:<account>:pod/<cluster>/<namespace>/<pod>/<uid>
        resource = arn.split(":", 5)[5] if arn.count(":") >= 5 else ""
        parts = resource.split("/")
        if len(parts) < 4 or parts[0] != "pod":
            continue
        key = (parts[1], parts[2], parts[3])
        net = (row.get("split_line_item_net_split_cost") or "").strip()
        pair = ("split_line_item_net_split_cost", "split_line_item_net_unused_cost") if net else (
            "split_line_item_split_cost", "split_line_item_unused_cost")
        usd[key] += sum((_dec(row.get(c), f"{where} {c}") for c in pair), _ZERO)
        parent = (row.get("split_line_item_parent_resource_id") or "").strip()
        if parent:
            parents[key].add(parent)
    return {k: PodSplitCost(*k, usd=v, parents=tuple(sorted(parents[k])), source=source)
            for k, v in sorted(usd.items())}


def _focus_time(raw: str, where: str) -> datetime:
    text = raw.strip().replace("Z", "+00:00").replace(" ", "T", 1)
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise InputFormatError(f"{where}: not a FOCUS date-time: {raw!r}") from exc


def parse_focus(text: str, where: str) -> BillRates:
    """The effective instance-hour rates of a FOCUS billing export (CSV text).

    Raises:
        InputFormatError: a FOCUS column the rates need is missing, or a number or date does not parse.
    """
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in FOCUS_REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise InputFormatError(f"{where}: not a FOCUS export (missing {', '.join(missing)})")
    if "x_UsageType" not in (reader.fieldnames or []):
        raise InputFormatError(
            f"{where}: a FOCUS export without x_UsageType names no instance type; export \"FOCUS 1.0 with AWS "
            "columns\" from AWS Data Exports (or a CUR 2.0)")
    hours: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    cost: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    days: list[date] = []
    used = 0
    for n, row in enumerate(reader, start=2):
        usage_type = row.get("x_UsageType") or ""
        if (row.get("ChargeCategory") or "").strip() != "Usage" or not (
                "BoxUsage" in usage_type or "SpotUsage" in usage_type) or ":" not in usage_type:
            continue
        amount = _dec(row.get("ConsumedQuantity"), f"{where}:{n} ConsumedQuantity")
        if amount <= 0:
            continue
        itype = usage_type.split(":", 1)[1].strip()
        spot = "SpotUsage" in usage_type or (row.get("PricingCategory") or "").strip() == "Dynamic"
        capacity = "spot" if spot else "on-demand"
        hours[(itype, capacity)] += amount
        cost[(itype, capacity)] += _dec(row.get("EffectiveCost"), f"{where}:{n} EffectiveCost")
        used += 1
        days.append(_focus_time(row["ChargePeriodStart"], f"{where}:{n} ChargePeriodStart").date())
        # ChargePeriodEnd is exclusive: the last day charged is the one before it
        last = _focus_time(row["ChargePeriodEnd"], f"{where}:{n} ChargePeriodEnd") - timedelta(microseconds=1)
        days.append(last.date())
    start, end, source = _period_source("FOCUS", days)
    return BillRates(_rates(hours, cost, start, source), start, end, used, source, {}, "FOCUS")


def with_bill(pricing: PriceOverrides, bill: BillRates) -> PriceOverrides:
    """`pricing` with the bill's instance rates layered on top (the bill wins for the instance types it covers)."""
    return pricing.model_copy(update={"instance_types": {**pricing.instance_types, **bill.overrides}})


__all__ = ["FOCUS_REQUIRED", "MAX_BILL_BYTES", "BillRates", "PodSplitCost", "bill_text", "parse_bill", "parse_cur2",
           "parse_focus", "read_bill", "read_cur2", "with_bill"]
