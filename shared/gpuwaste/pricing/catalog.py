"""Pricing (pure): the dated price book (USD per GPU-hour).

`PriceBook` answers with the models of `gpuwaste.pricing.prices` (instance prices, overrides, rates).

The GPU model catalogue and MIG geometry live in `gpuwaste.models.gpu_models` (hardware facts every layer
reads); they are re-exported here so existing imports keep working.

Data in, data out: no I/O except reading the bundled YAML (or a file the caller names), no SDKs. Money is
`Decimal` end to end; nothing here rounds except the human-readable `basis` text.
"""

from __future__ import annotations

from decimal import Decimal
from functools import cache
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from gpuwaste.errors import ConfigError
from gpuwaste.models.gpu_models import (
    DEFAULT_MIG_TOTAL_SLICES,
    GfdProduct,
    GpuModelCatalog,
    GpuModelSpec,
    MigProfile,
    MigProfileSpec,
    ResolvedProduct,
    _load_yaml,
    _read_text,
    normalise_model_name,
    parse_mig_profile,
    split_gfd_product,
)
from gpuwaste.pricing.prices import (
    CapacityType,
    GpuHourRate,
    InstanceOverride,
    InstancePrice,
    PriceOverrides,
    Unpriced,
    _PriceBookFile,
    _usd,
    normalise_capacity_type,
)

_RATE_MEMO = 4096  # distinct node shapes remembered per price book


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
        #: answers of `gpu_hour_rate` by its arguments (a fleet has few distinct node shapes; results are frozen)
        self._rates: dict[tuple[str | int | None, ...], GpuHourRate | Unpriced] = {}

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
        key = (instance_type, capacity_type, gpu_model, physical_gpus, region, accelerator)
        known = self._rates.get(key)
        if known is None:
            if len(self._rates) >= _RATE_MEMO:
                self._rates.clear()
            known = self._rates[key] = self._gpu_hour_rate(
                instance_type=instance_type, capacity_type=capacity_type, gpu_model=gpu_model,
                physical_gpus=physical_gpus, region=region, accelerator=accelerator)
        return known

    def _gpu_hour_rate(
        self,
        *,
        instance_type: str | None,
        capacity_type: str | None,
        gpu_model: str | None,
        physical_gpus: int | None,
        region: str | None,
        accelerator: str | None,
    ) -> GpuHourRate | Unpriced:
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
        f"DCGM sees {physical} physical GPU{'' if physical == 1 else 's'} on this {instance_type} node but {by} says {used}; "
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
    text = resources.files("gpuwaste.pricing").joinpath("data/prices.yaml").read_text(encoding="utf-8")
    return PriceBook._from_text(text, origin="gpuwaste/pricing/data/prices.yaml", catalog=GpuModelCatalog.bundled())


__all__ = [
    "DEFAULT_MIG_TOTAL_SLICES",
    "GfdProduct",
    "GpuModelCatalog",
    "GpuModelSpec",
    "MigProfile",
    "MigProfileSpec",
    "ResolvedProduct",
    "normalise_model_name",
    "parse_mig_profile",
    "split_gfd_product",
]
