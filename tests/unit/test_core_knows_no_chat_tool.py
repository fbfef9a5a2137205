"""The core (models, services, detectors, ports) knows no chat tool: Slack's message ids (`ts`, `thread_ts`), its field
names (`slack_ts`) and its name as a sink (`"slack"`) live only in the Slack adapter (`sinks/slack*.py`) and its
interactions endpoint. The one exception is `models/legacy.py`, which reads the shape stored before (and only it)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "shared" / "gpuwaste"
CORE_FILES = sorted([*(CORE / "models").rglob("*.py"), *(CORE / "services").rglob("*.py"),
                     *(CORE / "detectors").rglob("*.py"), CORE / "ports.py"])
#: Reads records and queued messages of the earlier shape; builds the names it reads without spelling them.
LEGACY = CORE / "models" / "legacy.py"
SLACK_NAMES = re.compile(r"\b(slack_ts|thread_ts|slack_channel_id|message_ts)\b")
#: The delivery core: not even the word.
DELIVERY_CORE = [CORE / "services" / "notify.py", CORE / "services" / "lifecycle.py", CORE / "services" / "interactions.py",
                 CORE / "models" / "lifecycle.py", CORE / "models" / "messages.py"]


def slack_words(path: Path) -> list[str]:
    """Where `path` names Slack's message fields, or has the string literal "slack" (a sink named in the core)."""
    text = path.read_text(encoding="utf-8")
    found = [f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}" for m in SLACK_NAMES.finditer(text)]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip().lower() == "slack":
            found.append(f"{path.name}:{node.lineno}: literal {node.value!r}")
        if isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.Constant) and re.search(r":slack\b", str(v.value))
                                                   for v in node.values):
            found.append(f"{path.name}:{node.lineno}: f-string naming the slack sink")
    return found


def test_core_has_no_slack_message_fields_or_sink_literals() -> None:
    # GIVEN every module of the core but the legacy reader
    files = [p for p in CORE_FILES if p != LEGACY]
    assert len(files) > 20  # the walk found the core
    # WHEN searched for Slack's message fields and "slack" literals
    found = [hit for p in files for hit in slack_words(p)]
    # THEN there are none
    assert found == []


def test_delivery_core_does_not_mention_slack_at_all() -> None:
    # GIVEN the lifecycle, the notify service, the interactions service and their models
    # WHEN read, docstrings and comments included
    mentions = [f"{p.name}:{n}" for p in DELIVERY_CORE
                for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1) if "slack" in line.lower()]
    # THEN no line names Slack
    assert mentions == []


def test_the_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    # GIVEN a module written the old way (the shape the core had before)
    old = tmp_path / "old.py"
    old.write_text('def f(record, alert):\n    key = "slack"\n    return record.slack_ts or alert.thread_ts, f"{key}:slack"\n')
    # WHEN checked
    # THEN every Slack-specific name is reported
    assert len(slack_words(old)) == 4


def test_legacy_reader_is_the_only_place_the_old_fields_are_read() -> None:
    # GIVEN the models
    # WHEN searched for the legacy reader's use
    users = sorted(p.name for p in CORE_FILES if "upgrade_message_fields" in p.read_text(encoding="utf-8"))
    # THEN only the legacy module and the two models that load stored/queued data use it
    assert users == ["legacy.py", "lifecycle.py", "messages.py"]
