"""Pricing: the cost of a finding — USD per GPU-hour × wasted GPU share × 24 = USD/day, with its formula."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from gpuwaste.models.findings import Cost, Finding, WasteKind
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.pricing.hardware_fit import price_wrong_hardware
from gpuwaste.pricing.prices import GpuHourRate, Unpriced, rate_text

HOURS_PER_DAY = Decimal(24)
CENT = Decimal("0.01")


def usd(value: Decimal) -> str:
    """Format USD for people: $1,234.56."""
    return f"${value.quantize(CENT, rounding=ROUND_HALF_UP):,}"


def share_text(share: Decimal) -> str:
    """A GPU share as written in formulas (2, 0.1429)."""
    return f"{share.normalize():f}" if share == share.to_integral() else f"{share.quantize(Decimal('0.0001'))}"


def cost_of(finding: Finding, book: PriceBook) -> Cost:
    """Price one finding.

    USD/day = USD per GPU-hour (price book: instance price ÷ physical GPUs, or a rate card) ×
    wasted GPU share (physical-GPU equivalents) × 24 h — the current rate, while the waste is still going on
    at the evaluation time. When the finding's last episode ended before the evaluation time, USD/day is 0
    (nothing is wasted now; the formula says so and gives the rate while it lasted).
    USD in the window = USD per GPU-hour × the finding's wasted GPU-hours in the window.
    A finding whose GPU-hours another finding of the same scan owns (`money_owner`) costs 0 of its own.
    An unknown instance type gives an unpriced cost with the reason, never $0.
    """
    s = finding.subject
    share = finding.wasted_gpu_share
    rate = book.gpu_hour_rate(
        instance_type=s.instance_type,
        capacity_type=s.capacity_type,
        gpu_model=s.gpu_model,
        physical_gpus=s.physical_gpus_on_node,
        region=s.region,
        accelerator=s.accelerator,
    )
    if isinstance(rate, Unpriced):
        return Cost(
            priced=False,
            wasted_gpu_share=share,
            formula=f"unpriced: {rate.reason}",
            warnings=(rate.reason,),
        )
    assert isinstance(rate, GpuHourRate)
    price = f"{rate_text(rate.usd_per_gpu_hour)}/GPU-h"
    if finding.money_owner:
        owner = finding.details.get("money_owner_kind") or "another finding"
        return Cost(priced=True, usd_per_gpu_hour=rate.usd_per_gpu_hour, wasted_gpu_share=Decimal(0), usd_per_day=Decimal(0),
                    usd_in_window=Decimal(0), formula=f"$0: the same GPU-hours are priced once, in the {owner} finding",
                    basis=rate.basis, source=rate.source, effective_date=str(rate.effective_date or ""), warnings=tuple(rate.warnings))
    rate_per_day = (rate.usd_per_gpu_hour * share * HOURS_PER_DAY).quantize(CENT, rounding=ROUND_HALF_UP)
    hours = finding.wasted_gpu_hours
    if not hours and not finding.episodes:  # no time resolved: the whole window is the evidence span
        hours = (share * Decimal(finding.observed_s or finding.window_s) / Decimal(3600)).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)
    in_window = (rate.usd_per_gpu_hour * hours).quantize(CENT, rounding=ROUND_HALF_UP)
    window = f"{price} × {hours.normalize():f} GPU-h = {usd(in_window)} in the window"
    last = finding.episodes[-1] if finding.episodes else None
    if last is None or last.ongoing:
        per_day = rate_per_day
        formula = f"{price} × {share_text(share)} GPU × 24 h = {usd(per_day)}/day; {window}"
    else:
        per_day = Decimal("0.00")
        formula = (f"ended {last.end:%Y-%m-%d %H:%M}Z, not going on now: $0.00/day ({price} × {share_text(share)} GPU × 24 h "
                   f"= {usd(rate_per_day)}/day while it lasted); {window}")
    return Cost(
        priced=True,
        usd_per_gpu_hour=rate.usd_per_gpu_hour,
        wasted_gpu_share=share,
        usd_per_day=per_day,
        usd_in_window=in_window,
        formula=formula,
        basis=rate.basis,
        source=rate.source,
        effective_date=str(rate.effective_date or ""),
        warnings=tuple(rate.warnings),
    )


def _at_risk(finding: Finding, book: PriceBook) -> tuple[Decimal, str] | None:
    """USD/day of the GPU share a data-quality finding says is held and billed but not judged (`details
    ["gpu_share_at_risk"]`), with its formula; None when the finding names no such share or the GPU is unpriced."""
    raw = finding.details.get("gpu_share_at_risk")
    if not isinstance(raw, (int, float)) or isinstance(raw, bool) or raw <= 0:
        return None
    s = finding.subject
    rate = book.gpu_hour_rate(instance_type=s.instance_type, capacity_type=s.capacity_type, gpu_model=s.gpu_model,
                              physical_gpus=s.physical_gpus_on_node, region=s.region, accelerator=s.accelerator)
    if not isinstance(rate, GpuHourRate):
        return None
    share = Decimal(str(raw))
    per_day = (rate.usd_per_gpu_hour * share * HOURS_PER_DAY).quantize(CENT, rounding=ROUND_HALF_UP)
    return per_day, (f"money at risk: {rate_text(rate.usd_per_gpu_hour)}/GPU-h × {share_text(share)} GPU × 24 h = "
                     f"{usd(per_day)}/day, held and billed but not judged")


def price_finding(finding: Finding, book: PriceBook) -> Finding:
    """Return the finding with its cost; data-quality and governance findings carry a zero-share cost note."""
    if not finding.kind.is_waste:
        what = "data-quality finding" if finding.kind is WasteKind.DATA_QUALITY else "governance finding: the GPUs are used, not wasted"
        at_risk = _at_risk(finding, book)
        if at_risk is not None:  # held and billed GPUs no verdict covers (a lost device): money at risk, never in the totals
            per_day, formula = at_risk
            return finding.model_copy(update={"details": {**finding.details, "usd_per_day_at_risk": str(per_day)}}).with_cost(
                Cost(priced=False, wasted_gpu_share=Decimal(0), formula=f"not priced: {what}; {formula}"))
        return finding.with_cost(Cost(priced=False, wasted_gpu_share=Decimal(0), formula=f"not priced: {what}"))
    if finding.kind is WasteKind.WRONG_HARDWARE and not finding.money_owner:
        s = finding.subject
        rate = book.gpu_hour_rate(instance_type=s.instance_type, capacity_type=s.capacity_type, gpu_model=s.gpu_model,
                                  physical_gpus=s.physical_gpus_on_node, region=s.region, accelerator=s.accelerator)
        priced = price_wrong_hardware(finding, book, rate if isinstance(rate, GpuHourRate) else None)
        return _wrong_hardware_window(priced)
    return finding.with_cost(cost_of(finding, book))


def _wrong_hardware_window(finding: Finding) -> Finding:
    """Wrong hardware is priced by the pricing step (the share a cheaper GPU saves): its GPU-hours are that share over
    the observed time, and its USD in the window follows."""
    cost = finding.cost
    if cost is None or not cost.priced or cost.usd_per_gpu_hour is None:
        return finding
    observed_h = Decimal(finding.observed_s or finding.window_s) / Decimal(3600)
    hours = (finding.wasted_gpu_share * observed_h).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)
    in_window = (cost.usd_per_gpu_hour * hours).quantize(CENT, rounding=ROUND_HALF_UP)
    cost = cost.model_copy(update={"usd_in_window": in_window,
                                   "formula": f"{cost.formula}; {rate_text(cost.usd_per_gpu_hour)}/GPU-h × "
                                              f"{hours.normalize():f} GPU-h = {usd(in_window)} in the window"})
    return finding.model_copy(update={"cost": cost, "wasted_gpu_hours": hours})
