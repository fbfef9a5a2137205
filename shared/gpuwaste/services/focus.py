"""Service (pure): FOCUS rows — the GPU cost of a scan window per workload per UTC day, for FinOps tools.

FOCUS is the FinOps Foundation's FinOps Open Cost and Usage Specification. Each row is one charge: the GPU-hours a
workload held on one cluster, GPU model and node in one UTC day (`ChargePeriodStart`/`End`), at the price the scan
priced it (`ListUnitPrice` = USD per GPU-hour from the price book); the unsold slices of shared GPUs and the
unallocated GPUs are rows of their own, so the rows of a window add up to its physical GPUs' cost (the share
ledger, `services.showback`). gpuwaste's own columns carry the `x_` prefix. docs/showback.md lists every column and
its source.

Day split: a holder's GPU-hours are spread evenly over its holding span in the window, an unsold or unallocated line
evenly over the window; waste (the scan's priced findings) follows the row's GPU-hours.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal, localcontext

from gpuwaste.models.findings import Finding, Subject
from gpuwaste.models.settings import DeliverySettings
from gpuwaste.services.showback import PRECISION, HolderInfo, ScanLedger, subject_team

ZERO = Decimal(0)
Q = Decimal("0.0000000001")  # 1e-10 USD / GPU-hours: far below the cent, exact enough for any sum
_US = timedelta(microseconds=1)

#: The FOCUS columns written, in order (FOCUS 1.0 names; `x_` columns are gpuwaste's).
COLUMNS = (
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
    "AvailabilityZone",
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
    "x_Cluster",
    "x_Namespace",
    "x_Team",
    "x_Workload",
    "x_WorkloadKind",
    "x_Node",
    "x_GpuModel",
    "x_AllocationKind",
    "x_LineKind",
    "x_GpuHours",
    "x_WasteKind",
    "x_WastedGpuHours",
    "x_WastedCost",
    "x_Efficiency",
    "x_PriceSource",
)


#: the columns holding amounts and quantities (Decimal or null): Parquet writes them as decimals
DECIMAL_COLUMNS = frozenset({
    "BilledCost", "ConsumedQuantity", "ContractedCost", "ContractedUnitPrice", "EffectiveCost", "ListCost",
    "ListUnitPrice", "PricingQuantity", "x_GpuHours", "x_WastedGpuHours", "x_WastedCost", "x_Efficiency",
})
#: the date-time columns (ISO 8601 UTC text): Parquet writes them as UTC timestamps
TIME_COLUMNS = frozenset({"BillingPeriodEnd", "BillingPeriodStart", "ChargePeriodEnd", "ChargePeriodStart"})


@dataclass(frozen=True)
class FocusRow:
    """One row's values by column (strings, numbers or None for null)."""

    values: dict[str, object]


def _day_parts(start: datetime, end: datetime) -> list[tuple[datetime, datetime, Decimal]]:
    """[start, end) cut at UTC midnights: (day start, day end, fraction of the span)."""
    total = (end - start) // _US
    if total <= 0:
        return []
    out = []
    cur = start
    while cur < end:
        nxt = min(end, datetime.combine(cur.date() + timedelta(days=1), time(0), tzinfo=cur.tzinfo))
        out.append((cur, nxt, Decimal((nxt - cur) // _US) / Decimal(total)))
        cur = nxt
    return out


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _day(t: datetime) -> datetime:
    return datetime.combine(t.date(), time(0), tzinfo=t.tzinfo)


def _month_bounds(t: datetime) -> tuple[datetime, datetime]:
    first = datetime(t.year, t.month, 1, tzinfo=t.tzinfo)
    nxt = datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=t.tzinfo)
    return first, nxt


def focus_rows(
    sl: ScanLedger, findings: Sequence[Finding], delivery: DeliverySettings | None = None, *, account: str = ""
) -> list[FocusRow]:
    """FOCUS rows of a window's ledger: one per (workload or unsold/unallocated line, node, GPU model, UTC day).

    Args:
        sl: the window's ledger (`showback.ScanLedger`: lines, holders, GPU models, price sources).
        findings: the scan's findings; its waste findings fill the x_ waste columns (one whose money another
            finding owns, `money_owner`, adds nothing; an unpriced one adds its GPU-hours and $0).
        delivery: the routing settings that name each holder's team (None: the namespace).
        account: the billing account named in `BillingAccountId` (e.g. the AWS account; default: the cluster).
    """
    with localcontext() as dec:
        dec.prec = PRECISION
        return _rows(sl, findings, delivery, account or sl.cluster)


def _rows(
    sl: ScanLedger, findings: Sequence[Finding], delivery: DeliverySettings | None, account: str
) -> list[FocusRow]:
    waste: dict[tuple[str, str], tuple[Decimal, Decimal, set[str]]] = {}
    node_waste: dict[str, tuple[Decimal, Decimal, set[str]]] = {}
    for f in findings:
        if not f.kind.is_waste or f.money_owner:
            continue
        usd = f.cost.usd_in_window if f.cost is not None and f.cost.usd_in_window is not None else ZERO
        target = waste if f.subject.pod else node_waste
        k: object = (f.subject.namespace or "", f.subject.pod) if f.subject.pod else (f.subject.node or "")
        h, u, kinds = target.get(k, (ZERO, ZERO, set()))  # type: ignore[call-overload]
        target[k] = (h + f.wasted_gpu_hours, u + usd, kinds | {f.kind.value})  # type: ignore[index]
    # group the ledger: (line kind, holder key or node, node, model) → GPU-hours and USD, with the span it spreads over
    agg: dict[tuple[object, ...], list[object]] = {}
    pod_hours: dict[tuple[str, str], Decimal] = {}
    node_free: dict[str, Decimal] = {}
    for ln in sl.ledger.lines:
        info = sl.holders.get(ln.key) if ln.kind == "holder" else None
        model = sl.gpu_models.get((ln.node, ln.gpu), "unknown")
        if info is not None:
            wl = _workload(info)
            key: tuple[object, ...] = ("holder", info.subject.namespace or "", wl[1], wl[0], ln.node, model, ln.key)
            pk = (info.subject.namespace or "", info.subject.pod or "")
            pod_hours[pk] = pod_hours.get(pk, ZERO) + ln.gpu_hours
        else:
            key = (ln.kind, "", "", "", ln.node, model, None)
            node_free[ln.node] = node_free.get(ln.node, ZERO) + ln.gpu_hours
        slot = agg.setdefault(key, [ZERO, ZERO, info, ln.mechanism, False])
        slot[0] = slot[0] + ln.gpu_hours  # type: ignore[operator]
        slot[1] = slot[1] + (ln.usd or ZERO)  # type: ignore[operator]
        slot[4] = slot[4] or ln.usd is None
    teams: dict[object, str] = {}
    rows: list[FocusRow] = []
    price_source = dict(sl.price_sources)
    for key, slot in sorted(agg.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        kind, namespace, wl_name, wl_kind, node, model_, holder = key
        model = str(model_)
        hours, usd_total, info_, mechanism, unpriced = slot
        assert isinstance(hours, Decimal) and isinstance(usd_total, Decimal)
        subject: Subject | None
        if isinstance(info_, HolderInfo):
            info = info_
            start = info.held_from or sl.window_start
            end = info.held_until or sl.window_end
            pk = (info.subject.namespace or "", info.subject.pod or "")
            wh, wu, wk = waste.get(pk, (ZERO, ZERO, set()))
            part = hours / pod_hours[pk] if pod_hours.get(pk) else ZERO
            if holder not in teams:
                teams[holder] = subject_team(info.subject, delivery)
            team = teams[holder]
            subject = info.subject
        else:
            start, end = sl.window_start, sl.window_end
            wh, wu, wk = node_waste.get(str(node), (ZERO, ZERO, set()))
            part = hours / node_free[str(node)] if node_free.get(str(node)) else ZERO
            team = ""
            subject = sl.node_subjects.get(str(node))
        wasted_h, wasted_usd = wh * part, wu * part
        rate = (usd_total / hours) if hours and not unpriced else None
        for day_start, _day_end, frac in _day_parts(start, end) or [(start, end, Decimal(1))]:
            h = hours * frac
            cost = None if unpriced else (usd_total * frac)
            used = max(ZERO, h - wasted_h * frac)
            bp_start, bp_end = _month_bounds(day_start)
            resource = (
                f"{sl.cluster}/{namespace}/{wl_kind}/{wl_name}"
                if kind == "holder"
                else f"{sl.cluster}/node/{node}/{kind}"
            )
            tags = {"cluster": sl.cluster}
            if kind == "holder":
                tags.update({"namespace": str(namespace), "team": team})
            values: dict[str, object] = {
                "BilledCost": _num(cost),
                "BillingAccountId": account,
                "BillingAccountName": account,
                "BillingCurrency": "USD",
                "BillingPeriodEnd": _iso(bp_end),
                "BillingPeriodStart": _iso(bp_start),
                "ChargeCategory": "Usage",
                "ChargeClass": None,
                "ChargeDescription": (
                    f"GPU-hours held by {wl_kind} {namespace}/{wl_name} on {node} ({model})"
                    if kind == "holder"
                    else f"{kind} GPU-hours of node {node} ({model})"
                ),
                "ChargeFrequency": "Usage-Based",
                "ChargePeriodEnd": _iso(_day(day_start) + timedelta(days=1)),
                "ChargePeriodStart": _iso(_day(day_start)),
                "CommitmentDiscountCategory": None,
                "CommitmentDiscountId": None,
                "CommitmentDiscountName": None,
                "CommitmentDiscountStatus": None,
                "CommitmentDiscountType": None,
                "ConsumedQuantity": _num(h),
                "ConsumedUnit": "GPU-Hours",
                "ContractedCost": _num(cost),
                "ContractedUnitPrice": _num(rate),
                "EffectiveCost": _num(cost),
                "InvoiceIssuerName": "gpuwaste",
                "ListCost": _num(cost),
                "ListUnitPrice": _num(rate),
                "PricingCategory": "Standard",
                "PricingQuantity": _num(h),
                "PricingUnit": "GPU-Hours",
                "ProviderName": "gpuwaste",
                "PublisherName": "gpuwaste",
                "RegionId": subject.region if subject is not None and subject.region else None,
                "RegionName": subject.region if subject is not None and subject.region else None,
                "AvailabilityZone": None,
                "ResourceId": resource,
                "ResourceName": str(wl_name) if kind == "holder" else f"{node} {kind}",
                "ResourceType": "Kubernetes Workload GPU" if kind == "holder" else "Kubernetes Node GPU",
                "ServiceCategory": "Compute",
                "ServiceName": "Kubernetes GPU",
                "SkuId": model,
                "SkuPriceId": f"{model}/{subject.instance_type if subject is not None else ''}",
                "SubAccountId": sl.cluster,
                "SubAccountName": sl.cluster,
                "Tags": tags,
                "x_Cluster": sl.cluster,
                "x_Namespace": str(namespace) or None,
                "x_Team": team or None,
                "x_Workload": str(wl_name) or None,
                "x_WorkloadKind": str(wl_kind) or None,
                "x_Node": str(node),
                "x_GpuModel": model,
                "x_AllocationKind": str(mechanism) or None,
                "x_LineKind": str(kind),
                "x_GpuHours": _num(h),
                "x_WasteKind": ";".join(sorted(wk)) or None,
                "x_WastedGpuHours": _num(wasted_h * frac),
                "x_WastedCost": _num(wasted_usd * frac),
                "x_Efficiency": _num(used / h if h else None, Decimal("0.0001")),
                "x_PriceSource": "unpriced" if unpriced else (price_source.get(str(node)) or "gpuwaste price book"),
            }
            rows.append(FocusRow(values))
    return _merge_same_day(rows)


def split_unpriced(rows: Sequence[FocusRow]) -> tuple[list[FocusRow], list[FocusRow]]:
    """(priced rows, unpriced rows) of FOCUS rows.

    FOCUS costs are never null, and an unpriced GPU is never written as $0 — its rows are left out of the file and
    counted by the caller.
    """
    priced = [r for r in rows if r.values.get("BilledCost") is not None]
    return priced, [r for r in rows if r.values.get("BilledCost") is None]


def _workload(info: HolderInfo) -> tuple[str, str]:
    s = info.subject
    return (s.workload_kind or "Pod", s.workload_name or s.pod or "")


def _num(v: Decimal | None, q: Decimal = Q) -> Decimal | None:
    return None if v is None else v.quantize(q, rounding=ROUND_HALF_UP)


def _merge_same_day(rows: Iterable[FocusRow]) -> list[FocusRow]:
    """Rows of one workload, node, model and day (several pods of one workload) merged: sums added, the rest kept."""
    sums = (
        "BilledCost",
        "ConsumedQuantity",
        "ContractedCost",
        "EffectiveCost",
        "ListCost",
        "PricingQuantity",
        "x_GpuHours",
        "x_WastedGpuHours",
        "x_WastedCost",
    )
    out: dict[tuple[object, ...], dict[str, object]] = {}
    for r in rows:
        v = r.values
        key = (v["ResourceId"], v["x_Node"], v["x_GpuModel"], v["ChargePeriodStart"], v["x_LineKind"])
        if key not in out:
            out[key] = dict(v)
            continue
        m = out[key]
        for c in sums:
            a, b = m[c], v[c]
            m[c] = None if a is None or b is None else a + b  # type: ignore[operator]
        kinds = {k for k in (str(m["x_WasteKind"] or "") + ";" + str(v["x_WasteKind"] or "")).split(";") if k}
        m["x_WasteKind"] = ";".join(sorted(kinds)) or None
    for m in out.values():
        h, w = m["x_GpuHours"], m["x_WastedGpuHours"]
        if isinstance(h, Decimal) and isinstance(w, Decimal) and h:
            m["x_Efficiency"] = (max(ZERO, h - w) / h).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)
    return [FocusRow(m) for m in out.values()]


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, Decimal):
        return f"{v:f}"
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True, separators=(",", ":"))
    return str(v)


def focus_csv(rows: Sequence[dict[str, object]], columns: Sequence[str] = COLUMNS) -> str:
    """FOCUS rows as CSV.

    Every column in order, null as an empty field, numbers in plain decimal notation, Tags as a JSON object.
    """
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([_cell(r.get(c)) for c in columns])
    return buf.getvalue()


__all__ = ["COLUMNS", "DECIMAL_COLUMNS", "TIME_COLUMNS", "FocusRow", "focus_csv", "focus_rows", "split_unpriced"]
