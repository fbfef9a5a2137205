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


def test_the_model_layer_reads_only_declared_fields() -> None:
    # GIVEN the model layer (settings sections, records, messages): every capability a caller relies on is a
    # declared field or Protocol member (`models.settings.common.UrlSection`), so mypy checks it (issue 27 §3)
    import ast

    probes = []
    for path in sorted((ROOT / "shared" / "gpuwaste" / "models").rglob("*.py")):
        # WHEN its source is searched for getattr/hasattr calls with a constant attribute name
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
                probes.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.id}(…, {node.args[1].value!r})")
    # THEN there is none: an attribute a section may lack is a capability the type does not say
    assert probes == []
