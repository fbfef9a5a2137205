"""The alerting rules: `promtool check rules`, the `promtool test rules` unit tests, and the PrometheusRule copy."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus-alerts.yaml"
PROMETHEUS_RULE = ROOT / "deploy" / "kubernetes" / "prometheusrule.yaml"
UNIT_TESTS = ROOT / "tests" / "promtool" / "alerts_test.yaml"


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        hint = "promtool is not installed (apt-get install --no-install-recommends prometheus, or `make prometheus`)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {hint}", pytrace=False)
        pytest.skip(hint)
    return path


def test_alert_rules_pass_promtool_check() -> None:
    # GIVEN the shipped alerting rules WHEN promtool checks them
    result = subprocess.run([_promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False)
    # THEN they are valid and every rule is found
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout


def test_alert_rules_unit_tests_pass() -> None:
    # GIVEN promtool unit tests shaped as `gpuwaste serve` exposes its series (firing and not-firing cases)
    # WHEN promtool runs them
    result = subprocess.run([_promtool(), "test", "rules", str(UNIT_TESTS)], capture_output=True, text=True, check=False,
                            cwd=UNIT_TESTS.parent)
    # THEN every case passes
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_rule_has_a_unit_test() -> None:
    # GIVEN the rules and the unit tests
    rules = {r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"] if "alert" in r}
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    # WHEN the alert names the tests expect to fire are collected
    fired = {case["alertname"] for t in tests for case in t.get("alert_rule_test", []) if case.get("exp_alerts")}
    # THEN each rule is shown firing at least once
    assert rules == fired


def test_prometheus_rule_holds_the_same_groups_as_the_plain_file() -> None:
    # GIVEN the PrometheusRule for the Prometheus Operator and the plain rules file
    plain = yaml.safe_load(ALERTS.read_text())
    crd = yaml.safe_load(PROMETHEUS_RULE.read_text())
    # THEN the PrometheusRule is a monitoring.coreos.com/v1 PrometheusRule with exactly the plain file's groups
    assert (crd["apiVersion"], crd["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert crd["spec"]["groups"] == plain["groups"]
