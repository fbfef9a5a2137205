"""The documentation a user reads (README.md, docs/*.md) carries no internal codes and no path only the team has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The field guide's codes (B05, B16, …): the guide is the team's, users do not have it.
INTERNAL_CODE = re.compile(r"\bB\d{2}\b")
#: docs/catalogue.md's table generated from the detectors' docstrings (tests/unit/test_detector_registry.py owns it).
GENERATED = re.compile(r"<!-- registry-table:begin -->.*?<!-- registry-table:end -->", re.S)


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: p.name)
def test_user_docs_carry_no_field_guide_codes(doc: Path) -> None:
    # GIVEN a user-facing document, its generated registry table left aside
    text = GENERATED.sub("", doc.read_text(encoding="utf-8"))
    # WHEN searched for the field guide's codes
    hits = [line.strip() for line in text.splitlines() if INTERNAL_CODE.search(line)]
    # THEN there are none
    assert hits == []


def test_user_docs_say_the_workspace_data_is_not_in_a_clone() -> None:
    # GIVEN the user-facing documents that point at the team's real-data folder beside the repository
    pointing = {doc.name: " ".join(doc.read_text(encoding="utf-8").split()) for doc in USER_DOCS
                if "shared/data/real" in doc.read_text(encoding="utf-8")}
    assert "README.md" in pointing and "real-data.md" in pointing
    # WHEN read THEN each says that a clone does not have that folder
    silent = [name for name, text in pointing.items()
              if not re.search(r"not in (this repository|a clone)|a clone does not have it", text)]
    assert silent == []
