"""`gpuwaste justify`: give a finding of a local state file a justification ("Expected" or "Snooze", with a reason).

The same justification the chat's "Expected" / "Snooze" form stores (services/justifications.py): who, when, until
when and why; the lifecycle tells the owner again when it ends.
"""

from __future__ import annotations

import getpass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuwaste.cli_support import DEFAULT_STATE, app, check_state_path, escape_markup, fail, out, parse_positive

if TYPE_CHECKING:
    from gpuwaste.store.sqlite import SqliteFindingStore


class JustificationKind(StrEnum):
    """What the justification does until it ends."""

    expected = "expected"
    snooze = "snooze"


@app.command("justify")
def justify_cmd(
    fingerprint: Annotated[str, typer.Argument(help="The finding's fingerprint (or a unique prefix of 8+ characters).")],
    reason: Annotated[str, typer.Option("--reason", "-r", help="Why the waste is fine for now (1-500 characters).")],
    kind: Annotated[JustificationKind, typer.Option("--kind", help="expected: no reminders nor tickets; snooze: nothing told.")] = JustificationKind.expected,
    for_: Annotated[str, typer.Option("--for", help="How long, e.g. 1d, 7d, 30d; then gpuwaste tells the owner again.")] = "30d",
    by: Annotated[str | None, typer.Option("--by", help="Who gives it (default: the login name).")] = None,
    state: Annotated[Path, typer.Option("--state", help=f"SQLite state file (default {DEFAULT_STATE}).")] = DEFAULT_STATE,
) -> None:
    """Justify a finding for a while: stored with who, when and until when; the owner is told again when it ends."""
    from gpuwaste.services.justifications import justify
    from gpuwaste.store.sqlite import SqliteFindingStore

    check_state_path(state)
    if not state.exists():
        fail(f"--state {escape_markup(str(state))}: no such state file (write one with `gpuwaste run --state`)")
    text = reason.strip()
    if not 1 <= len(text) <= 500:
        fail("--reason: give 1 to 500 characters")
    seconds = parse_positive(for_, "--for")
    store = SqliteFindingStore(state)
    try:
        full = _resolve(store, fingerprint)
        now = datetime.now(UTC)
        who = by or getpass.getuser()
        record = justify(store, full, kind=kind.value, reason=text, by=who, at=now,
                         until=now + timedelta(seconds=seconds), source="cli")
    finally:
        store.close()
    if record is None or record.justification is None:
        fail(f"{escape_markup(fingerprint)}: no such finding in {escape_markup(str(state))}")
    j = record.justification
    out.print(f"{escape_markup(full[:16])}: {j.kind} by {escape_markup(j.by)} until {j.until:%Y-%m-%d %H:%M} UTC: "
              f"{escape_markup(j.reason)}")


def _resolve(store: SqliteFindingStore, fingerprint: str) -> str:
    """The full fingerprint: as given when stored, else the one stored fingerprint it starts (8+ characters)."""
    if store.get(fingerprint) is not None or len(fingerprint) < 8:
        return fingerprint
    matches = [r.fingerprint for r in store.history(since=datetime(1970, 1, 1, tzinfo=UTC), until=datetime.now(UTC) + timedelta(days=1))
               if r.fingerprint.startswith(fingerprint)]
    if len(matches) > 1:
        fail(f"{escape_markup(fingerprint)}: {len(matches)} findings start so; give more characters")
    return matches[0] if matches else fingerprint
