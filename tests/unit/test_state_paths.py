"""A wrong --state path is one clear line, never a traceback: a directory, or a file that is not an SQLite database,
for every command that reads or writes a state file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app

DEMO = str(local.demo_recording())

COMMANDS = {
    "run": ["run", "-r", DEMO, "-q", "--no-summary", "--state"],
    "summary": ["summary", "--state"],
    "explain": ["explain", "02dd91", "--state"],
    "serve": ["serve", "-r", DEMO, "--max-scans", "1", "--state"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("wrong", ["directory", "text file"])
def test_a_wrong_state_path_is_one_clear_line(command: str, wrong: str, tmp_path: Path) -> None:
    # GIVEN a directory, or a file that is not SQLite, where the state file should be
    path = tmp_path / "state"
    if wrong == "directory":
        path.mkdir()
    else:
        path.write_text("these are my notes, not a database\n")
    # WHEN the command is given it as --state
    result = CliRunner().invoke(app, [*COMMANDS[command], str(path)], env={"COLUMNS": "200"})
    # THEN it exits 2 with one line naming the option, the path and what is wrong — no traceback
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0].startswith(f"error: --state {path}: ")
    assert ("is a directory" if wrong == "directory" else "not an SQLite database") in lines[0]
    # AND the file given is left as it was
    assert path.is_dir() if wrong == "directory" else path.read_text().startswith("these are my notes")


def test_demo_refuses_a_directory_as_its_state_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "-q", "--state", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "is a directory, not a state file" in result.output, result.output
