"""The lint baseline only shrinks: every per-file ignore of D, C90 or E501 in pyproject.toml is still needed.

ruff (`make lint`) enforces docstrings (D, Google convention), complexity (C90, at most 25) and the 120-column line
length on shared/ and functions/; the files that broke them when they were switched on are listed in
`[tool.ruff.lint.per-file-ignores]`. ruff itself fails a new violation; this test fails an entry a file no longer
needs (run ruff with the rules alone, ignoring the configuration), so a fixed file must leave the list.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASELINE_RULES = ("D", "C90", "E501")


def _baseline() -> dict[str, set[str]]:
    ignores = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]["per-file-ignores"]
    return {path: set(codes) for path, codes in ignores.items() if path.startswith(("shared/", "functions/"))}


def _violations(paths: list[str]) -> dict[str, set[str]]:
    """File → the codes of D, C90 and E501 it breaks, from ruff run without the project's configuration."""
    run = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--exit-zero", "--output-format", "json",
         "--select", ",".join(BASELINE_RULES), "--line-length", "120",
         "--config", 'lint.pydocstyle.convention="google"', "--config", "lint.mccabe.max-complexity=25", *paths],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
    )
    found: dict[str, set[str]] = {}
    for entry in json.loads(run.stdout):
        found.setdefault(str(Path(entry["filename"]).resolve().relative_to(ROOT)), set()).add(entry["code"])
    return found


def test_every_baseline_entry_is_still_needed() -> None:
    pytest.importorskip("ruff")
    # GIVEN the per-file ignores of the baseline
    baseline = _baseline()
    assert baseline, "the baseline is gone: remove this test too"
    # WHEN ruff checks those files with the baseline's rules alone
    found = _violations(sorted(baseline))
    # THEN each listed file still exists and still breaks each rule listed for it (a fixed one must be removed)
    stale = {path: sorted(codes - found.get(path, set())) for path, codes in baseline.items()}
    assert {path: codes for path, codes in stale.items() if codes} == {}
    assert all((ROOT / path).is_file() for path in baseline)


def test_the_baseline_lists_only_the_rules_it_is_for() -> None:
    # GIVEN the baseline / THEN it ignores only D, C90 and E501 codes (anything else is fixed, not baselined)
    other = {path: sorted(c for c in codes if not c.startswith(BASELINE_RULES)) for path, codes in _baseline().items()}
    assert {path: codes for path, codes in other.items() if codes} == {}
