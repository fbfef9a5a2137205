"""Pricing: the cost of a finding — USD per GPU-hour × wasted GPU share × 24 = USD/day, with its formula."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from gpuwaste.models.findings import Cost, Finding, WasteKind
from gpuwaste.pricing.catalog import GpuHourRate, PriceBook, Unpriced
from gpuwaste.pricing.hardware_fit import price_wrong_hardware

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
    wasted GPU share (physical-GPU equivalents) × 24 h. An unknown instance type gives an unpriced
    cost with the reason, never $0.
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
    per_day = (rate.usd_per_gpu_hour * share * HOURS_PER_DAY).quantize(CENT, rounding=ROUND_HALF_UP)
    formula = f"${rate.usd_per_gpu_hour.normalize():f}/GPU-h × {share_text(share)} GPU × 24 h = {usd(per_day)}/day"
    return Cost(
        priced=True,
        usd_per_gpu_hour=rate.usd_per_gpu_hour,
        wasted_gpu_share=share,
        usd_per_day=per_day,
        formula=formula,
        basis=rate.basis,
        source=rate.source,
        effective_date=str(rate.effective_date or ""),
        warnings=tuple(rate.warnings),
    )


def price_finding(finding: Finding, book: PriceBook) -> Finding:
    """Return the finding with its cost; data-quality findings carry a zero-share cost note."""
    if not finding.kind.is_waste:
        return finding.with_cost(
            Cost(priced=False, wasted_gpu_share=Decimal(0), formula="not priced: data-quality finding")
        )
    if finding.kind is WasteKind.WRONG_HARDWARE:
        s = finding.subject
        rate = book.gpu_hour_rate(instance_type=s.instance_type, capacity_type=s.capacity_type, gpu_model=s.gpu_model,
                                  physical_gpus=s.physical_gpus_on_node, region=s.region, accelerator=s.accelerator)
        return price_wrong_hardware(finding, book, rate if isinstance(rate, GpuHourRate) else None)
    return finding.with_cost(cost_of(finding, book))
