"""Bootstrap: the local command's composition root (recordings, or live Prometheus + Kubernetes)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Literal

from gpuwaste.errors import ConfigError
from gpuwaste.models.findings import Finding
from gpuwaste.models.messages import (
    AlertAction,
    AlertMessage,
    FindingMessage,
    ScanCompleted,
    ScanRequest,
    SummaryDue,
)
from gpuwaste.ports import ClusterStateSource, FindingStore, GpuTelemetrySource
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.services.scan import ScanReport, ScanService
from gpuwaste.settings import ClusterConfig, GpuWasteConfig
from gpuwaste.sources.recording import RecordingClusterSource, RecordingTelemetrySource
from gpuwaste.store.sqlite import DeliveryQueue, SqliteFindingStore


def demo_recording() -> Path:
    """The bundled demo fleet recording (a directory inside the package)."""
    return Path(str(resources.files("gpuwaste.fleet") / "demo"))


def price_book(config: GpuWasteConfig) -> PriceBook:
    """The bundled price book with the user's overrides applied."""
    return PriceBook.bundled().with_overrides(config.pricing)


@dataclass
class Sources:
    """The two input ports of a scan, and what the scan should be evaluated at by default."""

    cluster: ClusterStateSource
    telemetry: GpuTelemetrySource
    recording: RecordingTelemetrySource | None = None


def recording_sources(
    path: Path,
    config: GpuWasteConfig,
    *,
    cluster_file: Path | None = None,
    fmt: Literal["auto", "text", "openmetrics"] | None = None,
    cluster_name: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Sources:
    """Sources over a recording directory or file (+ an optional separate kubectl JSON file).

    The labels and read settings come from the configured cluster named `cluster_name` (else the first).

    Raises:
        ConfigError: `cluster_name` is not one of the configured clusters.
    """
    if config.clusters:
        cc = config.cluster(cluster_name) if cluster_name else config.clusters[0]
    else:
        cc = ClusterConfig(name=cluster_name or "recording")
    tel = RecordingTelemetrySource(path, cluster=cluster_name, fmt=fmt, labels=cc.labels, progress=progress,
                                   scrape_interval_s=None if not config.clusters else config.scan.scrape_interval_s)
    cl: ClusterStateSource = RecordingClusterSource(cluster_file or path, cluster=cluster_name or tel.cluster, settings=cc.read)
    if cl.cluster_file is None:  # type: ignore[attr-defined]  # no cluster.json: the KSM series in the recording, if any
        from gpuwaste.sources.ksm import KsmRecordingSource

        ksm = KsmRecordingSource(path, cluster=cluster_name or tel.cluster, settings=cc.read,
                                 window=timedelta(seconds=tel.meta.window_s or config.scan.window_s))
        if ksm.has_ksm():
            cl = ksm
    return Sources(cluster=cl, telemetry=tel, recording=tel)


#: Layouts of `gpuwaste generate-fleet` whose recordings are scanned with the wrong-hardware look-back shortened
#: to the recorded window (a generated fleet holds 80 minutes, not the week a real verdict needs).
GENERATED_LAYOUTS = ("demo", "scorecard")


def recording_config(config: GpuWasteConfig, sources: Sources, *, config_given: bool) -> tuple[GpuWasteConfig, str | None]:
    """The configuration to scan a recording with, and a note for the user when it differs from `config`.

    A generated fleet (its `recording.json` names a demo or scorecard layout) holds about an hour of telemetry,
    so its wrong-hardware look-back is the recorded window; a configuration file given by the user wins.
    """
    rec = sources.recording
    if rec is None or config_given or rec.meta.generator.get("layout") not in GENERATED_LAYOUTS or not rec.meta.window_s:
        return config, None
    from gpuwaste.fleet.scorecard import scorecard_settings

    window_s = rec.meta.window_s
    cfg = config.model_copy(update={"detectors": scorecard_settings(window_s)})
    return cfg, (f"generated fleet: the wrong-hardware look-back is the recorded {window_s // 60} min "
                 "(a real cluster needs 7 days; --config overrides)")


def kubernetes_configured(cluster: ClusterConfig) -> bool:
    """Whether Kubernetes API access is set up for `cluster`: "eks" mode, an in-cluster service account, or a
    kubeconfig file that exists (the configured one, else $KUBECONFIG, else ~/.kube/config)."""
    k = cluster.kubernetes
    if k.mode == "eks":
        return True
    if k.mode == "in-cluster":
        return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if k.kubeconfig:
        return Path(k.kubeconfig).expanduser().exists()
    env = os.environ.get("KUBECONFIG", "")
    candidates = [p for p in env.split(os.pathsep) if p] or [str(Path.home() / ".kube" / "config")]
    return any(Path(p).expanduser().exists() for p in candidates)


def cluster_state_mode(cluster: ClusterConfig) -> str:
    """"kubernetes", "kube-state-metrics" or "both": the configured mode, with "auto" resolved."""
    if cluster.cluster_state != "auto":
        return cluster.cluster_state
    return "both" if kubernetes_configured(cluster) else "kube-state-metrics"


def live_sources(cluster: ClusterConfig, config: GpuWasteConfig, *, window_s: int | None = None,
                 cluster_file: Path | None = None) -> Sources:
    """Sources over a live Prometheus, with the cluster state from the Kubernetes API, kube-state-metrics, or both
    (`ClusterConfig.cluster_state`; "auto" reads KSM alone when no Kubernetes access is configured), or, with
    `cluster_file`, cluster objects from a `kubectl get pods,nodes -A -o json` file instead of the API.

    Raises:
        ConfigError: when the cluster has no Prometheus URL, or the kubeconfig cannot be loaded.
    """
    from gpuwaste.sources.ksm import ApiWithKsmHistory, PrometheusKsmSource
    from gpuwaste.sources.prometheus import PrometheusGpuMetricsSource

    if cluster.prometheus is None:
        raise ConfigError(f"clusters.{cluster.name}.prometheus: a Prometheus URL is required (or pass --prometheus URL)")
    tel = PrometheusGpuMetricsSource.from_settings(cluster.prometheus, cluster=cluster.name, labels=cluster.labels,
                                                   scrape_interval_s=config.scan.scrape_interval_s,
                                                   matchers=cluster.prometheus.matchers or None)
    if cluster_file is not None:
        return Sources(cluster=RecordingClusterSource(cluster_file, cluster=cluster.name, settings=cluster.read), telemetry=tel)
    mode = cluster_state_mode(cluster)
    ksm = PrometheusKsmSource(tel, cluster=cluster.name, settings=cluster.read, window=timedelta(seconds=window_s or config.scan.window_s),
                              scrape_interval_s=config.scan.scrape_interval_s, concurrency=cluster.prometheus.concurrency,
                              history_only=mode == "both")  # next to the API, KSM only supplies the window's history
    if mode == "kube-state-metrics":
        return Sources(cluster=ksm, telemetry=tel)
    from gpuwaste.sources.kubernetes import KubernetesPodSource

    # "auto" with a kubeconfig found by default: the API is optional (unreadable → KSM alone, with a note); an
    # explicitly configured one (--kubeconfig/--context, kubernetes.kubeconfig, eks/in-cluster) must work
    k = cluster.kubernetes
    auto = cluster.cluster_state == "auto" and k.mode == "kubeconfig" and not (k.kubeconfig or k.context)
    try:
        api = KubernetesPodSource.from_settings(cluster.kubernetes, cluster=cluster.name, read=cluster.read)
    except ConfigError as exc:
        if not auto:
            raise
        return Sources(cluster=ApiWithKsmHistory(None, ksm, api_optional=True, api_error=str(exc)), telemetry=tel)
    return Sources(cluster=api if mode == "kubernetes" else ApiWithKsmHistory(api, ksm, api_optional=auto), telemetry=tel)


def _window_for_history(sources: Sources, window_s: int) -> None:
    """Tell a KSM cluster source how far back to look (the scan's window), through wrappers (`.inner`) and the
    API + KSM merge (`.ksm`)."""
    pending: list[object] = [sources.cluster]
    while pending:
        source = pending.pop()
        own = vars(source) if hasattr(source, "__dict__") else {}
        if "window" in own:
            source.window = timedelta(seconds=window_s)  # type: ignore[attr-defined]
        pending += [own[k] for k in ("inner", "ksm") if own.get(k) is not None]


def scan_service(sources: Sources, config: GpuWasteConfig, *, window_s: int | None = None, priced: bool = True,
                 progress: Callable[[str], None] | None = None) -> ScanService:
    """A scan service over the given sources."""
    _window_for_history(sources, window_s or config.scan.window_s)
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
        dead_letters: (body, reason) of messages a stage could not parse (never expected locally).
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
    alerts = [AlertMessage.model_validate_json(p.body) for p in pending]
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
) -> ChainResult:
    """dispatch → scan → price → dedupe → alerts in one process: in-memory queues carrying the same JSON
    envelopes as SQS between the scan stages, a durable outbox in the SQLite state for what must be delivered
    (alerts, ticket requests, summaries), and the same services as the Lambda functions.

    One scan per entry of `times` (evaluation times, oldest first). Scan ids are derived from cluster and
    time, so running the chain again on the same input finds every scan already applied: no new alerts.
    After each scan, `on_told(alerts, scan_time)` shows what the lifecycle decided, then `deliver(...)` plays
    notify_slack over every pending alert of the outbox (this run's and what earlier runs left), and
    `file_tickets(...)` plays create_tickets over the pending ticket requests. A message is marked done only when
    the stage reports it accepted; without a stage (an output mode that does not deliver) it stays pending, and
    the next run delivers it. A crash at any point leaves the state so that a rerun delivers each message once:
    decisions still in a record's outbox are re-queued first (`LifecycleService.recover`).

    Raises:
        SourceUnavailableError, SourceAuthError, InputFormatError: from the sources.
        StoreError: the SQLite file cannot be used.
    """
    from pydantic import TypeAdapter, ValidationError

    from gpuwaste.bootstrap.pipeline import SystemClock
    from gpuwaste.queue.memory import MemoryQueue
    from gpuwaste.services.dispatch import DispatchService
    from gpuwaste.services.lifecycle import LifecycleService
    from gpuwaste.services.price import PriceService

    stage = TypeAdapter(FindingMessage | ScanCompleted)
    requests_q, findings_q, priced_q = MemoryQueue("scan-requests"), MemoryQueue("findings"), MemoryQueue("priced")
    owned = store is None
    the_store = store if store is not None else SqliteFindingStore(state_path)
    durable = the_store if isinstance(the_store, SqliteFindingStore) else SqliteFindingStore(":memory:")
    alerts_q, tickets_q = durable.delivery_queue("alerts"), durable.delivery_queue("tickets")
    dispatch = DispatchService(clusters=[cluster], queue=requests_q)
    _window_for_history(sources, window_s or config.scan.window_s)
    scanner = ScanService(
        cluster_source=sources.cluster,
        telemetry_source=sources.telemetry,
        settings=config.detectors,
        window=timedelta(seconds=window_s or config.scan.window_s),
        queue=findings_q,
        progress=progress,
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
            for body in findings_q.drain():
                try:
                    message = stage.validate_json(body)
                except ValidationError as exc:
                    result.dead_letters.append((body, str(exc)))
                    continue
                if isinstance(message, ScanCompleted):
                    pricer.forward_completed(message)
                else:
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
                messages = [stage.validate_json(body) for body in priced_q.drain()]
                lifecycle.prefetch([m.finding.fingerprint for m in messages if isinstance(m, FindingMessage)])
                lifecycle.defer_clears = True
                for message in messages:
                    if isinstance(message, ScanCompleted):
                        lifecycle.handle_scan_completed(message)
                    else:
                        lifecycle.handle_finding(message)
                lifecycle.clear_outboxes()
                lifecycle.defer_clears = False
            told = [AlertMessage.model_validate_json(body) for body in alerts_q.sent]
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
            requested = [AlertMessage.model_validate_json(b) for b in tickets_q.sent]
            tickets_q.sent.clear()
            result.tickets += requested
            if file_tickets is not None:
                n, failed = deliver_outbox(tickets_q, file_tickets, the_store, at)
                result.delivered_tickets += n
                result.failed += failed
        durable.delivery_queue("summary").send([SummaryDue(cluster=cluster, until=times[-1])] if times else [])
        keep_until = SystemClock().now() - timedelta(days=config.lifecycle.retention_days)
        for name in ("alerts", "tickets", "summary"):
            durable.delivery_queue(name).prune(done_before=keep_until)
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
    released = 0
    for request in requests:
        if request.action is not AlertAction.ESCALATE:
            continue
        record = store.get(request.finding.fingerprint)
        if record is None or record.ticket_key or record.ticket_requested_at is None:
            continue
        cleared = record.model_copy(update={"ticket_requested_at": None, "version": record.version + 1})
        if store.update(cleared, expected_version=record.version):
            released += 1
    return released


def replay_times(end: datetime, *, scans: int, interval: timedelta) -> list[datetime]:
    """`scans` evaluation times `interval` apart, the last at `end` (successive scans over one recording)."""
    return [end - interval * (scans - 1 - i) for i in range(scans)]
