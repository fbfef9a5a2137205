"""Models: the GPU model catalogue and MIG geometry (pure data; no I/O except reading the bundled YAML).

Hardware facts, not prices: the spellings that name a GPU model (DCGM `modelName`, GFD `nvidia.com/gpu.product`,
GKE accelerator names), its memory, board power limit, compute slices and MIG profile table. It sits in the
models layer so that the cluster model (`models.cluster.gpu_share_for_request`), the cluster-state sources,
the allocation resolvers and the price book all read one table (`data/gpu_models.yaml`, with its sources).
"""

from __future__ import annotations

import re
from decimal import Decimal
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpuwaste.errors import ConfigError, InputFormatError

if TYPE_CHECKING:
    from collections.abc import Iterator

DEFAULT_MIG_TOTAL_SLICES = 7
_DATA_PACKAGE = "gpuwaste.models"

_FROZEN = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------------------------------
# Model names
# --------------------------------------------------------------------------------------------------

_SEPARATORS = re.compile(r"[\s_\-]+")
_VENDOR_PREFIXES = ("nvidia ", "tesla ")
_SHARED_SUFFIX = re.compile(r"[-_ ]shared$", re.IGNORECASE)
# "-MIG-1g.24gb", "-MIG-1g.24gb+gfx", "-MIG-1g.24gb-me", "-MIG-1g.24gb+me.all" (field guide B31)
_MIG_SUFFIX = re.compile(r"[-_ ]mig[-_ ](?P<profile>\d+g\.\d+gb(?:[+-][a-z][a-z0-9.]*)*)$", re.IGNORECASE)


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

# Any "+xxx" / "-xxx" variant after Ng.Mgb: "+me", "+me.all", "+gfx", "-me" (Blackwell, field guide B31).
_MIG_PROFILE = re.compile(r"^(?P<slices>\d+)g(?:\.(?P<mem>\d+)gb)?(?P<variant>(?:[+-][a-z][a-z0-9.]*)*)$")


class MigProfile(BaseModel):
    """A parsed MIG profile.

    Attributes:
        compute_slices: the leading N of "Ng": compute slices of the instance.
        memory_gb: the memory figure in the name, informational only: DCGM and the device plugin disagree
            ("1g.11gb" vs "1g.12gb", field guide B07). None when the text had no memory part ("3g").
        fraction: compute_slices / total_slices, the share of the physical GPU one instance holds.
        total_slices: compute slices of the whole GPU (7, but 4 on A30).
        media_extensions: True for "+me" / "+me.all" profiles (media engines attached to the instance).
        variant: the suffix after "Ng.Mgb" as written ("+me", "+gfx", "+me.all", "-me"; "" when none).
    """

    model_config = _FROZEN

    compute_slices: int = Field(ge=1)
    memory_gb: int | None = Field(default=None, ge=1)
    fraction: Decimal
    total_slices: int = DEFAULT_MIG_TOTAL_SLICES
    media_extensions: bool = False
    variant: str = ""


def parse_mig_profile(text: str, *, total_slices: int = DEFAULT_MIG_TOTAL_SLICES) -> MigProfile:
    """Parse a MIG profile in any spelling seen in the wild.

    Accepts "1g.5gb", "3g.40gb", "1g.11gb" (DCGM), "1g.10gb+me", "mig-2g.10gb", "nvidia.com/mig-1g.12gb",
    "MIG 1g.5gb", a bare "3g", and any "+xxx" / "-xxx" variant after Ng.Mgb ("1g.24gb+gfx", "1g.24gb+me.all",
    "1g.24gb-me"; Blackwell, field guide B31). The fraction comes from the leading Ng only, so spellings that
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
        media_extensions=any(v == "me" or v.startswith("me.") for v in match.group("variant").replace("-", "+-").split("+")),
        variant=match.group("variant"),
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
    mig_source: str | None = None
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
    mig_source: str | None = None
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
        """Return the catalog shipped in gpuwaste/models/data/gpu_models.yaml (loaded once per process)."""
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
                    mig_source=entry.mig_source,
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
    return GpuModelCatalog._from_text(text, origin="gpuwaste/models/data/gpu_models.yaml")


# --------------------------------------------------------------------------------------------------
# File helpers
# --------------------------------------------------------------------------------------------------


def _read_text(path: Path) -> str:
    from gpuwaste.files import read_capped

    try:
        return read_capped(path, 16 << 20, what="catalog file").decode("utf-8")
    except InputFormatError as exc:
        raise ConfigError(str(exc)) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def _load_yaml(text: str, *, origin: str) -> object:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}: not valid YAML: {exc}") from exc


def mig_total_slices_of(model_name: str | None, catalog: GpuModelCatalog | None = None) -> int | None:
    """Compute slices of the GPU a model spelling names (DCGM `modelName`, GFD product with or without its
    `-MIG-<profile>` suffix, GKE accelerator): 7 for A100/H100/H200/B200/GB200, 4 for A30 and RTX PRO 6000
    Blackwell. None when the model is unknown to the catalogue or has no MIG table.
    """
    spec = (catalog or GpuModelCatalog.bundled()).resolve(model_name)
    return spec.mig_total_slices if spec is not None else None
