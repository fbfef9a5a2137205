"""`gpuwaste doctor`'s messages: a URL without a scheme gets the scan's message, and an unreachable Prometheus
gets its hint once."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from gpuwaste.cli import app


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args))


def test_doctor_url_without_scheme_gets_the_scan_message() -> None:
    # GIVEN a Prometheus address without http://
    # WHEN doctor and scan are given it
    doctor = invoke("doctor", "--prometheus", "127.0.0.1:1")
    scan = invoke("scan", "--prometheus", "127.0.0.1:1")
    # THEN both say the same friendly thing, exit 2, with no pydantic error text
    assert doctor.exit_code == scan.exit_code == 2
    assert "must start with http:// or https://" in doctor.output
    assert doctor.output.strip() == scan.output.strip()
    assert "String should match pattern" not in doctor.output


@pytest.mark.loopback
def test_doctor_unreachable_prometheus_hint_is_given_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a Prometheus URL where nothing listens (retry backoff skipped)
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    # WHEN doctor probes it
    result = invoke("doctor", "--prometheus", "http://127.0.0.1:1")
    # THEN exit 3 with the hint to check the URL exactly once
    assert result.exit_code == 3, result.output
    assert result.output.lower().count("check the url") == 1, result.output
