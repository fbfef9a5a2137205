"""Pricing (pure): the price data and the answers about it.

Published instance prices, the operator's overrides, a GPU-hour rate or why there is none, and the capacity types.
`PriceBook` (`pricing.catalog`) reads these models from the bundled YAML and answers with them. Money is `Decimal`
end to end; nothing here rounds except the human-readable `rate_text`.
"""

from __future__ import annotations

from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from gpuwaste.models.gpu_models import (
    _SEPARATORS,
)

Provider = Literal["aws", "gcp", "azure"]
CapacityType = Literal["on-demand", "spot"]
RateMethod = Literal[
    "rate_card_instance",
    "price_book_instance",
    "price_book_accelerator",
    "rate_card_model",
    "default_rate",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------------------------------
# Price book
# --------------------------------------------------------------------------------------------------


def _reject_float(value: object) -> object:
    if isinstance(value, float):
        # ValueError, not TypeError: pydantic turns only ValueError into a ValidationError with the field path.
        raise ValueError("write prices as quoted strings (e.g. '21.957642') so they stay exact")  # noqa: TRY004
    return value


def _float_as_written(value: object) -> object:
    # A rate card typed in YAML or JSON arrives as float; str() gives back what the user wrote.
    return str(value) if isinstance(value, float) else value


PublishedUsd = Annotated[Decimal, BeforeValidator(_reject_float), Field(ge=0)]
"""A bundled price: a quoted string in the YAML, never a float."""
RateCardUsd = Annotated[Decimal, BeforeValidator(_float_as_written), Field(ge=0)]
"""A user's rate: a YAML/JSON float is read back as the digits the user wrote."""


class InstancePrice(BaseModel):
    """One published price: a whole instance per hour, or one attached GPU per hour (GCP N1).

    Attributes:
        usd_per_hour: exactly as published.
        gpus: physical GPUs per instance (1 for an accelerator row).
        gpu_model: canonical key in the GPU model catalog.
        priced_unit: "instance" (whole VM) or "accelerator" (one attached GPU; host VM not included).
        date_basis: "published" when the source dates the price; "snapshot" when the source is undated and
            effective_date is the date of the snapshot it was read in.
    """

    model_config = _FROZEN

    provider: Provider
    region: str = Field(min_length=1)
    instance_type: str = Field(min_length=1)
    capacity_type: CapacityType
    usd_per_hour: PublishedUsd
    gpus: int = Field(ge=1)
    gpu_model: str = Field(min_length=1)
    effective_date: date
    source: str = Field(min_length=1)
    priced_unit: Literal["instance", "accelerator"] = "instance"
    date_basis: Literal["published", "snapshot"] = "published"

    @property
    def dated(self) -> str:
        """The effective date as shown in a basis: "2026-07-20" or "undated source, snapshot 2026-08-20"."""
        if self.date_basis == "snapshot":
            return f"undated source, snapshot {self.effective_date.isoformat()}"
        return self.effective_date.isoformat()


class _PriceBookFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1]
    sources: dict[str, str] = Field(default_factory=dict)
    prices: list[InstancePrice]


class InstanceOverride(BaseModel):
    """A rate-card price for one instance type (negotiated discount, savings plan, reserved rate).

    Attributes:
        usd_per_hour: price of the whole instance per hour.
        gpus: physical GPUs per instance; defaults to the bundled row's count, then to the DCGM count.
        gpu_model: canonical key or alias; informational.
        capacity_type: applies only to nodes of this capacity type; None applies to any.
        source: where the rate comes from, shown in every basis.
        effective_date: when the rate took effect; defaults to PriceOverrides.effective_date.
    """

    model_config = _FROZEN

    usd_per_hour: RateCardUsd
    gpus: int | None = Field(default=None, ge=1)
    gpu_model: str | None = None
    capacity_type: CapacityType | None = None
    source: str = "user rate card"
    effective_date: date | None = None


class PriceOverrides(BaseModel):
    """The operator's rate card, layered over the bundled price book.

    Attributes:
        instance_types: per-instance prices, keyed by the instance type as the cloud spells it.
        usd_per_gpu_hour_by_model: per-GPU-hour rates for on-prem / bare metal, keyed by canonical model
            key or any alias ("H100-SXM-80GB", "NVIDIA A100 80GB PCIe").
        spot_discount: fraction 0..1 taken off the on-demand price for spot nodes when no spot price is
            known (0.7 means spot costs 30 % of on-demand).
        default_usd_per_gpu_hour: last-resort rate for any GPU; None leaves unknown GPUs unpriced.
        source / effective_date: provenance of the by-model and default rates (and of instance overrides
            that give none of their own).
    """

    model_config = _FROZEN

    instance_types: dict[str, InstanceOverride] = Field(default_factory=dict)
    usd_per_gpu_hour_by_model: dict[str, RateCardUsd] = Field(default_factory=dict)
    spot_discount: Annotated[Decimal, BeforeValidator(_float_as_written), Field(ge=0, le=1)] | None = None
    default_usd_per_gpu_hour: RateCardUsd | None = None
    source: str = "user rate card"
    effective_date: date | None = None


class GpuHourRate(BaseModel):
    """The price of one physical GPU for one hour, with how it was derived.

    Attributes:
        usd_per_gpu_hour: exact, unrounded.
        instance_usd_per_hour: the instance price it was split from (after any spot discount), or None for
            per-GPU rates.
        gpus_per_instance: the divisor, or None for per-GPU rates.
        basis: one human-readable line with the formula, provider/region, source and date.
        capacity_type_used: the capacity type of the price actually applied ("on-demand" for a spot node
            priced at on-demand), or None for per-GPU rate cards.
        method: which lookup step produced the rate.
        warnings: caveats a report should show next to the money.
    """

    model_config = _FROZEN

    usd_per_gpu_hour: Decimal
    instance_usd_per_hour: Decimal | None = None
    gpus_per_instance: int | None = None
    basis: str
    source: str
    effective_date: date | None = None
    capacity_type_used: CapacityType | None = None
    method: RateMethod
    warnings: tuple[str, ...] = ()

    @property
    def usd_per_gpu_day(self) -> Decimal:
        """usd_per_gpu_hour × 24, unrounded."""
        return self.usd_per_gpu_hour * 24


class Unpriced(BaseModel):
    """No price could be found; `reason` says what to configure."""

    model_config = _FROZEN

    reason: str


_CAPACITY_ALIASES: dict[str, CapacityType] = {
    "on-demand": "on-demand",
    "ondemand": "on-demand",
    "regular": "on-demand",
    "standard": "on-demand",
    "spot": "spot",
    "preemptible": "spot",
    "low-priority": "spot",
    "lowpriority": "spot",
}


def normalise_capacity_type(raw: str | None) -> CapacityType | None:
    """Map a capacity-type label value to "on-demand" / "spot", or None when absent or unrecognised.

    Understands Karpenter `karpenter.sh/capacity-type` (on-demand|spot), EKS `eks.amazonaws.com/capacityType`
    (ON_DEMAND|SPOT), Azure `kubernetes.azure.com/scalesetpriority` (regular|spot) and "preemptible".
    """
    if raw is None:
        return None
    return _CAPACITY_ALIASES.get(_SEPARATORS.sub("-", raw.strip().casefold()))


def rate_text(usd_per_gpu_hour: Decimal) -> str:
    """A $/GPU-h price as a cost formula shows it: at most 4 decimals, trailing zeros dropped.

    "$2.7447" for 2.74470525 (an 8-GPU instance's hourly price / 8), "$6.88", "$1.418"; the exact rate stays in
    `Cost.usd_per_gpu_hour`.
    """
    return f"${usd_per_gpu_hour.quantize(Decimal('0.0001'), rounding=ROUND_HALF_UP).normalize():f}"


def _usd(value: Decimal, places: str = "0.0001") -> str:
    return f"${value.quantize(Decimal(places))}"
