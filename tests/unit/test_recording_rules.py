"""The shipped recording rules: generated from one source, valid for promtool, and computing the buckets the scan reads.

`promtool check rules` / `promtool test rules` run when promtool is installed (`make prometheus`); without it
those tests are skipped with the install hint (and fail under CI=true).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from bench.rules import OPERATOR, PLAIN, documents
from gpuwaste.models.telemetry import TIME_RESOLVED
from gpuwaste.sources.metrics_plan import GPU_METRICS
from gpuwaste.sources.promql import RULES_MARKER, rule_name

ROOT = Path(__file__).resolve().parents[2]
RULES_TEST = ROOT / "tests" / "fixtures" / "rules" / "gpuwaste-recording-rules-test.yml"


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but promtool is missing (make prometheus)", pytrace=False)
        pytest.skip("promtool is not installed: `make prometheus` (apt-get install prometheus) to run the rules checks")
    return found


def test_shipped_rule_files_are_the_generated_ones():
    # GIVEN the rules as the code defines them
    plain, operator = documents()
    # WHEN compared with the files in deploy/
    # THEN they are identical (regenerate with `python bench/rules.py`)
    assert PLAIN.read_text() == plain
    assert OPERATOR.read_text() == operator


def test_rules_record_count_sum_and_max_of_every_time_resolved_field_and_the_marker():
    # GIVEN the plain rules file
    doc = yaml.safe_load(PLAIN.read_text())
    (group,) = doc["groups"]
    records = {r["record"] for r in group["rules"]}
    # THEN one 5-minute group, the marker, and three statistics per time-resolved DCGM field, nothing else
    assert group["interval"] == "5m"
    expected = {rule_name(s, k) for s in GPU_METRICS if s.resolved for k in ("count", "sum", "max")}
    assert records == expected | {RULES_MARKER}
    assert len(expected) == 3 * len(TIME_RESOLVED)
    # AND the operator manifest carries the same groups, recording only (alerts live in prometheus-alerts.yaml)
    crd = yaml.safe_load(OPERATOR.read_text())
    assert crd["kind"] == "PrometheusRule" and crd["spec"] == doc
    assert all("alert" not in r for r in group["rules"])


def test_promtool_checks_the_rules(tmp_path: Path):
    # GIVEN promtool
    promtool = _promtool()
    spec = tmp_path / "operator-spec.yml"
    spec.write_text(yaml.safe_dump(yaml.safe_load(OPERATOR.read_text())["spec"]))
    # WHEN both files are checked
    for f in (PLAIN, spec):
        result = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True, check=False)
        # THEN they are valid rule files
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS: 19 rules found" in result.stdout


def test_promtool_unit_tests_of_the_rules_pass():
    # GIVEN the rules' unit tests (two exporters of one GPU differing in a dropped label; a MIG instance without the count
    # reference; fields scraped with the reference and one missing scrapes; the marker)
    promtool = _promtool()
    # WHEN promtool runs them
    result = subprocess.run([promtool, "test", "rules", RULES_TEST.name], capture_output=True, text=True, check=False, cwd=RULES_TEST.parent)
    # THEN the recorded buckets are the left-open 5-minute counts, sums and maxima, the dropped label aggregated away, and a
    # field's count is recorded exactly where it differs from the reference's
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
