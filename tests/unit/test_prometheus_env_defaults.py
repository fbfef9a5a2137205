"""GPUWASTE_PROMETHEUS_MAX_ANSWER_MB / _ANSWER_DEADLINE_S: read as the defaults of the two Prometheus limits; a value
that is not a number in the field's range is an error naming the variable, never a silent default (issue 27 §3)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.errors import ConfigError
from gpuwaste.models.settings import PrometheusSettings

MB = "GPUWASTE_PROMETHEUS_MAX_ANSWER_MB"
DEADLINE = "GPUWASTE_PROMETHEUS_ANSWER_DEADLINE_S"


def test_unset_or_empty_gives_the_documented_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MB, raising=False)
    monkeypatch.setenv(DEADLINE, "  ")
    s = PrometheusSettings(url="http://prom:9090")
    assert (s.max_answer_mb, s.answer_deadline_s) == (256.0, 120.0)


def test_a_number_in_range_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MB, "12.5")
    monkeypatch.setenv(DEADLINE, " 7 ")
    s = PrometheusSettings(url="http://prom:9090")
    assert (s.max_answer_mb, s.answer_deadline_s) == (12.5, 7.0)


@pytest.mark.parametrize(("name", "value"), [
    (MB, "lots"), (MB, "0"), (MB, "9000"), (MB, "nan"), (MB, "1" * 30),
    (DEADLINE, "2m"), (DEADLINE, "-1"), (DEADLINE, "inf"), (DEADLINE, "3601"),
])
def test_a_bad_value_is_a_config_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as err:
        PrometheusSettings(url="http://prom:9090")
    message = str(err.value)
    assert name in message
    assert repr(value[:20]) in message
    assert "unset it for the default" in message


def test_an_explicit_value_needs_no_environment_but_a_bad_one_still_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MB, "lots")
    assert PrometheusSettings(url="http://prom:9090", max_answer_mb=3).max_answer_mb == 3  # default not made
    monkeypatch.setenv(DEADLINE, "soon")
    with pytest.raises(ConfigError, match=DEADLINE):
        PrometheusSettings(url="http://prom:9090", max_answer_mb=3)


def test_doctor_with_a_bad_value_is_a_usage_error_not_an_unreachable_prometheus() -> None:
    result = CliRunner().invoke(app, ["doctor", "-p", "http://127.0.0.1:9"], env={MB: "lots", "COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert MB in result.output and "'lots'" in result.output
    assert "reachable" not in result.output
