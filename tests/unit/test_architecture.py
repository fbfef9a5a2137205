"""Architecture: the import boundaries of design §2 hold (import-linter contracts in pyproject.toml)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_boundaries_all_contracts_kept() -> None:
    # GIVEN the layered contracts in pyproject.toml (pure core has no SDKs, adapters do not decide)
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports (import-linter) is not installed: run `make install`")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}"}
    # WHEN import-linter checks the package
    done = subprocess.run([exe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    # THEN every contract is kept
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout
