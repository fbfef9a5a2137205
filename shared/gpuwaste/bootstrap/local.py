"""Bootstrap: the local command's composition root (recordings, or live Prometheus + Kubernetes)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path

from gpuwaste.bootstrap.sources import Sources as Sources
from gpuwaste.bootstrap.sources import cluster_state_mode as cluster_state_mode
from gpuwaste.bootstrap.sources import kubernetes_configured as kubernetes_configured
from gpuwaste.bootstrap.sources import live_sources as live_sources
from gpuwaste.bootstrap.sources import recording_sources as recording_sources
from gpuwaste.bootstrap.sources import window_for_history
from gpuwaste.config import GpuWasteConfig
from gpuwaste.detectors.hardware import WrongHardwareSettings
from gpuwaste.detectors.settings import DetectorSettings
from gpuwaste.models.findings import Finding
from gpuwaste.models.messages import (
    AlertAction,
    AlertMessage,
    FindingMessage,
    ScanCompleted,
    ScanRequest,
    SummaryDue,
)
from gpuwaste.ports import FindingStore
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.services.scan import ScanReport, ScanService
from gpuwaste.services.tickets import release_requests
from gpuwaste.store.sqlite import STATE_LOCK_WAIT_S, DeliveryQueue, SqliteFindingStore, state_lock


def demo_recording() -> Path:
    """The bundled demo fleet recording (a directory inside the package)."""
    return Path(str(resources.files("gpuwaste.fleet") / "demo"))


def price_book(config: GpuWasteConfig) -> PriceBook:
    """The bundled price book with the user's overrides applied."""
    return PriceBook.bundled().with_overrides(config.pricing)


#: Layouts of `gpuwaste generate-fleet` whose recordings are scanned with the wrong-hardware look-back shortened
#: to the recorded window (a generated fleet holds 80 minutes, not the week a real verdict needs).
GENERATED_LAYOUTS = ("demo", "scorecard")


def generated_fleet_settings(window_s: int) -> DetectorSettings:
    """Default detector settings, with the wrong-hardware look-back shortened to a generated fleet's window (s)."""
    return DetectorSettings.model_validate({"wrong_hardware": WrongHardwareSettings(lookback_s=window_s)})


def recording_config(config: GpuWasteConfig, sources: Sources, *, config_given: bool) -> tuple[GpuWasteConfig, str | None]:
    """The configuration to scan a recording with, and a note for the user when it differs from `config`.

    A generated fleet (its `recording.json` names a demo or scorecard layout) holds about an hour of telemetry,
    so its wrong-hardware look-back is the recorded window — unless the configuration sets
    `detectors.wrong_hardware.lookback_s` itself. A configuration that sets other things only (delivery, pricing,
    other detectors) keeps that look-back and its other settings: it never changes a verdict it does not name.
    `config_given` is kept for the callers; whether a file was given no longer matters, only what it sets.
    """
    del config_given
    rec = sources.recording
    if rec is None or rec.meta.generator.get("layout") not in GENERATED_LAYOUTS or not rec.meta.window_s:
        return config, None
    detectors = config.detectors
    wrong_hw = detectors.wrong_hardware  # type: ignore[attr-defined]
    if "wrong_hardware" in detectors.model_fields_set and "lookback_s" in wrong_hw.model_fields_set:
        return config, None
    window_s = rec.meta.window_s
    shortened = wrong_hw.model_copy(update={"lookback_s": window_s})
    cfg = config.model_copy(update={"detectors": detectors.model_copy(update={"wrong_hardware": shortened})})
    return cfg, (f"generated fleet: the wrong-hardware look-back is the recorded {window_s // 60} min "
                 "(a real cluster needs 7 days; detectors.wrong_hardware.lookback_s in --config overrides)")


def scan_service(sources: Sources, config: GpuWasteConfig, *, window_s: int | None = None, priced: bool = True,
                 progress: Callable[[str], None] | None = None) -> ScanService:
    """A scan service over the given sources."""
    window_for_history(sources, window_s or config.scan.window_s)
    return ScanService(
        cluster_source=sources.cluster,
        telemetry_source=sources.telemetry,
        settings=config.detectors,
        window=timedelta(seconds=window_s or config.scan.window_s),
        price_book=price_book(config) if priced else None,
        progress=progress,
    )


# -- the whole chain in one process (gpuwaste run / gpuwaste demo) -----------------------------------------
DEFAULT_STATE = Path(".gpuwaste/state.db")


#: A delivery stage: (messages, store, scan time, messages tried before) → the messages that failed, with why.
#: Everything else counts as accepted by the sink and is marked done in the state's outbox.
DeliverStage = Callable[[Sequence[AlertMessage], FindingStore, datetime, Sequence[AlertMessage]],
                        Sequence[tuple[AlertMessage, BaseException]] | None]


@dataclass
class ChainResult:
    """What a local chain run did.

    Attributes:
        reports: one scan report per scan, in order.
        alerts: every alert the lifecycle decided in this run, in order.
        tickets: ticket requests decided in this run.
        dead_letters: (body, reason) of messages a stage could not parse (none: the local stages hand each other
            validated messages; kept for the callers that report it).
        delivered_alerts / delivered_tickets: outbox messages the sinks accepted in this run (earlier runs' leftovers
            included).
        failed: (message, reason) of deliveries that failed in this run (they stay pending).
        pending_alerts / pending_tickets / pending_summaries: what the state's outbox still holds after the run
            (not delivered: an output mode that does not deliver, or a failure); the next run delivers it.
    """

    reports: list[ScanReport]
    alerts: list[AlertMessage]
    tickets: list[AlertMessage]
    dead_letters: list[tuple[str, str]]
    delivered_alerts: int = 0
    delivered_tickets: int = 0
    failed: list[tuple[AlertMessage, str]] = field(default_factory=list)
    pending_alerts: int = 0
    pending_tickets: int = 0
    pending_summaries: int = 0

    @property
    def new_alerts(self) -> int:
        """Alerts with action NEW."""
        return sum(1 for a in self.alerts if a.action is AlertAction.NEW)


def _alert_id(alert: AlertMessage) -> tuple[str, str, str]:
    return (alert.fingerprint, alert.action.value, alert.scan_id)


def deliver_outbox(queue: DeliveryQueue, stage: DeliverStage, store: FindingStore, at: datetime
                   ) -> tuple[int, list[tuple[AlertMessage, str]]]:
    """Hand the outbox's pending messages to `stage`; mark done what the sink accepted, keep the rest pending.

    Each message's attempt is counted before the sink is called, so a later run knows the sink may already have
    it (the notifier then looks for the post before posting again).

    Returns:
        (messages delivered, [(message, reason)] of failures).
    """
    pending = queue.pending()
    if not pending:
        return 0, []
    alerts = [queue.message(p.body, AlertMessage) for p in pending]  # this run's own: not parsed again
    queue.attempt([p.id for p in pending])
    again = [a for a, p in zip(alerts, pending, strict=True) if p.attempts > 0]
    failures = list(stage(alerts, store, at, again) or [])
    failed = {_alert_id(a): exc for a, exc in failures}
    done = [p.id for a, p in zip(alerts, pending, strict=True) if _alert_id(a) not in failed]
    queue.done(done)
    out: list[tuple[AlertMessage, str]] = []
    for a, p in zip(alerts, pending, strict=True):
        exc = failed.get(_alert_id(a))
        if exc is not None:
            queue.failed(p.id, f"{type(exc).__name__}: {exc}")
            out.append((a, str(exc)))
    return len(done), out


def run_chain(
    sources: Sources,
    config: GpuWasteConfig,
    *,
    store: FindingStore | None = None,
    state_path: Path | str = DEFAULT_STATE,
    cluster: str,
    times: Sequence[datetime],
    window_s: int | None = None,
    on_alert: Callable[[AlertMessage], None] | None = None,
    on_scan: Callable[[ScanReport], None] | None = None,
    on_told: Callable[[Sequence[AlertMessage], datetime], None] | None = None,
    deliver: DeliverStage | None = None,
    file_tickets: DeliverStage | None = None,
    progress: Callable[[str], None] | None = None,
    lock_wait_s: float = STATE_LOCK_WAIT_S,
    on_lock_wait: Callable[[str], None] | None = None,
) -> ChainResult:
    """dispatch → scan → price → dedupe → alerts in one process: in-memory queues handing the same message envelopes
    as SQS carries (as objects, no JSON round trip in one process) between the scan stages, a durable outbox in the SQLite state for what must be delivered
    (alerts, ticket requests, summaries), and the same services as the Lambda functions.

    One scan per entry of `times` (evaluation times, oldest first). Scan ids are derived from cluster and
    time, so running the chain again on the same input finds every scan already applied: no new alerts.
    After each scan, `on_told(alerts, scan_time)` shows what the lifecycle decided, then `deliver(...)` plays
    notify_slack over every pending alert of the outbox (this run's and what earlier runs left), and
    `file_tickets(...)` plays create_tickets over the pending ticket requests. A message is marked done only when
    the stage reports it accepted; without a stage (an output mode that does not deliver) it stays pending, and
    the next run delivers it. A crash at any point leaves the state so that a rerun delivers each message once:
    decisions still in a record's outbox are re-queued first (`LifecycleService.recover`).

    One run at a time per state file: the run holds `store.sqlite.state_lock` on `state_path` (when it opens the
    store itself) from before the first read to after the last delivery; a second run on the same state waits for
    it up to `lock_wait_s` seconds (`on_lock_wait` is told), so it sees what the first delivered and never posts it
    again.

    Raises:
        SourceUnavailableError, SourceAuthError, InputFormatError: from the sources.
        StateInUseError: another run held the state file for more than `lock_wait_s` seconds.
        StoreError: the SQLite file cannot be used.
    """
    owned = store is None
    with state_lock(state_path, wait_s=lock_wait_s, on_wait=on_lock_wait) if owned else contextlib.nullcontext():
        return _run_chain(sources, config, store=store, state_path=state_path, cluster=cluster, times=times,
                          window_s=window_s, on_alert=on_alert, on_scan=on_scan, on_told=on_told, deliver=deliver,
                          file_tickets=file_tickets, progress=progress)


def _run_chain(
    sources: Sources,
    config: GpuWasteConfig,
    *,
    store: FindingStore | None,
    state_path: Path | str,
    cluster: str,
    times: Sequence[datetime],
    window_s: int | None,
    on_alert: Callable[[AlertMessage], None] | None,
    on_scan: Callable[[ScanReport], None] | None,
    on_told: Callable[[Sequence[AlertMessage], datetime], None] | None,
    deliver: DeliverStage | None,
    file_tickets: DeliverStage | None,
    progress: Callable[[str], None] | None,
) -> ChainResult:
    from gpuwaste.bootstrap.pipeline import SystemClock
    from gpuwaste.queue.memory import MemoryQueue
    from gpuwaste.services.dispatch import DispatchService
    from gpuwaste.services.lifecycle import LifecycleService
    from gpuwaste.services.price import PriceService

    # in one process the stages hand each other the messages themselves (frozen models): no JSON round trip per hop
    # (the Lambda functions' JSON hops are the same envelopes, tested on moto); what must survive a crash is in the
    # state's durable outbox
    requests_q = MemoryQueue("scan-requests")
    findings_q, priced_q = MemoryQueue("findings", objects=True), MemoryQueue("priced", objects=True)
    owned = store is None
    the_store = store if store is not None else SqliteFindingStore(state_path)
    durable = the_store if isinstance(the_store, SqliteFindingStore) else SqliteFindingStore(":memory:")
    alerts_q, tickets_q = durable.delivery_queue("alerts"), durable.delivery_queue("tickets")
    dispatch = DispatchService(clusters=[cluster], queue=requests_q)
    window_for_history(sources, window_s or config.scan.window_s)
    scanner = ScanService(
        cluster_source=sources.cluster,
        telemetry_source=sources.telemetry,
        settings=config.detectors,
        window=timedelta(seconds=window_s or config.scan.window_s),
        queue=findings_q,
        progress=progress,
        ledger_price_book=price_book(config),
        delivery=config.delivery,
    )
    pricer = PriceService(price_book=price_book(config), queue=priced_q)
    # the delivery queues live in the state file and commit with the decisions (one transaction per scan): no record
    # can hold a decision whose messages are not queued, so the records need no outbox of their own
    lifecycle = LifecycleService(store=the_store, alerts=alerts_q, tickets=tickets_q, settings=config.lifecycle,
                                 clock=SystemClock(), delivery=config.delivery, outbox=durable is not the_store)
    result = ChainResult(reports=[], alerts=[], tickets=[], dead_letters=[])
    try:
        if isinstance(the_store, SqliteFindingStore):
            lifecycle.recover(the_store.with_outbox())
        alerts_q.sent.clear()
        tickets_q.sent.clear()
        for at in times:
            dispatch.dispatch(at)
            reports: dict[str, ScanReport] = {}
            for body in requests_q.drain():
                request = ScanRequest.model_validate_json(body)
                report = scanner.scan(at=request.scheduled_time, scan_id=request.scan_id)
                reports[report.scan_id] = report
            priced: dict[str, list[Finding]] = {}
            for message in findings_q.drain_messages():
                if isinstance(message, ScanCompleted):
                    pricer.forward_completed(message)
                elif isinstance(message, FindingMessage):
                    priced.setdefault(message.scan_id, []).append(pricer.price_and_forward(message).finding)
            for scan_id, report in reports.items():
                # the report shows what the chain priced (the scan itself leaves pricing to its own stage)
                report.findings = sorted(priced.get(scan_id, []), key=lambda f: (
                    -(f.usd_per_day or 0), f.kind.value, f.subject.namespace or "", f.subject.pod or f.subject.node or ""))
                result.reports.append(report)
                if on_scan is not None:
                    on_scan(report)
            # one transaction per scan: the decisions, their outboxes and the delivery queue entries commit together
            with (the_store.transaction() if isinstance(the_store, SqliteFindingStore) else contextlib.nullcontext()):
                messages = priced_q.drain_messages()
                # the scan is one LifecycleBatch, as a dedupe_findings invocation is (`bootstrap.dedupe.process`)
                batch = lifecycle.begin([m.finding.fingerprint for m in messages if isinstance(m, FindingMessage)])
                for message in messages:
                    if isinstance(message, FindingMessage | ScanCompleted):
                        lifecycle.handle(message, batch)
                batch.close()
            told = [alerts_q.message(body, AlertMessage) for body in alerts_q.sent]
            alerts_q.sent.clear()
            result.alerts += told
            if on_alert is not None:
                for alert in told:
                    on_alert(alert)
            if on_told is not None:
                on_told(told, at)
            if deliver is not None:
                n, failed = deliver_outbox(alerts_q, deliver, the_store, at)
                result.delivered_alerts += n
                result.failed += failed
            requested = [tickets_q.message(b, AlertMessage) for b in tickets_q.sent]
            tickets_q.sent.clear()
            result.tickets += requested
            if file_tickets is not None:
                n, failed = deliver_outbox(tickets_q, file_tickets, the_store, at)
                result.delivered_tickets += n
                result.failed += failed
        durable.delivery_queue("summary").send([SummaryDue(cluster=cluster, until=times[-1])] if times else [])
        keep_until = SystemClock().now() - timedelta(days=config.lifecycle.retention_days)
        for queue in (alerts_q, tickets_q, durable.delivery_queue("summary")):
            queue.prune(done_before=keep_until)
        result.pending_alerts = alerts_q.count_pending()
        result.pending_tickets = tickets_q.count_pending()
        result.pending_summaries = durable.delivery_queue("summary").count_pending()
    finally:
        if owned and isinstance(the_store, SqliteFindingStore):
            the_store.close()
    return result


def release_ticket_requests(requests: Sequence[AlertMessage], store: FindingStore) -> int:
    """Forget that tickets were requested for these ESCALATE requests (they were not filed: `run --no-tickets`), so
    the next run that sees the finding requests its ticket again instead of losing it.

    The lifecycle marks a record `ticket_requested_at` when it puts the request on the tickets queue; a local run
    that skips create_tickets clears that mark with a conditional write. WORSE/RESOLVED requests of findings that
    already have a ticket carry no mark and are only reported.

    Returns:
        How many records were released.
    """
    return release_requests(requests, store)


def replay_times(end: datetime, *, scans: int, interval: timedelta) -> list[datetime]:
    """`scans` evaluation times `interval` apart, the last at `end` (successive scans over one recording)."""
    return [end - interval * (scans - 1 - i) for i in range(scans)]
