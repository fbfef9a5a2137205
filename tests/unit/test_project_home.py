"""The project's home is written once, in pyproject.toml [project.urls] Homepage, and every published copy takes it
from there: the krew manifest (deploy/krew/generate.py), the Helm chart's home and sources (deploy/helm/readme.py),
the image's source labels (`make image` passes it as a build argument). It is a placeholder — gpuwaste has no
public home yet — and the README says so where it tells people how to install."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
HOME = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Homepage"]


def test_the_home_is_one_value_in_pyproject() -> None:
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert list(urls) == ["Homepage"] and HOME.startswith("https://") and not HOME.endswith("/")


def test_no_source_writes_the_home_but_pyproject() -> None:
    # GIVEN the files that produce or build what is published (generators, the Containerfile, the Makefile)
    sources = ["deploy/krew/generate.py", "deploy/helm/readme.py", "Containerfile", "Makefile"]
    # THEN none of them spells the address: each reads it from pyproject.toml
    assert [s for s in sources if HOME in (ROOT / s).read_text()] == []
    assert 'org.opencontainers.image.source="${HOMEPAGE}"' in (ROOT / "Containerfile").read_text()
    assert "--build-arg HOMEPAGE=$(PKG_HOME)" in (ROOT / "Makefile").read_text()


def test_the_published_copies_carry_the_home_from_pyproject() -> None:
    # GIVEN the committed krew manifest and Helm chart
    krew = yaml.safe_load((ROOT / "deploy" / "krew" / "gpuwaste.yaml").read_text())["spec"]
    chart = yaml.safe_load((ROOT / "deploy" / "helm" / "gpuwaste" / "Chart.yaml").read_text())
    # THEN both say pyproject's home, the krew archives are under its releases
    assert krew["homepage"] == HOME and all(p["uri"].startswith(f"{HOME}/releases/download/") for p in krew["platforms"])
    assert chart["home"] == HOME and chart["sources"] == [HOME]
    # AND the chart is what its generator writes (a changed home in pyproject.toml makes this fail until rerun)
    check = subprocess.run([sys.executable, str(ROOT / "deploy" / "helm" / "readme.py"), "--check"],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr


def test_the_generators_follow_the_home(monkeypatch: object) -> None:
    # GIVEN the krew generator with another home
    sys.path.insert(0, str(ROOT / "deploy" / "krew"))
    import generate

    monkeypatch.setattr(generate, "home", lambda: "https://example.org/gpuwaste")  # type: ignore[attr-defined]
    # WHEN it writes the manifest, THEN the homepage is that home
    assert "  homepage: https://example.org/gpuwaste\n" in generate.manifest("0.1.0", "0" * 64)


def test_the_readme_says_the_home_is_a_placeholder() -> None:
    readme = (ROOT / "README.md").read_text()
    install = readme[readme.index("## Install"):readme.index("\n## ", readme.index("## Install") + 1)]
    assert HOME in install and re.search(r"no public home yet", install) and "placeholder" in install
    for published in ("deploy/krew/gpuwaste.yaml", "deploy/helm/gpuwaste/Chart.yaml", "pyproject.toml"):
        assert "placeholder" in (ROOT / published).read_text().lower(), published
