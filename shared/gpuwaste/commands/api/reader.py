"""`FindingsReader`: the read functions `serve`'s `/api/v1` and `gpuwaste mcp` share.

They read the SQLite lifecycle store, again when the file changes.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from gpuwaste.commands.api.documents import (
    _ALL_TIME,
    DEFAULT_LIMIT,
    MAX_LIMIT,
    ExplainDocument,
    FindingsPage,
    FindingView,
    ReadError,
    ShowbackDocument,
    TopOffenders,
    parse_kind_filter,
    parse_period,
    parse_since,
)
from gpuwaste.models.findings import Finding
from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.models.notices import DailySummary

if TYPE_CHECKING:
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.services.showback import ScanLedger
    from gpuwaste.services.summary import SummaryService
    from gpuwaste.store.sqlite import SqliteFindingStore


class FindingsReader:
    """The read functions of the API and the MCP server, over one SQLite state file (opened per read, closed after;
    its records and summaries are kept until the file or its WAL changes, so the requests between two scans do not
    parse the whole history again). Thread-safe: `serve` answers requests on several threads.

    Args:
        state: the state file `gpuwaste serve` / `run` write (`serve.state`).
        cfg: the configuration (routing decides teams, the detectors' settings are the thresholds).
        now: the clock for relative `since` values.

    Raises (every method):
        ReadError: bad input (400) or an unknown / ambiguous ID (404 / 400).
        StoreError: the state file cannot be read.
    """

    def __init__(self, state: Path, cfg: GpuWasteConfig, *, now: Callable[[], datetime] | None = None) -> None:
        self.state, self.cfg = state, cfg
        self.now = now or (lambda: datetime.now(UTC))
        self._lock = threading.Lock()
        self._cached: tuple[object, list[FindingRecord]] = (None, [])
        self._summaries: dict[tuple[object, timedelta], DailySummary] = {}
        self._scan: tuple[str, ScanLedger, tuple[Finding, ...]] | None = None

    def observe_scan(self, cluster: str, ledger: ScanLedger | None, findings: Iterable[Finding]) -> None:
        """Keep the ledger and findings of the scan `serve` just ran (what `showback` groups); None: no ledger."""
        with self._lock:
            self._scan = None if ledger is None else (cluster, ledger, tuple(findings))

    def showback(self, by: Iterable[str] = ("team",)) -> ShowbackDocument:
        """The showback of the last scan's window grouped by each of `by` (team, namespace, label:KEY with KEY
        allow-listed, cluster, gpu_model, node, mechanism): the same document as `gpuwaste showback --output json`.

        Raises:
            ReadError: 400 for an unknown or not allow-listed grouping; 409 before this process ran a scan (the state
                file keeps findings, not the share ledger).
        """
        from gpuwaste.commands.showback import grouping_problem, showback_document

        groupings = list(dict.fromkeys(by)) or ["team"]
        if len(groupings) > 8:
            raise ReadError(f"by: at most 8 groupings, got {len(groupings)}")
        for b in groupings:
            problem = grouping_problem(b)
            if problem is not None:
                raise ReadError(f"by={b!r}: {problem}")
        with self._lock:
            scan = self._scan
        if scan is None:
            raise ReadError(
                "no scan ledger yet: showback groups the share ledger of a scan, which the state file does not keep; "
                "`gpuwaste serve` answers after its first scan (or run `gpuwaste showback`)",
                status=409,
            )
        cluster, ledger, findings = scan
        doc = showback_document(cluster, ledger, findings, groupings, self.cfg.delivery)
        return ShowbackDocument.model_validate(doc)

    def _signature(self) -> tuple[tuple[int, int, int] | None, ...]:
        """What identifies the state file's content: (inode, mtime ns, size) of the file and of its WAL."""
        parts: list[tuple[int, int, int] | None] = []
        for path in (self.state, self.state.with_name(self.state.name + "-wal")):
            try:
                st = path.stat()
            except FileNotFoundError:
                parts.append(None)
                continue
            parts.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(parts)

    def _records(self) -> list[FindingRecord]:
        """Every record of the store, read again only when the file or its WAL changed since the last read (the
        signature is taken before reading, so a write during the read makes the next call read again)."""
        from gpuwaste.store.sqlite import SqliteFindingStore

        if not self.state.is_file():
            return []  # no scan has written the store yet
        signature = self._signature()
        with self._lock:
            if signature == self._cached[0]:
                return self._cached[1]
        store = SqliteFindingStore(self.state)
        try:
            records = store.history(since=_ALL_TIME[0], until=_ALL_TIME[1])
        finally:
            store.close()
        with self._lock:
            self._cached = (signature, records)
            self._summaries.clear()
        return records

    def _summary_service(self, store: SqliteFindingStore | None = None) -> SummaryService:
        """The summary service (its `team_of` routes teams; without `store` it has one that is never opened)."""
        from gpuwaste.services.summary import SummaryService
        from gpuwaste.store.sqlite import SqliteFindingStore

        return SummaryService(store=store or SqliteFindingStore(":memory:"), settings=self.cfg.delivery, now=self.now)

    def view(self, record: FindingRecord, team_of: Callable[[FindingRecord], str]) -> FindingView:
        """The record as the API shows it."""
        from gpuwaste.services.notify import finding_from_record

        finding = finding_from_record(record)
        return FindingView(
            fingerprint=record.fingerprint,
            cluster=record.cluster,
            namespace=record.namespace,
            workload=record.workload,
            team=team_of(record),
            kind=record.kind,
            detector=record.detector,
            state=record.state,
            title=finding.title if finding else "",
            confidence=finding.confidence.value if finding else "",
            first_seen=record.first_seen,
            last_seen=record.last_seen,
            resolved_at=record.resolved_at,
            usd_per_day=record.usd_per_day,
            peak_usd_per_day=record.peak_usd_per_day,
            cumulative_usd=record.cumulative_usd,
            saved_usd_per_day=record.saved_usd_per_day,
            missed_scans=record.missed_scans,
            ticket_key=record.ticket_key,
            snoozed_until=record.snoozed_until,
            acknowledged=record.acknowledged,
        )

    def list_findings(
        self,
        *,
        cluster: str | None = None,
        namespace: str | None = None,
        team: str | None = None,
        kind: str | None = None,
        state: str | None = None,
        since: str | None = None,
        limit: int = DEFAULT_LIMIT,
        offset: int = 0,
    ) -> FindingsPage:
        """The findings matching every filter given (exact matches; `since`: activity — last sighting or resolution —
        at or after it), newest activity first, `limit` (1–`MAX_LIMIT`) from `offset`."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ReadError(f"limit={limit}: must be 1 to {MAX_LIMIT}")
        if offset < 0:
            raise ReadError(f"offset={offset}: must be 0 or more")
        kind = parse_kind_filter(kind)
        if state is not None and state not in {s.value for s in FindingState}:
            raise ReadError(f"state={state!r}: one of open, resolved")
        start = parse_since(since, now=self.now())
        service = self._summary_service()
        chosen: list[tuple[datetime, FindingRecord]] = []
        for r in self._records():
            activity = max(r.last_seen, r.resolved_at or r.last_seen)
            if (
                (cluster is not None and r.cluster != cluster)
                or (namespace is not None and r.namespace != namespace)
                or (kind is not None and r.kind != kind)
                or (state is not None and r.state.value != state)
                or (start is not None and activity < start)
                or (team is not None and service.team_of(r) != team)
            ):
                continue
            chosen.append((activity, r))
        chosen.sort(key=lambda ar: (-ar[0].timestamp(), ar[1].fingerprint))
        page = [self.view(r, service.team_of) for _, r in chosen[offset : offset + limit]]
        more = offset + limit < len(chosen)
        return FindingsPage(
            items=tuple(page),
            total=len(chosen),
            offset=offset,
            limit=limit,
            next_offset=offset + limit if more else None,
        )

    def explain(self, finding_id: str) -> ExplainDocument:
        """The explain document of the finding whose fingerprint starts with `finding_id` (4+ hex characters).

        Raises:
            ReadError: 400 for a malformed or ambiguous ID, 404 when no finding has it.
        """
        from gpuwaste.commands.explain import explain_text
        from gpuwaste.services.notify import finding_from_record

        p = finding_id.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{4,64}", p):
            raise ReadError(f"{finding_id!r}: a finding ID is 4 to 64 hex characters (the start of its fingerprint)")
        matches = [r for r in self._records() if r.fingerprint.startswith(p)]
        if not matches:
            raise ReadError(f"no finding with ID {finding_id!r}", status=404)
        if len({r.fingerprint for r in matches}) > 1:
            raise ReadError(f"{finding_id!r} matches {len(matches)} findings; give more characters")
        record = matches[0]
        finding = finding_from_record(record)
        settings = self.cfg.detectors.by_name().get(record.detector)
        text = explain_text(finding, settings) if finding is not None else ""
        return ExplainDocument(
            record=self.view(record, self._summary_service().team_of),
            finding=finding,
            thresholds=settings.model_dump(mode="json") if settings is not None else {},
            text=text,
        )

    def summary(self, period: str | None = None) -> DailySummary:
        """The waste summary of the `period` (default 1d) ending at the last scan (the same as `gpuwaste summary
        --since PERIOD`): totals by team, namespace, kind and cluster, trend, top offenders, savings."""
        span = parse_period(period)
        if not self.state.is_file():
            from gpuwaste.services.summary import summarize

            end = self.now()
            return summarize([], since=end - span, until=end + timedelta(seconds=1), team_of=lambda _: "unassigned")
        from gpuwaste.store.sqlite import SqliteFindingStore

        key = (self._signature(), span)
        with self._lock:
            cached = self._summaries.get(key)
        if cached is not None:
            return cached
        store = SqliteFindingStore(self.state)
        try:
            service = self._summary_service(store)
            end = service.last_activity() or self.now()
            summary = service.build(since=end - span, until=end + timedelta(seconds=1))
        finally:
            store.close()
        with self._lock:
            if len(self._summaries) >= 16:
                self._summaries.clear()
            self._summaries[key] = summary
        return summary

    def top_offenders(self, period: str | None = None, limit: int = 10) -> TopOffenders:
        """The costliest findings of the period (USD wasted in it), at most `limit` (1–50)."""
        if not 1 <= limit <= 50:
            raise ReadError(f"limit={limit}: must be 1 to 50")
        s = self.summary(period)
        return TopOffenders(since=s.since, until=s.until, items=s.top[:limit])
