"""`gpuwaste demo -v` (and `run -v`) works as the hint "no verdict on N pods/nodes (-v says why)" promises: the
reasons grouped by cause, one line per cause with its count, the counts adding up to N."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.cli_support import VERBOSE


@pytest.fixture(autouse=True)
def _quiet_again() -> None:
    VERBOSE.on = False  # the flag is process-wide: each test starts without it


def _demo(*args: str) -> str:
    result = CliRunner().invoke(app, ["demo", *args], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return result.output


def test_demo_v_says_why_some_pods_got_no_verdict_grouped_by_cause() -> None:
    # GIVEN the demo's hint without -v
    plain = _demo()
    (n,) = re.findall(r"no verdict on (\d+) pods/nodes \(-v says why\)", plain)
    # WHEN `gpuwaste demo -v` runs (the option after the command, where people type it)
    verbose = _demo("-v")
    # THEN it lists the causes, one per line with its count, the most common first
    assert f"no verdict on {n} pods/nodes, by cause:" in verbose
    counts = [int(c) for c in re.findall(r"^\s+(\d+)× ", verbose, re.M)]
    assert len(counts) >= 3 and counts == sorted(counts, reverse=True)
    # AND the causes cover every pod and node without a verdict (a subject with two causes counts under each)
    assert sum(counts) >= int(n)
    assert "(-v says why)" not in verbose
