"""The CloudWatch dashboard in template.yaml reads the metrics the handlers emit (bootstrap/cloudwatch.py)."""

from __future__ import annotations

import json
import re
from typing import Any

from gpuwaste.bootstrap.cloudwatch import METRIC_NAMES, NAMESPACE
from tests.aws_resources import load_template


def _body() -> tuple[dict[str, Any], dict[str, Any]]:
    template = load_template()
    (dashboard,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Dashboard"]
    text = dashboard["Properties"]["DashboardBody"]["Fn::Sub"]
    return template, {"text": text, "json": json.loads(re.sub(r"\$\{[^}]+\}", "X", text))}


def test_dashboard_body_is_json_and_its_references_resolve() -> None:
    # GIVEN the dashboard resource WHEN its body's ${...} placeholders are listed
    template, body = _body()
    refs = set(re.findall(r"\$\{([^}]+)\}", body["text"]))
    # THEN each is a pseudo parameter or a resource of the template, and the body is valid JSON with widgets
    assert refs <= {"AWS::Region"} | set(template["Resources"])
    assert len(body["json"]["widgets"]) >= 8


def test_dashboard_shows_every_emitted_metric_and_nothing_else() -> None:
    # GIVEN the metric names the dashboard reads from the GpuWaste namespace
    _, body = _body()
    shown: set[str] = set()
    for widget in body["json"]["widgets"]:
        for row in widget.get("properties", {}).get("metrics", []):
            if isinstance(row[0], dict):
                assert f"{{{NAMESPACE}," in row[0]["expression"]
                shown |= set(re.findall(r'MetricName="(\w+)"', row[0]["expression"]))
            elif row[0] == NAMESPACE:
                shown.add(row[1])
    # THEN they are exactly the metrics the handlers emit (the Scans count is left to the Lambda invocations graph)
    assert shown == set(METRIC_NAMES) - {"Scans"}
