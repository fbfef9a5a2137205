"""Pricing (pure): the cheapest GPU model or MIG profile that fits a wrong-hardware finding's demand, and its USD/day delta.

The detector states the demand per GPU (memory with headroom in MiB, compute as a share of the GPU it runs
on); this step lists the fitting options from the GPU catalog and the price book and prices the difference:

    wasted GPUs = GPUs held × (1 − option $/GPU-h ÷ current $/GPU-h)
    USD/day     = current $/GPU-h × wasted GPUs × 24

MIG options of the same model cost their slice fraction of the GPU. Other models are compared at their
cheapest on-demand list price per GPU in the price book, on the same cloud as the node, and only when their compute (dense FP16/BF16
tensor TFLOPS, `TENSOR_TFLOPS`) covers the demand; models without a figure are never proposed.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from gpuwaste.models.findings import Cost, Finding
from gpuwaste.pricing.catalog import GpuModelSpec, PriceBook
from gpuwaste.pricing.prices import GpuHourRate, rate_text

#: Dense (no sparsity) FP16/BF16 tensor TFLOPS per GPU from NVIDIA product datasheets (half the "with sparsity"
#: figure NVIDIA headlines; e.g. L4 242 sparse → 121, L40S 733 → 362, A100 624 → 312, H100 SXM 1979 → 989 —
#: L4/L40S/A100 cross-checked against third-party spec pages, 2026-11-29). Not in shared/reference/formats.md;
#: approximate, used only to tell whether a smaller model's compute covers a workload's peak activity.
TENSOR_TFLOPS: dict[str, float] = {
    "H100-SXM-80GB": 989.0,
    "H100-PCIE-80GB": 756.0,
    "H100-NVL": 835.0,
    "H200-SXM": 989.0,
    "H200-NVL": 835.0,
    "B200": 2250.0,
    "A100-SXM4-40GB": 312.0,
    "A100-SXM4-80GB": 312.0,
    "A100-PCIE-40GB": 312.0,
    "A100-PCIE-80GB": 312.0,
    "A30": 165.0,
    "L40S": 362.0,
    "L4": 121.0,
    "A10": 125.0,
    "T4": 65.0,
    "V100-SXM2": 125.0,
    "V100-SXM2-32GB": 125.0,
    "V100-PCIE": 112.0,
    "V100-PCIE-32GB": 112.0,
}
_CENT = Decimal("0.01")
_SHARE = Decimal("0.0001")


@dataclass(frozen=True)
class HardwareOption:
    """One fitting option: a GPU model (whole GPU) or a MIG profile of the current model."""

    model: str
    mig_profile: str | None
    memory_mib: int
    relative_cost: Decimal  # option $/GPU-h ÷ current $/GPU-h
    basis: str

    @property
    def name(self) -> str:
        """Human name: "L4" or "A100-SXM4-40GB MIG 2g.10gb"."""
        return f"{self.model} MIG {self.mig_profile}" if self.mig_profile else self.model


def cheapest_model_rate(book: PriceBook, model_key: str, provider: str | None = None) -> Decimal | None:
    """The lowest on-demand list price per GPU-hour of a model in the price book (on `provider` when given), or None."""
    rates = [
        row.usd_per_hour / row.gpus
        for row in book.prices
        if row.gpu_model == model_key and row.capacity_type == "on-demand" and row.priced_unit == "instance" and row.gpus
        and (provider is None or row.provider == provider)
    ]
    return min(rates) if rates else None


def provider_of(book: PriceBook, instance_type: str | None) -> str | None:
    """The cloud of an instance type in the price book (options are compared within one cloud), or None."""
    if not instance_type:
        return None
    return next((row.provider for row in book.prices if row.instance_type.casefold() == instance_type.casefold()), None)


def fitting_options(finding: Finding, book: PriceBook) -> tuple[GpuModelSpec | None, list[HardwareOption]]:
    """The current model and the options that fit the finding's demand and cost less, cheapest first."""
    d = finding.details
    need_mib = float(d.get("required_memory_mib") or 0)
    compute = float(d.get("required_compute_ratio") or 0)
    resolved = book.catalog.resolve_product(finding.subject.gpu_model)
    if resolved is None:
        return None, []
    model = resolved.model
    cur_profile_name = d.get("current_mig_profile")
    cur_fraction = Decimal(1)
    if isinstance(cur_profile_name, str) and cur_profile_name:
        try:
            cur_fraction = model.mig_profile(cur_profile_name).fraction
        except ValueError:
            cur_fraction = Decimal(1)
    elif resolved.mig_profile is not None:
        cur_fraction = resolved.mig_profile.fraction
    whole_gpu_compute = compute * float(cur_fraction)  # demand as a share of one whole GPU of this model
    options: list[HardwareOption] = []
    for p in model.mig_profiles:
        frac = Decimal(p.compute_slices) / Decimal(model.mig_total_slices or 7)
        if p.memory_mib >= need_mib and float(frac) >= whole_gpu_compute and frac < cur_fraction:
            options.append(HardwareOption(model.key, p.name, p.memory_mib, (frac / cur_fraction).quantize(_SHARE),
                                          f"{p.compute_slices}/{model.mig_total_slices or 7} of the same GPU"))
    provider = provider_of(book, finding.subject.instance_type)
    cur_rate = cheapest_model_rate(book, model.key, provider)
    cur_tflops = TENSOR_TFLOPS.get(model.key)
    if cur_rate and cur_tflops:
        for other in book.catalog:
            if other.key == model.key or other.memory_mib < need_mib:
                continue
            tflops = TENSOR_TFLOPS.get(other.key)
            rate = cheapest_model_rate(book, other.key, provider)
            if tflops is None or rate is None:
                continue
            if tflops < whole_gpu_compute * cur_tflops:
                continue
            rel = (rate / (cur_rate * cur_fraction)).quantize(_SHARE)
            if rel < 1:
                options.append(HardwareOption(other.key, None, other.memory_mib, rel,
                                              f"list ${rate.quantize(_SHARE)}/GPU-h vs ${cur_rate.quantize(_SHARE)}/GPU-h for {model.key}"))
    options.sort(key=lambda o: (o.relative_cost, o.memory_mib))
    return model, options


def price_wrong_hardware(finding: Finding, book: PriceBook, rate: GpuHourRate | None) -> Finding:
    """Price a wrong-hardware finding at the USD/day saved by its cheapest fitting option.

    Args:
        rate: the current GPU-hour rate of the finding's node (None when unpriced).

    Returns:
        The finding with `wasted_gpu_share`, `cost` and the option in `details`; unpriced (with the reason) when
        the node has no price or no cheaper option fits.
    """
    model, options = fitting_options(finding, book)
    held = finding.subject.gpu_share
    if not options or rate is None:
        why = "no price for the current node" if rate is None else (
            "GPU model not in the catalog" if model is None else "no cheaper GPU model or MIG profile fits the demand")
        return finding.with_cost(Cost(priced=False, wasted_gpu_share=Decimal(0), formula=f"unpriced: {why}", warnings=(why,)))
    best = options[0]
    wasted = (held * (Decimal(1) - best.relative_cost)).quantize(_SHARE)
    per_day = (rate.usd_per_gpu_hour * wasted * 24).quantize(_CENT, rounding=ROUND_HALF_UP)
    formula = (f"{rate_text(rate.usd_per_gpu_hour)}/GPU-h × {held.normalize():f} GPU × (1 − {best.relative_cost} "
               f"[{best.name}: {best.basis}]) × 24 h = ${per_day:,}/day")
    details = dict(finding.details)
    details.update({
        "cheapest_option": best.name,
        "option_memory_mib": best.memory_mib,
        "option_relative_cost": float(best.relative_cost),
        "other_options": ", ".join(o.name for o in options[1:4]),
    })
    cost = Cost(priced=True, usd_per_gpu_hour=rate.usd_per_gpu_hour, wasted_gpu_share=wasted, usd_per_day=per_day,
                formula=formula, basis=rate.basis, source=rate.source, effective_date=str(rate.effective_date or ""),
                warnings=tuple(rate.warnings))
    return finding.model_copy(update={"wasted_gpu_share": wasted, "details": details, "cost": cost,
                                      "title": f"{finding.title}: {best.name} saves ${per_day:,}/day"})


__all__ = ["TENSOR_TFLOPS", "HardwareOption", "cheapest_model_rate", "fitting_options", "price_wrong_hardware", "provider_of"]
