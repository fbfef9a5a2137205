"""The picture stays true: docs/architecture.md names the import-linter contracts and layers pyproject.toml has."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"


def _contracts() -> list[dict]:  # type: ignore[type-arg]
    return list(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"])


def _section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start: end if end != -1 else None]


def test_the_contracts_table_names_exactly_the_contracts_in_pyproject() -> None:
    # GIVEN the architecture page's contracts table and pyproject's import-linter contracts
    table = [line for line in _section("Contracts").splitlines() if line.startswith("| `")]
    # WHEN their names are compared
    documented = [re.match(r"\| `([^`]+)`", line).group(1) for line in table]  # type: ignore[union-attr]
    # THEN each contract is documented once, and nothing else is
    assert sorted(documented) == sorted(c["name"] for c in _contracts())


def test_the_layers_block_is_the_layers_contract_in_order() -> None:
    # GIVEN the page's layer list (a text block) and the `layers` contract
    block = re.search(r"```text\n(.*?)```", _section("Layers"), re.S)
    assert block is not None
    layers = next(c for c in _contracts() if c["type"] == "layers")["layers"]
    # WHEN compared line by line (spacing around `|` ignored)
    def norm(s: str) -> str:
        return " | ".join(p.strip() for p in s.split("|"))
    # THEN they are the same layers in the same order
    assert [norm(line) for line in block.group(1).splitlines() if line.strip()] == [norm(layer) for layer in layers]


def test_every_file_the_page_points_to_exists() -> None:
    # GIVEN the paths the page names (`shared/...`, `tests/...`, `docs/...`, `deploy/...`, package-relative modules)
    text = DOC.read_text()
    paths = set(re.findall(r"`((?:shared|tests|docs|deploy|bench)/[\w./-]+\.(?:py|md|yaml|txt))`", text))
    modules = set(re.findall(r"`((?:detectors|sources|allocation|bootstrap|models|sinks|commands|fleet)/[\w]+\.py)`", text))
    # WHEN each is looked up (placeholders like <name> are not paths)
    missing = [p for p in paths if not (ROOT / p).exists()]
    missing += [m for m in modules if not (ROOT / "shared" / "gpuwaste" / m).exists()]
    # THEN none is missing
    assert paths and modules and missing == []
