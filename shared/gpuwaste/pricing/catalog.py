"""Pricing (pure): GPU model catalog, MIG profile parsing and the dated price book.

Data in, data out: no I/O except reading the bundled YAML (or a file the caller names), no SDKs. Money is
`Decimal` end to end; nothing here rounds except the human-readable `basis` text.
"""

from __future__ import annotations

import re
from datetime import date
from decimal import Decimal
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from gpuwaste.errors import ConfigError, InputFormatError

if TYPE_CHECKING:
    from collections.abc import Iterator

Provider = Literal["aws", "gcp", "azure"]
CapacityType = Literal["on-demand", "spot"]
RateMethod = Literal[
    "rate_card_instance",
    "price_book_instance",
    "price_book_accelerator",
    "rate_card_model",
    "default_rate",
]

DEFAULT_MIG_TOTAL_SLICES = 7
_DATA_PACKAGE = "gpuwaste.pricing"

_FROZEN = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------------------------------
# Model names
# --------------------------------------------------------------------------------------------------

_SEPARATORS = re.compile(r"[\s_\-]+")
_VENDOR_PREFIXES = ("nvidia ", "tesla ")
_SHARED_SUFFIX = re.compile(r"[-_ ]shared$", re.IGNORECASE)
_MIG_SUFFIX = re.compile(r"[-_ ]mig[-_ ](?P<profile>\d+g\.\d+gb(?:\+me)?)$", re.IGNORECASE)


def normalise_model_name(raw: str) -> str:
    """Return the matching form of a GPU model spelling.

    Case-folds, turns every run of '-', '_' and blanks into one space and drops leading "NVIDIA" / "Tesla"
    words, so "NVIDIA-A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB" and "a100 sxm4 40gb" compare equal, as do
    "Tesla-T4", "Tesla T4" and "nvidia-tesla-t4".
    """
    text = _SEPARATORS.sub(" ", raw.casefold()).strip()
    stripped = True
    while stripped:
        stripped = False
        for prefix in _VENDOR_PREFIXES:
            if text.startswith(prefix):
                text = text[len(prefix) :]
                stripped = True
    return text


class GfdProduct(BaseModel):
    """A GFD `nvidia.com/gpu.product` value split into its parts.

    Attributes:
        model_name: the physical GPU's product name ("NVIDIA-H100-NVL" from "NVIDIA-H100-NVL-MIG-1g.12gb").
        mig_profile: the MIG profile of a MIG-single node ("1g.12gb"), or None.
        shared: True when GFD appended "-SHARED" (time-slicing / MPS with renamed resources).
    """

    model_config = _FROZEN

    model_name: str
    mig_profile: str | None = None
    shared: bool = False


def split_gfd_product(product: str) -> GfdProduct:
    """Split a GFD product label: "A100-SXM4-40GB-MIG-1g.5gb-SHARED" → model, "1g.5gb", shared.

    Plain model names (DCGM `modelName`, GKE accelerator names) come back unchanged with no profile.
    """
    text = product.strip()
    shared = False
    match = _SHARED_SUFFIX.search(text)
    if match:
        text, shared = text[: match.start()], True
    mig_profile = None
    match = _MIG_SUFFIX.search(text)
    if match:
        mig_profile = match.group("profile")
        text = text[: match.start()]
    return GfdProduct(model_name=text, mig_profile=mig_profile, shared=shared)


# --------------------------------------------------------------------------------------------------
# MIG profiles
# --------------------------------------------------------------------------------------------------

_MIG_PROFILE = re.compile(r"^(?P<slices>\d+)g(?:\.(?P<mem>\d+)gb)?(?P<me>\+me)?$")


class MigProfile(BaseModel):
    """A parsed MIG profile.

    Attributes:
        compute_slices: the leading N of "Ng": compute slices of the instance.
        memory_gb: the memory figure in the name, informational only: DCGM and the device plugin disagree
            ("1g.11gb" vs "1g.12gb", field guide B07). None when the text had no memory part ("3g").
        fraction: compute_slices / total_slices, the share of the physical GPU one instance holds.
        total_slices: compute slices of the whole GPU (7, but 4 on A30).
        media_extensions: True for "+me" profiles.
    """

    model_config = _FROZEN

    compute_slices: int = Field(ge=1)
    memory_gb: int | None = Field(default=None, ge=1)
    fraction: Decimal
    total_slices: int = DEFAULT_MIG_TOTAL_SLICES
    media_extensions: bool = False


def parse_mig_profile(text: str, *, total_slices: int = DEFAULT_MIG_TOTAL_SLICES) -> MigProfile:
    """Parse a MIG profile in any spelling seen in the wild.

    Accepts "1g.5gb", "3g.40gb", "1g.11gb" (DCGM), "1g.10gb+me", "mig-2g.10gb", "nvidia.com/mig-1g.12gb",
    "MIG 1g.5gb" and a bare "3g". The fraction comes from the leading Ng only, so spellings that
    disagree on memory give the same fraction (field guide B07).

    Args:
        text: the profile text.
        total_slices: compute slices of the parent GPU; 7 for A100/H100/H200/B200, 4 for A30. Use
            `GpuModelSpec.mig_profile` to take it from the catalog.

    Raises:
        InputFormatError: the text is not a MIG profile, or claims more slices than the GPU has.
    """
    if total_slices < 1:
        raise InputFormatError(f"total_slices must be >= 1, got {total_slices}", source="mig profile")
    cleaned = text.strip().casefold()
    cleaned = cleaned.removeprefix("nvidia.com/")
    cleaned = re.sub(r"^mig[-_ ]?", "", cleaned)
    match = _MIG_PROFILE.match(cleaned)
    if match is None:
        raise InputFormatError(
            f"not a MIG profile: {text!r} (expected e.g. '1g.5gb', 'nvidia.com/mig-3g.40gb')", source="mig profile"
        )
    slices = int(match.group("slices"))
    memory = int(match.group("mem")) if match.group("mem") is not None else None
    if not 1 <= slices <= total_slices:
        raise InputFormatError(
            f"MIG profile {text!r} has {slices} compute slices; a GPU has 1..{total_slices}", source="mig profile"
        )
    if memory == 0:
        raise InputFormatError(f"MIG profile {text!r} has 0 GB of memory", source="mig profile")
    return MigProfile(
        compute_slices=slices,
        memory_gb=memory,
        fraction=Decimal(slices) / Decimal(total_slices),
        total_slices=total_slices,
        media_extensions=match.group("me") is not None,
    )


# --------------------------------------------------------------------------------------------------
# GPU model catalog
# --------------------------------------------------------------------------------------------------


class MigProfileSpec(BaseModel):
    """One MIG profile a model supports, named as the device plugin spells it."""

    model_config = _FROZEN

    name: str
    compute_slices: int = Field(ge=1)
    memory_mib: int = Field(ge=1, description="nominal: the GB in the name × 1024")


class GpuModelSpec(BaseModel):
    """A canonical GPU model.

    Attributes:
        key: canonical key, e.g. "H100-SXM-80GB".
        memory_mib: nominal memory (see memory_source); usable memory is slightly lower.
        power_limit_w: board power limit in watts, or None when reference/formats.md has no figure.
        power_source: where power_limit_w comes from (or why it is unknown).
        mig_profiles: supported MIG profiles; empty for parts without MIG (or with an unverified list).
        mig_total_slices: compute slices of the whole GPU for MIG parts (7; A30 4), else None.
        aliases: spellings that resolve to this model.
    """

    model_config = _FROZEN

    key: str
    memory_mib: int = Field(ge=1)
    memory_source: str
    power_limit_w: int | None = Field(default=None, ge=1)
    power_source: str
    mig_profiles: tuple[MigProfileSpec, ...] = ()
    mig_total_slices: int | None = Field(default=None, ge=1)
    aliases: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _check_mig(self) -> GpuModelSpec:
        if self.mig_profiles and self.mig_total_slices is None:
            raise ValueError(f"{self.key}: mig_profiles given without mig_total_slices")
        for spec in self.mig_profiles:
            parsed = parse_mig_profile(spec.name, total_slices=self.mig_total_slices or DEFAULT_MIG_TOTAL_SLICES)
            if parsed.compute_slices != spec.compute_slices:
                raise ValueError(f"{self.key}: profile {spec.name} declares compute_slices {spec.compute_slices}")
        return self

    @property
    def mig_capable(self) -> bool:
        """True when the catalog lists MIG profiles for this model."""
        return bool(self.mig_profiles)

    def mig_profile(self, text: str) -> MigProfile:
        """Parse `text` as a MIG profile of this model, so the fraction uses the model's slice count.

        Raises:
            InputFormatError: the text is not a MIG profile or does not fit this GPU's slice count.
        """
        return parse_mig_profile(text, total_slices=self.mig_total_slices or DEFAULT_MIG_TOTAL_SLICES)


class ResolvedProduct(BaseModel):
    """What a model / product label names: the physical model, and a MIG slice of it if any."""

    model_config = _FROZEN

    model: GpuModelSpec
    mig_profile: MigProfile | None = None
    shared: bool = False


class _MigProfileEntry(BaseModel):
    model_config = _FROZEN

    compute_slices: int = Field(ge=1)
    memory_mib: int = Field(ge=1)


class _GpuModelEntry(BaseModel):
    model_config = _FROZEN

    aliases: list[str] = Field(default_factory=list)
    memory_mib: int = Field(ge=1)
    memory_source: str = Field(min_length=1)
    power_limit_w: int | None = Field(default=None, ge=1)
    power_source: str = Field(min_length=1)
    mig_total_slices: int | None = Field(default=None, ge=1)
    mig_profiles: dict[str, _MigProfileEntry] = Field(default_factory=dict)


class _GpuModelFile(BaseModel):
    model_config = _FROZEN

    schema_version: Literal[1]
    models: dict[str, _GpuModelEntry]


class GpuModelCatalog:
    """Canonical GPU models and the spellings that name them."""

    def __init__(self, models: tuple[GpuModelSpec, ...]) -> None:
        """Index `models` by key and by every normalised alias.

        Raises:
            ConfigError: two models claim the same spelling.
        """
        self._models: dict[str, GpuModelSpec] = {}
        self._index: dict[str, str] = {}
        for spec in models:
            if spec.key in self._models:
                raise ConfigError(f"GPU model {spec.key!r} is defined twice")
            self._models[spec.key] = spec
            for spelling in (spec.key, *spec.aliases):
                norm = normalise_model_name(spelling)
                owner = self._index.setdefault(norm, spec.key)
                if owner != spec.key:
                    raise ConfigError(f"GPU model spelling {spelling!r} matches both {owner!r} and {spec.key!r}")

    @classmethod
    def bundled(cls) -> GpuModelCatalog:
        """Return the catalog shipped in gpuwaste/pricing/data/gpu_models.yaml (loaded once per process)."""
        return _bundled_catalog()

    @classmethod
    def from_yaml(cls, path: Path) -> GpuModelCatalog:
        """Load a catalog file with the same layout as the bundled one.

        Raises:
            ConfigError: the file is missing, not YAML, or does not match the layout.
        """
        return cls._from_text(_read_text(path), origin=str(path))

    @classmethod
    def _from_text(cls, text: str, *, origin: str) -> GpuModelCatalog:
        data = _load_yaml(text, origin=origin)
        try:
            parsed = _GpuModelFile.model_validate(data)
            specs = tuple(
                GpuModelSpec(
                    key=key,
                    memory_mib=entry.memory_mib,
                    memory_source=entry.memory_source,
                    power_limit_w=entry.power_limit_w,
                    power_source=entry.power_source,
                    mig_total_slices=entry.mig_total_slices,
                    mig_profiles=tuple(
                        MigProfileSpec(name=name, compute_slices=p.compute_slices, memory_mib=p.memory_mib)
                        for name, p in entry.mig_profiles.items()
                    ),
                    aliases=tuple(entry.aliases),
                )
                for key, entry in parsed.models.items()
            )
        except (ValidationError, InputFormatError) as exc:
            raise ConfigError(f"{origin}: invalid GPU model catalog: {exc}") from exc
        return cls(specs)

    def __iter__(self) -> Iterator[GpuModelSpec]:
        """Iterate over the models in file order."""
        return iter(self._models.values())

    def __len__(self) -> int:
        """Number of models."""
        return len(self._models)

    def get(self, key: str) -> GpuModelSpec:
        """Return the model with canonical key `key`.

        Raises:
            KeyError: no such key.
        """
        return self._models[key]

    def resolve(self, raw_name: str | None) -> GpuModelSpec | None:
        """Return the model a spelling names, or None when it names none (or is empty).

        Accepts DCGM `modelName` ("NVIDIA H100 80GB HBM3", "Tesla T4"), GFD products ("Tesla-T4",
        "NVIDIA-H100-NVL-MIG-1g.12gb", "A100-SXM4-40GB-MIG-1g.5gb-SHARED": the MIG / SHARED suffix is
        stripped to find the physical model), GKE accelerator names ("nvidia-tesla-t4") and canonical keys,
        in any case.
        """
        resolved = self.resolve_product(raw_name)
        return resolved.model if resolved is not None else None

    def resolve_product(self, raw_name: str | None) -> ResolvedProduct | None:
        """Like `resolve`, but also return the MIG profile (with this model's slice count) and SHARED flag.

        Returns None when the name is empty or names no known model. A MIG suffix the model cannot hold
        (e.g. "7g.80gb" claimed on an A30) also gives None rather than a guessed fraction.
        """
        if raw_name is None or not raw_name.strip():
            return None
        key = self._index.get(normalise_model_name(raw_name))
        if key is not None:
            return ResolvedProduct(model=self._models[key])
        product = split_gfd_product(raw_name)
        key = self._index.get(normalise_model_name(product.model_name))
        if key is None:
            return None
        spec = self._models[key]
        profile = None
        if product.mig_profile is not None:
            try:
                profile = spec.mig_profile(product.mig_profile)
            except InputFormatError:
                return None
        return ResolvedProduct(model=spec, mig_profile=profile, shared=product.shared)


@cache
def _bundled_catalog() -> GpuModelCatalog:
    text = resources.files(_DATA_PACKAGE).joinpath("data/gpu_models.yaml").read_text(encoding="utf-8")
    return GpuModelCatalog._from_text(text, origin="gpuwaste/pricing/data/gpu_models.yaml")


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


def _usd(value: Decimal, places: str = "0.0001") -> str:
    return f"${value.quantize(Decimal(places))}"


class PriceBook:
    """Dated instance prices plus the operator's rate card; answers "what does one GPU-hour cost here?"."""

    def __init__(
        self,
        prices: tuple[InstancePrice, ...],
        *,
        catalog: GpuModelCatalog,
        overrides: PriceOverrides | None = None,
    ) -> None:
        """Index `prices`; every row's gpu_model must be a key in `catalog`.

        Raises:
            ConfigError: a row names an unknown GPU model, or two rows share provider, region, instance
                type, capacity type and priced unit.
        """
        self._prices = prices
        self._catalog = catalog
        self._overrides = overrides or PriceOverrides()
        self._instances: dict[tuple[str, CapacityType], list[InstancePrice]] = {}
        self._azure_folded: dict[tuple[str, CapacityType], list[InstancePrice]] = {}
        self._accelerators: dict[tuple[str, CapacityType], list[InstancePrice]] = {}
        seen: set[tuple[str, str, str, str, str]] = set()
        for row in prices:
            identity = (row.provider, row.region, row.instance_type, row.capacity_type, row.priced_unit)
            if identity in seen:
                raise ConfigError(f"price book has two rows for {identity}")
            seen.add(identity)
            try:
                catalog.get(row.gpu_model)
            except KeyError:
                raise ConfigError(
                    f"price row {row.instance_type!r} names GPU model {row.gpu_model!r}, not in the catalog"
                ) from None
            if row.priced_unit == "accelerator":
                key = (normalise_model_name(row.instance_type), row.capacity_type)
                self._accelerators.setdefault(key, []).append(row)
                continue
            self._instances.setdefault((row.instance_type, row.capacity_type), []).append(row)
            if row.provider == "azure":
                self._azure_folded.setdefault((row.instance_type.casefold(), row.capacity_type), []).append(row)
        self._by_model = self._index_model_rates(self._overrides)

    def _index_model_rates(self, overrides: PriceOverrides) -> dict[str, tuple[str, Decimal]]:
        index: dict[str, tuple[str, Decimal]] = {}
        for name, rate in overrides.usd_per_gpu_hour_by_model.items():
            spec = self._catalog.resolve(name)
            index[spec.key if spec is not None else normalise_model_name(name)] = (name, rate)
        return index

    @classmethod
    def bundled(cls) -> PriceBook:
        """Return the price book shipped in gpuwaste/pricing/data/prices.yaml, without overrides."""
        return _bundled_price_book()

    @classmethod
    def from_yaml(cls, path: Path, *, catalog: GpuModelCatalog | None = None) -> PriceBook:
        """Load a price book file with the same layout as the bundled one.

        Raises:
            ConfigError: the file is missing, not YAML, or a row is invalid (the message names the row).
        """
        return cls._from_text(_read_text(path), origin=str(path), catalog=catalog or GpuModelCatalog.bundled())

    @classmethod
    def _from_text(cls, text: str, *, origin: str, catalog: GpuModelCatalog) -> PriceBook:
        data = _load_yaml(text, origin=origin)
        try:
            parsed = _PriceBookFile.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{origin}: invalid price book: {exc}") from exc
        return cls(tuple(parsed.prices), catalog=catalog)

    @property
    def prices(self) -> tuple[InstancePrice, ...]:
        """Every bundled row, in file order."""
        return self._prices

    @property
    def catalog(self) -> GpuModelCatalog:
        """The GPU model catalog used to resolve model names."""
        return self._catalog

    @property
    def overrides(self) -> PriceOverrides:
        """The rate card in force (empty when none was given)."""
        return self._overrides

    def with_overrides(self, overrides: PriceOverrides) -> PriceBook:
        """Return a copy of this book with `overrides` as its rate card (replacing any previous one)."""
        return PriceBook(self._prices, catalog=self._catalog, overrides=overrides)

    def gpu_hour_rate(
        self,
        *,
        instance_type: str | None,
        capacity_type: str | None,
        gpu_model: str | None,
        physical_gpus: int | None,
        region: str | None = None,
        accelerator: str | None = None,
    ) -> GpuHourRate | Unpriced:
        """Price one physical GPU for one hour on a node.

        Order: rate-card instance override → bundled instance price (spot row for a spot node, else
        on-demand with pricing.spot_discount, else on-demand with a warning) → bundled GCP accelerator price
        (`accelerator`, e.g. GKE "nvidia-tesla-t4") → rate card per GPU model → default rate → Unpriced.

        Args:
            instance_type: node label `node.kubernetes.io/instance-type`, as the cloud spells it (Azure
                sizes also match case-insensitively).
            capacity_type: capacity label value ("on-demand", "spot", "ON_DEMAND", "preemptible", ...).
            gpu_model: DCGM modelName, GFD product or canonical key; used for per-model rate cards and to
                warn when it disagrees with the price row.
            physical_gpus: distinct DCGM UUIDs on the node. The price book's count wins; a disagreement
                adds a warning.
            region: `topology.kubernetes.io/region`; picks the regional row when the book has one.
            accelerator: GKE `cloud.google.com/gke-accelerator`, for N1 nodes with attached GPUs.

        Returns:
            GpuHourRate, or Unpriced with a reason naming the setting that would price the node.
        """
        capacity = normalise_capacity_type(capacity_type)
        capacity_note: tuple[str, ...] = ()
        if capacity_type is None:
            capacity_note = ("capacity type unknown; priced as on-demand",)
        elif capacity is None:
            capacity_note = (f"capacity type {capacity_type!r} not recognised; priced as on-demand",)
        model = self._catalog.resolve(gpu_model)
        uncounted_override: str | None = None

        if instance_type:
            override = self._find_override(instance_type)
            if override is not None and override[1].capacity_type in (None, capacity or "on-demand"):
                notes = list(capacity_note) if override[1].capacity_type is not None else []
                rate = self._from_override(override[0], override[1], capacity, physical_gpus, notes)
                if rate is not None:
                    return rate
                uncounted_override = override[0]
            rows = self._find_rows(instance_type, capacity or "on-demand")
            if rows:
                return self._from_row(rows, capacity, region, model, physical_gpus, list(capacity_note))

        if accelerator:
            rows = self._find_accelerator_rows(accelerator, capacity or "on-demand")
            if rows:
                return self._from_row(rows, capacity, region, model, None, list(capacity_note))

        # Per-GPU rate cards are flat rates: the capacity-type caveat does not apply to them.
        by_model = self._by_model.get(model.key if model is not None else normalise_model_name(gpu_model or ""))
        if gpu_model and by_model is not None:
            card_name, card_rate = by_model
            return GpuHourRate(
                usd_per_gpu_hour=card_rate,
                basis=f"rate card {_usd(card_rate)}/GPU-h for {card_name} ({self._overrides_provenance()})",
                source=self._overrides.source,
                effective_date=self._overrides.effective_date,
                method="rate_card_model",
            )

        default = self._overrides.default_usd_per_gpu_hour
        if default is not None:
            what = f"instance type {instance_type!r}" if instance_type else "node without instance type"
            return GpuHourRate(
                usd_per_gpu_hour=default,
                basis=f"default rate {_usd(default)}/GPU-h for {what} ({self._overrides_provenance()})",
                source=self._overrides.source,
                effective_date=self._overrides.effective_date,
                method="default_rate",
                warnings=("priced at pricing.default_usd_per_gpu_hour: no instance or model price known",),
            )

        if uncounted_override is not None:
            return Unpriced(
                reason=(
                    f"rate card for {uncounted_override!r} has no gpus and neither the price book nor DCGM gives a "
                    f"GPU count; set pricing.instance_types.{uncounted_override}.gpus"
                )
            )
        return Unpriced(reason=self._unpriced_reason(instance_type, gpu_model, model, accelerator))

    # -- lookup steps ------------------------------------------------------------------------------

    def _find_override(self, instance_type: str) -> tuple[str, InstanceOverride] | None:
        table = self._overrides.instance_types
        if instance_type in table:
            return instance_type, table[instance_type]
        folded = instance_type.casefold()
        if folded.startswith("standard_"):
            for name, override in table.items():
                if name.casefold() == folded:
                    return name, override
        return None

    def _find_rows(self, instance_type: str, capacity: CapacityType) -> list[InstancePrice]:
        rows = self._instances.get((instance_type, capacity))
        if rows is None:
            rows = self._azure_folded.get((instance_type.casefold(), capacity))
        if rows is None and capacity == "spot":
            rows = self._find_rows(instance_type, "on-demand")
        return rows or []

    def _find_accelerator_rows(self, accelerator: str, capacity: CapacityType) -> list[InstancePrice]:
        key = normalise_model_name(accelerator)
        rows = self._accelerators.get((key, capacity))
        if rows is None and capacity == "spot":
            rows = self._accelerators.get((key, "on-demand"))
        return rows or []

    def _from_override(
        self,
        name: str,
        override: InstanceOverride,
        capacity: CapacityType | None,
        physical_gpus: int | None,
        warnings: list[str],
    ) -> GpuHourRate | None:
        bundled = self._find_rows(name, capacity or "on-demand")
        gpus = override.gpus or (bundled[0].gpus if bundled else None) or physical_gpus
        if gpus is None:
            return None
        if physical_gpus is not None and physical_gpus != gpus:
            warnings.append(_gpu_count_warning(name, physical_gpus, gpus, "the rate card"))
        per_gpu = override.usd_per_hour / gpus
        when = override.effective_date or self._overrides.effective_date
        capacity_used = override.capacity_type or capacity or "on-demand"
        return GpuHourRate(
            usd_per_gpu_hour=per_gpu,
            instance_usd_per_hour=override.usd_per_hour,
            gpus_per_instance=gpus,
            basis=(
                f"{name} {capacity_used} ${override.usd_per_hour}/h ÷ {gpus} GPUs = {_usd(per_gpu)}/GPU-h "
                f"({override.source}, {when.isoformat() if when else 'undated'})"
            ),
            source=override.source,
            effective_date=when,
            capacity_type_used=capacity_used,
            method="rate_card_instance",
            warnings=tuple(warnings),
        )

    def _from_row(
        self,
        rows: list[InstancePrice],
        capacity: CapacityType | None,
        region: str | None,
        model: GpuModelSpec | None,
        physical_gpus: int | None,
        warnings: list[str],
    ) -> GpuHourRate:
        row = next((r for r in rows if region is not None and r.region == region), None)
        if row is None:
            row = next((r for r in rows if r.region == "*"), rows[0])
            if region is not None and row.region != "*":
                warnings.append(
                    f"no {row.provider} price for {row.instance_type} in {region}; used the {row.region} price"
                )
        price = row.usd_per_hour
        formula = f"{row.instance_type} {row.capacity_type} ${price}/h"
        capacity_used: CapacityType = row.capacity_type
        if capacity == "spot" and row.capacity_type == "on-demand":
            discount = self._overrides.spot_discount
            if discount is not None:
                price = price * (1 - discount)
                formula += f" × (1 − {discount} spot discount)"
                capacity_used = "spot"
            else:
                warnings.append(
                    "spot node priced at on-demand: no spot price known; set pricing.spot_discount to estimate it"
                )
        if physical_gpus is not None and physical_gpus != row.gpus:
            warnings.append(_gpu_count_warning(row.instance_type, physical_gpus, row.gpus, "the price book"))
        if model is not None and model.key != row.gpu_model:
            warnings.append(
                f"node reports GPU model {model.key} but the price book lists {row.gpu_model} for {row.instance_type}"
            )
        per_gpu = price / row.gpus
        if row.priced_unit == "accelerator":
            basis = f"{formula} per attached GPU (host VM not included) = {_usd(per_gpu)}/GPU-h"
        else:
            basis = f"{formula} ÷ {row.gpus} GPUs = {_usd(per_gpu)}/GPU-h"
        where = "region-independent" if row.region == "*" else row.region
        basis += f" ({row.provider} {where}, {_short_source(row.source)}, {row.dated})"
        return GpuHourRate(
            usd_per_gpu_hour=per_gpu,
            instance_usd_per_hour=price,
            gpus_per_instance=row.gpus,
            basis=basis,
            source=row.source,
            effective_date=row.effective_date,
            capacity_type_used=capacity_used,
            method="price_book_accelerator" if row.priced_unit == "accelerator" else "price_book_instance",
            warnings=tuple(warnings),
        )

    def _overrides_provenance(self) -> str:
        when = self._overrides.effective_date
        return f"{self._overrides.source}, {when.isoformat() if when else 'undated'}"

    @staticmethod
    def _unpriced_reason(
        instance_type: str | None, gpu_model: str | None, model: GpuModelSpec | None, accelerator: str | None
    ) -> str:
        model_text = model.key if model is not None else (gpu_model or "unknown")
        if instance_type:
            head = f"instance type {instance_type!r} is not in the price book"
        elif accelerator:
            head = f"node has no instance type and accelerator {accelerator!r} is not in the price book"
        else:
            head = "node has no instance-type label"
        return (
            f"{head} (GPU model {model_text}); add it under pricing.instance_types or set "
            "pricing.usd_per_gpu_hour_by_model (or pricing.default_usd_per_gpu_hour)"
        )


def _gpu_count_warning(instance_type: str, physical: int, used: int, by: str) -> str:
    return (
        f"DCGM sees {physical} physical GPUs on this {instance_type} node but {by} says {used}; "
        f"priced per {by}'s {used}"
    )


def _short_source(source: str) -> str:
    """Shorten a source for a basis line: "karpenter-provider-aws zz_generated.pricing_aws.go"."""
    parts = source.split()
    if len(parts) >= 2 and parts[0].startswith("https://github.com/"):
        repo = parts[0].rstrip("/").rsplit("/", 1)[-1]
        return f"{repo} {parts[1].rsplit('/', 1)[-1]}"
    return source


@cache
def _bundled_price_book() -> PriceBook:
    text = resources.files(_DATA_PACKAGE).joinpath("data/prices.yaml").read_text(encoding="utf-8")
    return PriceBook._from_text(text, origin="gpuwaste/pricing/data/prices.yaml", catalog=GpuModelCatalog.bundled())


# --------------------------------------------------------------------------------------------------
# File helpers
# --------------------------------------------------------------------------------------------------


def _read_text(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _load_yaml(text: str, *, origin: str) -> object:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}: not valid YAML: {exc}") from exc
