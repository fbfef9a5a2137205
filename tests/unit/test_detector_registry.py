"""The detector registry is the source of truth: supersession names and the settings document are checked against it
when the detectors are imported, and the catalogue's detector table is generated from it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

import gpuwaste.detectors  # noqa: F401  (registers every detector)
from gpuwaste.config import config_json_schema
from gpuwaste.detectors.registry import REGISTRY, DetectorSpec, RegistryError, check_registry, registry_table
from gpuwaste.detectors.settings import DetectorSettings, settings_document

ROOT = Path(__file__).resolve().parents[2]


class _S(BaseModel):
    threshold: float = 0.5


def _spec(name: str, superseded_by: tuple[str, ...] = ()) -> DetectorSpec:
    return DetectorSpec(name=name, fn=lambda ctx, s: (), settings_model=_S, superseded_by=superseded_by)


def test_a_superseded_by_name_that_is_not_registered_fails_at_import() -> None:
    # GIVEN a registry where one detector says it is superseded by a misspelt name, another by itself
    registry = {"idle": _spec("idle", ("stalld",)), "stalled": _spec("stalled", ("stalled",))}
    # WHEN the registry is checked (as importing gpuwaste.detectors does)
    with pytest.raises(RegistryError) as err:
        check_registry({"idle": _S, "stalled": _S}, registry)
    # THEN the error names both detectors and the bad names
    assert "idle: superseded_by names ['stalld']" in str(err.value)
    assert "stalled: superseded_by names ['stalled']" in str(err.value)


def test_a_detector_without_its_settings_field_fails_at_import_saying_what_to_add() -> None:
    # GIVEN a registered detector the settings document has no field for, and a field for no detector
    registry = {"idle": _spec("idle"), "newcomer": _spec("newcomer")}
    # WHEN checked
    with pytest.raises(RegistryError) as err:
        check_registry({"idle": _S, "retired": _S}, registry)
    # THEN it names the detector with no settings section, and which field is left over
    assert "newcomer: no field in the settings document" in str(err.value)
    assert "['retired']" in str(err.value)


def test_the_real_registry_matches_its_settings_document_and_the_config_schema() -> None:
    # GIVEN the registered detectors and the configuration document's JSON Schema
    schema = json.loads(config_json_schema())
    detectors_ref = schema["properties"]["detectors"]
    name = (detectors_ref.get("$ref") or detectors_ref["allOf"][0]["$ref"]).rsplit("/", 1)[1]
    props = set(schema["$defs"][name]["properties"])
    # WHEN checked as at import
    check_registry(DetectorSettings.detector_fields())
    # THEN every registered detector has its section in the config document, and nothing else does
    assert set(REGISTRY) and props - {"enabled", "common"} == set(REGISTRY)


def test_the_catalogue_table_is_the_registry_table() -> None:
    # GIVEN docs/catalogue.md's generated block
    text = (ROOT / "docs" / "catalogue.md").read_text()
    block = re.search(r"<!-- registry-table:begin -->\n(.*?)<!-- registry-table:end -->", text, re.S)
    assert block is not None
    # WHEN compared with the table the registry renders now
    # THEN they are equal (regenerate: PYTHONPATH=shared python -c "import gpuwaste.detectors as d;
    # print(d.registry.registry_table())")
    assert block.group(1) == registry_table(), "docs/catalogue.md's detector table is stale"
    assert all(f"| `{name}` |" in block.group(1) for name in REGISTRY)


def test_the_settings_document_is_generated_from_the_registry() -> None:
    # GIVEN a registry of two detectors with their own settings models
    class _T(BaseModel):
        model_config = ConfigDict(extra="forbid")
        limit_ratio: float = 0.25

    registry = {"zeta": _spec("zeta"), "alpha": DetectorSpec(name="alpha", fn=lambda ctx, s: (), settings_model=_T)}
    # WHEN the settings document is built from it
    doc = settings_document(registry)
    # THEN it has the shared fields and one field per detector, of its model, with its defaults ...
    assert set(doc.model_fields) == {"enabled", "common", "alpha", "zeta"}
    assert doc.detector_fields() == {"alpha": _T, "zeta": _S}
    assert doc().by_name()["alpha"] == _T() and doc(alpha={"limit_ratio": 0.1}).by_name()["alpha"].limit_ratio == 0.1
    # ... and rejects a misspelt detector or setting
    with pytest.raises(ValidationError):
        doc(alpah={})
    with pytest.raises(ValidationError):
        doc(alpha={"limit_ratoi": 0.1})
    # AND a detector named like a shared field is refused
    with pytest.raises(RegistryError):
        settings_document({"common": _spec("common")})


NEW_DETECTOR = """
from gpuwaste.detectors.registry import NoVerdict, detector
from gpuwaste.models.base import SettingsModel


class HoardingSettings(SettingsModel):
    \"\"\"Toy detector settings.\"\"\"

    max_ratio: float = 0.3


@detector("gpu_hoarding", settings=HoardingSettings, superseded_by=("idle_allocation",))
def gpu_hoarding(ctx, settings):
    \"\"\"Declines every pod (a toy detector added as one file).\"\"\"
    for alloc in ctx.allocations:
        yield NoVerdict("gpu_hoarding", alloc.pod.name, f"toy {settings.max_ratio}")
"""

PROBE = """
import json
from gpuwaste.detectors import REGISTRY, DetectorSettings
from gpuwaste.detectors.registry import registry_table
from gpuwaste.config import GpuWasteConfig, config_json_schema
cfg = GpuWasteConfig.model_validate({"detectors": {"gpu_hoarding": {"max_ratio": 0.5}}})
schema = json.loads(config_json_schema())
print(json.dumps({
    "registered": "gpu_hoarding" in REGISTRY,
    "default": DetectorSettings().by_name()["gpu_hoarding"].max_ratio,
    "configured": cfg.detectors.by_name()["gpu_hoarding"].max_ratio,
    "in_schema": any("gpu_hoarding" in d.get("properties", {}) for d in schema["$defs"].values()),
    "in_table": "| `gpu_hoarding` | Declines every pod" in registry_table(),
}))
"""


def test_a_new_detector_is_one_file(tmp_path: Path) -> None:
    # GIVEN a copy of the package with one new file in gpuwaste/detectors/ and nothing else changed
    shutil.copytree(ROOT / "shared" / "gpuwaste", tmp_path / "gpuwaste", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "gpuwaste" / "detectors" / "hoarding.py").write_text(NEW_DETECTOR)
    # WHEN that copy is imported in a fresh interpreter
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}, check=False)
    # THEN the detector is registered, has its section in the settings document and the config schema (with its
    # defaults, configurable), and a row in the catalogue table
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "registered": True, "default": 0.3, "configured": 0.5, "in_schema": True, "in_table": True}
