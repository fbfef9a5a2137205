"""The detector registry is the source of truth: supersession names and the settings document are checked against it
when the detectors are imported, and the catalogue's detector table is generated from it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

import gpuwaste.detectors  # noqa: F401  (registers every detector)
from gpuwaste.detectors.registry import REGISTRY, DetectorSpec, RegistryError, check_registry, registry_table
from gpuwaste.detectors.settings import DetectorSettings
from gpuwaste.settings import config_json_schema

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
    # THEN it says which file and which line to add, and which field is left over
    assert "newcomer: no field in DetectorSettings (detectors/settings.py)" in str(err.value)
    assert "`newcomer: _S = Field(default_factory=_S)`" in str(err.value)
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
