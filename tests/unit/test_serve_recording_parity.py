"""`gpuwaste serve -r DIR` stores the same findings as `gpuwaste run -r DIR` on the same recording: a generated
fleet's wrong-hardware look-back is its recorded window in both (a user comparing the API with `run` or `demo`
sees one set of findings and one total)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.bootstrap import local
from gpuwaste.cli import app
from gpuwaste.store.sqlite import SqliteFindingStore

DEMO = str(local.demo_recording())


def _stored(state: Path) -> dict[str, tuple[str, str]]:
    store = SqliteFindingStore(state)
    try:
        records = store.history(since=datetime(1970, 1, 1, tzinfo=UTC), until=datetime(9999, 1, 1, tzinfo=UTC))
    finally:
        store.close()
    return {r.fingerprint: (r.kind, str(r.usd_per_day)) for r in records}


@pytest.mark.loopback  # serve binds 127.0.0.1:0 for its one scan
def test_serve_over_a_recording_stores_what_run_stores(tmp_path: Path) -> None:
    # GIVEN the demo recording, scanned once by `run` and once by `serve` (one scan, any free port)
    run_state, serve_state = tmp_path / "run.db", tmp_path / "serve.db"
    ran = CliRunner().invoke(app, ["run", "-r", DEMO, "-q", "--no-summary", "--state", str(run_state)])
    served = CliRunner().invoke(app, ["serve", "-r", DEMO, "--max-scans", "1", "--port", "0", "--interval", "1s",
                                      "--state", str(serve_state)])
    assert ran.exit_code == 0, ran.output
    assert served.exit_code == 0, served.output
    # WHEN their state files are read
    by_run, by_serve = _stored(run_state), _stored(serve_state)
    # THEN the same findings, of the same kinds, at the same USD/day (the demo's wrong-hardware finding among them)
    assert by_run, "run stored findings"
    assert by_serve == by_run
    assert "wrong_hardware" in {kind for kind, _ in by_serve.values()}
