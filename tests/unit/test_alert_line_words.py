"""Issue 22: `run`'s alert lines say a $0 sizing note as the Slack digest does ("sizing note, no GPU cost"), never
"$0.00/day · new waste" beside a digest that says it costs nothing."""

from __future__ import annotations

from typer.testing import CliRunner

from gpuwaste.cli import app


def test_demo_alert_line_of_a_sizing_note_matches_the_digest() -> None:
    # GIVEN the demo (chat-api-0: KV-cache pressure, no GPU share, $0) WHEN run
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.output.splitlines() if ln.startswith("[NEW]") and "chat-api-0" in ln)
    # THEN its alert line carries the digest's words and is not called waste at $0.00/day
    assert "sizing note, no GPU cost" in line, line
    assert "$0.00/day" not in line and "new waste" not in line, line
    # AND priced findings keep their money and reason
    assert any(ln.startswith("[NEW]") and "$660.48/day · new waste" in ln for ln in result.output.splitlines())
