"""The Lambda layer: the runtime packages only (no CLI, terminal stack or fleet generator), and complete.

shared/Makefile assembles the layer's gpuwaste package (`make -C shared layer-package`, the step `sam build`
runs through BuildMethod: makefile); here it is assembled into a temporary directory and every shipped module
is imported from it, in a fresh interpreter where rich, typer and prometheus_client cannot be imported.
"""

from __future__ import annotations

import ast
import json
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


def _layer_prune() -> list[str]:
    """The distributions shared/Makefile removes from the layer after the install (`LAYER_PRUNE`)."""
    found = re.search(r"^LAYER_PRUNE := (.+)$", (ROOT / "shared" / "Makefile").read_text(), re.M)
    assert found, "shared/Makefile has no LAYER_PRUNE"
    return found.group(1).split()


_IMPORT_HANDLERS = r"""
import importlib.abc, importlib.util, json, sys
BLOCKED = set(json.loads(sys.argv[2]))

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not in the Lambda layer")
        return None

sys.meta_path.insert(0, Block())
for i, app in enumerate(sys.argv[3:]):
    sys.path.insert(0, app.rsplit("/", 1)[0])
    spec = importlib.util.spec_from_file_location(f"app_{i}", app)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(module.lambda_handler), app
    sys.path.pop(0)
import gpuwaste
assert gpuwaste.__file__.startswith(sys.argv[1]), gpuwaste.__file__
print(sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED))
"""


def test_every_lambda_handler_imports_without_the_pruned_distributions(layer: Path) -> None:
    # GIVEN the distributions the layer build prunes (dateparser and what only it needs), as the import names they
    # provide, blocked with the terminal stack in a fresh interpreter that finds gpuwaste only in the assembled layer
    from importlib.metadata import distribution

    pruned = _layer_prune()
    assert "dateparser" in pruned
    names = {n for d in pruned for n in (distribution(d).read_text("top_level.txt") or d).split()}
    blocked = sorted(names | {"rich", "typer", "prometheus_client"})
    handlers = [str(p) for p in sorted((ROOT / "functions").glob("*/app.py"))]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(layer)}
    # WHEN every function's handler module is imported (as Lambda does: its own directory on the path)
    done = subprocess.run([sys.executable, "-c", _IMPORT_HANDLERS, str(layer), json.dumps(blocked), *handlers],
                          cwd=layer, env=env, capture_output=True, text=True, timeout=300)
    # THEN all import, and none of the pruned modules was loaded
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(handlers) == 8 and done.stdout.split("\n")[-2] == "[]"


def test_layer_prune_removes_a_distribution_by_its_record_and_refuses_one_not_there(tmp_path: Path) -> None:
    # GIVEN a layer directory holding one distribution (package, data, console script) beside another
    sys.path.insert(0, str(ROOT / "shared"))
    try:
        from layer_prune import prune
    finally:
        sys.path.pop(0)
    for name, files in {"gone": ["gone/__init__.py", "gone/data/x.json", "gone_extra/__init__.py"],
                        "kept": ["kept/__init__.py"]}.items():
        info = tmp_path / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[console_scripts]\n{name}-cli = {name}:main\n")
        for f in files:
            (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / f).write_text("")
        (tmp_path / "bin").mkdir(exist_ok=True)
        (tmp_path / "bin" / f"{name}-cli").write_text("#!python\n")
        listed = [*files, f"{info.name}/METADATA", f"{info.name}/entry_points.txt", f"{info.name}/RECORD",
                  f"../../bin/{name}-cli"]
        (info / "RECORD").write_text("".join(f"{f},,\n" for f in listed))
    # WHEN one is pruned
    removed = prune(tmp_path, ["gone"])
    # THEN its files, its dist-info and its console script are gone, the other's are all there
    assert removed == ["gone 1.0"]
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["bin/kept-cli", "kept-1.0.dist-info/METADATA", "kept-1.0.dist-info/RECORD",
                    "kept-1.0.dist-info/entry_points.txt", "kept/__init__.py"]
    # AND a distribution the layer does not hold is an error (a pin changed what it pulls in)
    with pytest.raises(SystemExit, match="not in the layer: gone"):
        prune(tmp_path, ["gone"])
