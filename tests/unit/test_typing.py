"""Typing gate: mypy --strict holds on all of shared/gpuwaste (pyproject.toml [tool.mypy])."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_strict_passes_on_the_whole_package() -> None:
    # GIVEN the strict mypy configuration: strict = true over the whole package, nothing excluded
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["strict"] is True and config["files"] == ["shared/gpuwaste"] and not config.get("exclude")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}"}
    # WHEN mypy runs as `make lint` runs it (no arguments: the configured files)
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    # THEN it finds no error in any of them
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout
