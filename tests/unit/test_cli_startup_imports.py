"""`gpuwaste --help` starts without pydantic models or the heavy client libraries (issue 13 §5).

A top-level import of a pydantic model module in one subcommand (e.g. `commands/run.py` importing
`models.messages`) doubled the start-up of every command, `--help` included (bench/startup.py: 0.32 s → 0.62 s on
the same machine). This runs `--help` in a fresh interpreter and lists what it imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pydantic", "boto3", "botocore", "kubernetes", "slack_sdk", "requests", "prometheus_api_client", "matplotlib",
         "aws_lambda_powertools")

_PROBE = """
import json, sys
sys.argv = ["gpuwaste", "--help"]
from gpuwaste.cli import run
try:
    run()
except SystemExit:
    pass
mods = sorted(sys.modules)
print(json.dumps(mods))
"""


def _modules_imported_by_help() -> list[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}", "COLUMNS": "80"}
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True, timeout=120)
    mods: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return mods


def test_help_imports_no_pydantic_models_and_no_heavy_client_library() -> None:
    # GIVEN a fresh interpreter WHEN `gpuwaste --help` runs
    mods = _modules_imported_by_help()
    # THEN it printed the commands without importing any heavy library or any pydantic model module
    heavy = sorted({m.split(".")[0] for m in mods if m.split(".")[0] in HEAVY})
    assert heavy == [], f"--help imported {heavy}: import them where they are used"
    models = sorted(m for m in mods if m.startswith("gpuwaste.models.") and m not in ("gpuwaste.models.text", "gpuwaste.models.redaction", "gpuwaste.models.signals"))
    assert models == [], f"--help imported {models}: import them where they are used"
    # and it did load every subcommand (the check is not vacuous)
    assert {f"gpuwaste.commands.{c}" for c in ("run", "doctor", "explain", "summary")} <= set(mods)
