"""The Lambda layer: the runtime packages only (no CLI, terminal stack or fleet generator), and complete.

shared/Makefile assembles the layer's gpuwaste package (`make -C shared layer-package`, the step `sam build`
runs through BuildMethod: makefile); here it is assembled into a temporary directory and every shipped module
is imported from it, in a fresh interpreter where rich, typer and prometheus_client cannot be imported.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCAL_ROOTS = {"local", "local_delivery"}

_IMPORT_ALL = r"""
import importlib, importlib.abc, pkgutil, sys
BLOCKED = {"rich", "typer", "prometheus_client"}

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not in the Lambda layer")
        return None

sys.meta_path.insert(0, Block())
import gpuwaste
assert gpuwaste.__file__.startswith(sys.argv[1]), gpuwaste.__file__
names = [m.name for m in pkgutil.walk_packages(gpuwaste.__path__, "gpuwaste.")]
for name in names:
    importlib.import_module(name)
print(len(names))
"""


@pytest.fixture(scope="module")
def layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    out = tmp_path_factory.mktemp("layer")
    done = subprocess.run([make, "-s", "-C", str(ROOT / "shared"), "layer-package", f"ARTIFACTS_DIR={out}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out / "python"


def test_layer_ships_no_command_line_terminal_stack_or_fleet_generator(layer: Path) -> None:
    # GIVEN the layer's gpuwaste package as shared/Makefile assembles it
    shipped = {p.relative_to(layer / "gpuwaste").as_posix() for p in (layer / "gpuwaste").rglob("*.py")}
    # WHEN its modules are listed
    # THEN the local command's modules are absent and the Lambda roots are present
    assert not {"cli.py", "cli_support.py"} & shipped
    assert not [p for p in shipped if p.startswith("cli_support/")]
    assert not [p for p in shipped if p.startswith(("commands/", "fleet/"))]
    assert not {f"bootstrap/{m}.py" for m in LOCAL_ROOTS} & shipped
    assert not [p for p in shipped if p.startswith("sinks/terminal")]
    assert {"bootstrap/scan.py", "bootstrap/notify.py", "bootstrap/tickets.py", "services/scan.py"} <= shipped


def test_every_shipped_module_imports_without_the_terminal_stack(layer: Path) -> None:
    # GIVEN a fresh interpreter that finds gpuwaste only in the assembled layer, with rich/typer/prometheus_client blocked
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(layer)}
    # WHEN every module of the layer's gpuwaste is imported
    done = subprocess.run([sys.executable, "-c", _IMPORT_ALL, str(layer)], cwd=layer, env=env,
                          capture_output=True, text=True, timeout=300)
    # THEN all import (none needs a module the layer leaves out)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) > 50


def test_layer_requirements_are_pinned_and_hold_no_terminal_stack() -> None:
    # GIVEN the layer's requirements
    lines = [ln.split("#")[0].strip() for ln in (ROOT / "shared" / "requirements.txt").read_text().splitlines()]
    reqs = [ln for ln in lines if ln]
    # WHEN read
    names = {re.split(r"[\[=<>!~ ]", r, maxsplit=1)[0].lower() for r in reqs}
    # THEN every one is an exact pin, and the terminal stack is not among them
    assert reqs and all(re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[a-z,]+\])?==[0-9][0-9A-Za-z.]*", r) for r in reqs), reqs
    assert not names & {"rich", "typer", "prometheus-client", "matplotlib"}


def test_every_bootstrap_module_is_a_lambda_root_under_contract_or_a_local_root() -> None:
    # GIVEN the "Lambda roots do not import the terminal stack" contract
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    lambda_roots = next(c for c in contracts if c["name"] == "Lambda roots do not import the terminal stack")
    listed = {m.removeprefix("gpuwaste.bootstrap.") for m in lambda_roots["source_modules"]}
    # WHEN compared with the bootstrap package's modules
    modules = {p.stem for p in (ROOT / "shared" / "gpuwaste" / "bootstrap").glob("*.py")} - {"__init__"}
    # THEN each is either held by the contract or one of the local command's roots (a new root cannot slip by)
    assert modules - LOCAL_ROOTS == listed
    assert {"rich", "typer", "gpuwaste.cli", "gpuwaste.commands", "gpuwaste.fleet"} <= set(lambda_roots["forbidden_modules"])


def test_each_lambda_handler_imports_one_lambda_root_and_no_terminal_stack() -> None:
    # GIVEN the Lambda roots held by the contract, and the handlers in functions/*/app.py
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    roots = set(next(c for c in contracts if c["name"] == "Lambda roots do not import the terminal stack")["source_modules"])
    handlers = sorted((ROOT / "functions").glob("*/app.py"))
    problems: list[str] = []
    for app in handlers:
        # WHEN each handler's imports are read
        modules: list[str] = []
        for node in ast.walk(ast.parse(app.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules += [f"{node.module}.{a.name}" if node.module == "gpuwaste.bootstrap" else node.module for a in node.names]
            elif isinstance(node, ast.Import):
                modules += [a.name for a in node.names]
        ours = {m for m in modules if m.startswith("gpuwaste")}
        used_roots = {m for m in ours if m.startswith("gpuwaste.bootstrap")}
        if len(used_roots) != 1 or not used_roots <= roots:
            problems.append(f"{app.parent.name}: bootstrap roots {sorted(used_roots)}")
        if not all(m.startswith(("gpuwaste.bootstrap", "gpuwaste.models")) for m in ours):
            problems.append(f"{app.parent.name}: imports {sorted(ours)}")
        if any(m.split(".")[0] in {"rich", "typer"} for m in modules):
            problems.append(f"{app.parent.name}: terminal stack")
    # THEN each goes through exactly one Lambda root (plus the message models), never the terminal stack
    assert len(handlers) == 8 and problems == []
