"""Unit tests: a typo anywhere in the configuration document is refused with its field path."""

from __future__ import annotations

import pytest

from gpuwaste.config import parse_config
from gpuwaste.errors import ConfigError


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ("detectors: {underused_allocation: {max_avg_10m_ratoi: 0.15}}", "detectors.underused_allocation.max_avg_10m_ratoi"),
        ("detectors: {idle_allocation: {max_activty_ratio: 0.1}}", "detectors.idle_allocation.max_activty_ratio"),
        ("detectors: {common: {min_coverag: 0.5}}", "detectors.common.min_coverag"),
        ("detectors: {stalled: {bogus: 1}}", "detectors.stalled.bogus"),
        ("clusters: [{name: a, labels: {pod_lable: auto}}]", "clusters.0.labels.pod_lable"),
        ("clusters: [{name: a, read: {gpu_resource_name: [x]}}]", "clusters.0.read.gpu_resource_name"),
    ],
)
def test_parse_config_typo_in_nested_settings_is_refused(document: str, path: str) -> None:
    # GIVEN a configuration with a misspelt key deep in a settings block
    # WHEN it is parsed
    with pytest.raises(ConfigError) as err:
        parse_config(document, source="cfg.yaml")
    # THEN the error names the field path and says extra inputs are not permitted
    assert path in str(err.value)
    assert "Extra inputs are not permitted" in str(err.value)


@pytest.mark.parametrize(
    ("document", "suggestion"),
    [
        ("detectors: {underused_allocation: {max_avg_10m_ratoi: 0.15}}", "did you mean 'max_avg_10m_ratio'?"),
        ("clusters: [{name: a, labels: {pod_lable: auto}}]", "did you mean 'pod_label'?"),
        ("delivery: {namespaces: {a: {slak_channel: x}}}", "did you mean 'slack_channel'?"),
        ("zzz: 1", "allowed: clusters, scan, detectors"),
    ],
)
def test_parse_config_unknown_key_names_the_closest_allowed_key(document: str, suggestion: str) -> None:
    # GIVEN a misspelt key (in a nested model, a list item, a dict value, or at the top)
    # WHEN it is parsed
    with pytest.raises(ConfigError) as err:
        parse_config(document)
    # THEN the error suggests the intended key (or lists the allowed ones)
    assert suggestion in str(err.value)
