"""The command line's shared vocabulary: `summary` and `run` share the state file's default, and doctor's --help
documents its exit codes and the JSON alias."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.cli_support import DEFAULT_STATE

DEMO = local.demo_recording()


def invoke(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args), env=env)


def test_summary_and_run_share_the_state_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a working directory where `run` wrote its default state file
    monkeypatch.chdir(tmp_path)
    ran = invoke("run", "-r", str(DEMO), "-q", "--no-summary", "--no-tickets")
    assert ran.exit_code == 0, ran.output
    # WHEN `summary` runs without --state
    result = invoke("summary", "-o", "json")
    # THEN it reads the same file
    assert (tmp_path / DEFAULT_STATE).exists()
    assert result.exit_code == 0, result.output and json.loads(result.stdout)["open_findings"] == 21


def test_doctor_help_documents_exit_codes_and_json_alias() -> None:
    # GIVEN doctor's help
    text = " ".join(invoke("doctor", "--help", env={"COLUMNS": "200"}).output.replace("│", " ").split())
    # THEN the exit codes are documented and -o is the output option (--json stays as a hidden alias)
    assert "0 ok; 1 a needed signal was never exported" in text and "4 needed signals exist but are stale" in text
    assert "--output" in text and "--json" not in text


@pytest.mark.parametrize("command", ["scan", "run", "demo", "doctor", "record", "serve", "summary", "explain", "replay"])
def test_help_at_80_columns_shows_every_env_var_whole_and_no_internal_names(command: str) -> None:
    # GIVEN a command's --help on an 80-column terminal, and the env vars its options read
    import typer.main

    params = typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]
    envvars = {p.envvar for p in params if isinstance(p.envvar, str) and getattr(p, "show_envvar", False)}
    text = invoke(command, "--help", env={"COLUMNS": "80"}).output
    # WHEN read THEN nothing is cut off, every env var is printed whole, and no Lambda function name is shown
    assert "…" not in text
    assert {e for e in envvars if f"{e}]" not in text} == set()
    assert "notify_slack" not in text and "create_tickets" not in text
