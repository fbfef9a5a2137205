"""Detectors: the settings document of every registered detector, generated from the registry.

A detector module declares its settings model and registers itself (`@detector(name, settings=Model)`); importing
`gpuwaste.detectors` imports every module of the package (`registry.discover`), and the `DetectorSettings` model is
built here from what registered: one field per detector, named after it, of its settings model, defaulting to that
model's defaults. Nothing here names a detector, so adding one is one file (plus its tests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from gpuwaste.detectors.registry import REGISTRY, DetectorSpec, discover
from gpuwaste.join import CommonSettings


class DetectorSettingsBase(BaseModel):
    """Per-detector settings, keyed by detector name, plus the shared ones.

    The per-detector fields are added from the registry (`settings_document`); unknown keys are rejected, so a typo in
    a configuration file (`detectors: {idle_alocation: …}`) is an error, not a silent default.

    Attributes:
        enabled: detector names to run; None runs every registered detector.
        common: settings every detector shares (coverage, windows; `join.CommonSettings`).
    """

    model_config = ConfigDict(extra="forbid")

    enabled: list[str] | None = None
    common: CommonSettings = Field(default_factory=CommonSettings)

    def by_name(self) -> dict[str, BaseModel]:
        """Detector name → its settings model."""
        return {name: getattr(self, name) for name in type(self).model_fields if name not in SHARED_FIELDS}

    @classmethod
    def detector_fields(cls) -> dict[str, type[BaseModel]]:
        """Field name → settings model of each per-detector field (what `registry.check_registry` compares)."""
        out: dict[str, type[BaseModel]] = {}
        for name, info in cls.model_fields.items():
            if name not in SHARED_FIELDS and isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
                out[name] = info.annotation
        return out


#: DetectorSettings fields that are not one detector's settings.
SHARED_FIELDS = ("enabled", "common")


def settings_document(registry: dict[str, DetectorSpec]) -> type[DetectorSettingsBase]:
    """The settings document for `registry`: `DetectorSettingsBase` plus one field per detector (in name order), of
    the detector's settings model, defaulting to that model's defaults.

    Raises:
        RegistryError: a detector's name clashes with a shared field (`enabled`, `common`).
    """
    from gpuwaste.detectors.registry import RegistryError

    clash = sorted(set(registry) & set(SHARED_FIELDS))
    if clash:
        raise RegistryError(f"detector registry: detector names {clash} clash with the shared settings fields {list(SHARED_FIELDS)}")
    fields: dict[str, Any] = {
        name: (registry[name].settings_model, Field(default_factory=registry[name].settings_model, description=registry[name].summary()))
        for name in sorted(registry)
    }
    return create_model(
        "DetectorSettings", __base__=DetectorSettingsBase, __module__=__name__, __doc__=DetectorSettingsBase.__doc__, **fields
    )


discover()
if TYPE_CHECKING:
    DetectorSettings = DetectorSettingsBase
else:
    DetectorSettings = settings_document(REGISTRY)
