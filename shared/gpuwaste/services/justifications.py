"""Service: justifications — an owner's reason to leave a finding be ("Expected" / "Snooze"), who, when, until when.

A justification is stored on the finding's lifecycle record (`FindingRecord.justification`) with one conditional
write, so it survives redelivery and restarts in either store; "Expected" also sets the acknowledgement (no reminders,
no tickets) and "Snooze" the snooze time (nothing told). The lifecycle ends it at the first sighting at or after its
`until` (services/lifecycle.py: REMINDER "justification ended", then the ticket rules). The daily summary lists the
active ones by team with the USD/day they cover (`active_by_team`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Literal

from gpuwaste.errors import StoreError
from gpuwaste.models.lifecycle import FindingRecord, FindingState, Justification
from gpuwaste.models.notices import JustifiedTotal
from gpuwaste.ports import FindingStore

logger = logging.getLogger(__name__)

EXPECTED = "expected"
#: When "Expected" is given without a duration: it is asked again after this long.
DEFAULT_EXPECTED_FOR = timedelta(days=30)
NO_REASON = "(no reason given)"


def justify(store: FindingStore, fingerprint: str, *, kind: Literal["expected", "snooze"], reason: str, by: str,
            at: datetime, until: datetime, source: str = "chat") -> FindingRecord | None:
    """Store a justification on the finding's record (conditional write, re-read on a lost race).

    Returns:
        The updated record; None when the store has no such finding.

    Raises:
        ValueError: `until` is not after `at`, or the reason is empty or longer than 500 characters.
        StoreError: the record kept changing (5 lost races), or the store failed transiently.
    """
    if until <= at:
        raise ValueError(f"a justification must end after it starts ({until:%Y-%m-%d %H:%M} ≤ {at:%Y-%m-%d %H:%M})")
    justification = Justification(kind=kind, reason=reason.strip() or NO_REASON, by=by, at=at, until=until,
                                  source=source)
    for _ in range(5):
        record = store.get(fingerprint)
        if record is None:
            return None
        changes: dict[str, object] = {"justification": justification, "version": record.version + 1}
        if kind == EXPECTED:
            changes["acknowledged"] = f"{EXPECTED}:{by.strip('<@>')}"
        else:
            changes["snoozed_until"] = until
        updated = record.model_copy(update=changes)
        if store.update(updated, expected_version=record.version):
            logger.info("finding justified", extra={"fingerprint": fingerprint[:16], "kind": kind,
                                                    "until": until.isoformat(), "source": source})
            return updated
    raise StoreError(f"finding {fingerprint[:16]}: lifecycle record kept changing")


def active_by_team(records: Iterable[FindingRecord], *, at: datetime,
                   team_of: Callable[[FindingRecord], str]) -> tuple[JustifiedTotal, ...]:
    """Open findings with a justification still active at `at`, per team: how many, the USD/day they cover (the
    records' latest `usd_per_day`; unpriced count as 0) and the soonest end; most USD/day first."""
    usd: dict[str, Decimal] = defaultdict(Decimal)
    count: dict[str, int] = defaultdict(int)
    ends: dict[str, datetime] = {}
    for r in records:
        j = r.justification
        if r.state is not FindingState.OPEN or j is None or not j.active(at):
            continue
        team = team_of(r)
        usd[team] += r.usd_per_day or Decimal(0)
        count[team] += 1
        ends[team] = min(ends.get(team, j.until), j.until)
    totals = [JustifiedTotal(team=t, findings=count[t], usd_per_day=usd[t], next_end=ends[t]) for t in count]
    return tuple(sorted(totals, key=lambda g: (-g.usd_per_day, g.team)))


__all__ = ["DEFAULT_EXPECTED_FOR", "NO_REASON", "active_by_team", "justify"]
