"""The configuration document: the committed JSON Schema is the generated one, and the example validates."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.config import config_json_schema, load_config

ROOT = Path(__file__).resolve().parents[2]


def test_config_schema_committed_file_matches_the_models() -> None:
    # GIVEN deploy/config.schema.json in the repository
    committed = (ROOT / "deploy" / "config.schema.json").read_text()
    # WHEN `gpuwaste config-schema` generates it from the pydantic models now
    generated = CliRunner().invoke(app, ["config-schema"]).stdout
    # THEN they are identical (regenerate: gpuwaste config-schema > deploy/config.schema.json)
    assert json.loads(committed) == json.loads(generated) == json.loads(config_json_schema())


def test_config_example_validates_with_lifecycle_defaults_spelled_out() -> None:
    # GIVEN the example document
    # WHEN it is loaded
    config = load_config(ROOT / "deploy" / "config.example.yaml")
    # THEN it is valid, names three clusters (one Prometheus-only), and its lifecycle section states the defaults
    assert [c.name for c in config.clusters] == ["prod-gpu", "research", "inference-west"]
    assert config.clusters[2].cluster_state == "kube-state-metrics"
    assert config.lifecycle == type(config.lifecycle)()
