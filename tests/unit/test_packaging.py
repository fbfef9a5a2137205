"""A user install brings the runtime only, under the licence its metadata names (issue 22 item 8).

What is checked here is what pip and the Containerfile read: the licence metadata (an SPDX expression, the form
setuptools >= 77 reads without a deprecation warning), the LICENSE file it points to, the requirement sets behind
`make install-user` / `make demo` (runtime) and `make install` (dev), and the Containerfile's copy of the licence.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEV_TOOLS = ("pytest", "moto", "mypy", "ruff", "hypothesis", "cfn-lint", "import-linter", "matplotlib")


def _requirements(path: Path) -> list[str]:
    names: list[str] = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r "):
            names += _requirements(path.parent / line[3:].strip())
        else:
            names.append(re.split(r"[<>=\[ ;]", line, maxsplit=1)[0].lower())
    return names


def test_licence_is_an_spdx_expression_with_its_file() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert project["authors"], "authorship is part of the package metadata"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text, "the whole licence, not a pointer to it"
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77 for r in build)


def test_runtime_requirements_hold_no_dev_toolchain() -> None:
    runtime = _requirements(ROOT / "requirements-cli.txt")
    assert {"typer", "rich", "prometheus-client", "boto3", "pydantic"} <= set(runtime)
    assert not [n for n in runtime if n in DEV_TOOLS]
    dev = _requirements(ROOT / "requirements-dev.txt")
    assert set(runtime) <= set(dev), "make install (dev) is a superset of the runtime"


def test_demo_and_user_install_do_not_need_the_dev_set() -> None:
    make = (ROOT / "Makefile").read_text()
    demo = re.search(r"^demo: (.*?)##", make, re.M)
    user = re.search(r"^install-user: (.*?)##", make, re.M)
    assert demo and user
    assert demo.group(1).strip() == "$(RUNTIME_STAMP)" == user.group(1).strip()
    runtime_rule = re.search(r"^\$\(RUNTIME_STAMP\):.*?(?=^\S)", make, re.M | re.S)
    assert runtime_rule and "requirements-dev" not in runtime_rule.group(0)


def test_the_image_copies_the_licence_it_installs() -> None:
    containerfile = (ROOT / "Containerfile").read_text()
    copy = re.search(r"^COPY pyproject\.toml (.*) \./$", containerfile, re.M)
    assert copy and "LICENSE" in copy.group(1).split()
