"""`gpuwaste serve`: the local chain on a schedule, with the findings as Prometheus metrics.

Every `serve.interval_s` it runs exactly what `gpuwaste run` runs once (scan → price → dedupe → alerts →
Slack/Jira, the SQLite lifecycle store kept between scans), then exposes the store's open waste, running totals
and scan health on `/metrics` (prometheus-client); `/healthz` answers 200 while the schedule is alive.
Tokens come from the environment (a Kubernetes Secret), never from the configuration file: see `SECRET_ENV`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import typer
from rich.markup import escape

from gpuwaste import __version__
from gpuwaste.cli_support import (
    KUBE_HINT,
    Output,
    alert_budgets,
    app,
    check_recording,
    check_state_path,
    config_or_exit,
    err,
    fail,
    fail_source,
    live_cluster,
    parse_window,
)
from gpuwaste.errors import (
    ConfigError,
    DeliveryError,
    GpuWasteError,
    InputFormatError,
    PermanentDeliveryError,
    SourceAuthError,
    SourceUnavailableError,
    StoreError,
)
from gpuwaste.models import redaction

if TYPE_CHECKING:  # imported where used, so `gpuwaste --help` starts without prometheus_client or the models
    from gpuwaste.bootstrap import local
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.models.metrics import MetricsSnapshot
    from gpuwaste.models.settings import ClusterConfig
    from gpuwaste.ports import ClusterActuator
    from gpuwaste.services.interactions import HttpReply
    from gpuwaste.services.reclaim import ReclaimReport

logger = logging.getLogger(__name__)

#: Environment variables (set from a Kubernetes Secret) that fill the configuration's secret fields.
SECRET_ENV: dict[str, tuple[str, ...]] = {
    "GPUWASTE_SLACK_BOT_TOKEN": ("delivery", "slack", "bot_token"),
    "GPUWASTE_SLACK_SIGNING_SECRET": ("delivery", "slack", "signing_secret"),
    "GPUWASTE_JIRA_API_TOKEN": ("delivery", "jira", "api_token"),
    "GPUWASTE_PROMETHEUS_BEARER_TOKEN": ("prometheus", "auth", "bearer_token"),
    "GPUWASTE_PROMETHEUS_PASSWORD": ("prometheus", "auth", "password"),
}


def with_env_secrets(cfg: GpuWasteConfig, environ: Mapping[str, str]) -> GpuWasteConfig:
    """The configuration with the secrets of `SECRET_ENV` taken from `environ` (empty values ignored).

    Prometheus secrets apply to every configured cluster that has a Prometheus; a bearer token also sets
    `auth.kind: bearer` (and a password `basic`) when the kind is still "none".
    """
    from pydantic import SecretStr

    cfg = cfg.model_copy(deep=True)
    for name, path in SECRET_ENV.items():
        value = environ.get(name, "")
        if not value:
            continue
        redaction.register_secret(value)  # redacted from every log line (models/redaction.py)
        if path[0] == "delivery":  # the configuration is frozen: the changed sections are copies
            section = getattr(cfg.delivery, path[1]).model_copy(update={path[2]: SecretStr(value)})
            delivery = cfg.delivery.model_copy(update={path[1]: section})
            cfg = cfg.model_copy(update={"delivery": delivery})
            continue
        clusters = []
        for cluster in cfg.clusters:
            if cluster.prometheus is not None:
                auth = cluster.prometheus.auth
                kind = auth.kind if auth.kind != "none" else ("bearer" if path[2] == "bearer_token" else "basic")
                auth = auth.model_copy(update={path[2]: SecretStr(value), "kind": kind})
                cluster = cluster.model_copy(update={"prometheus": cluster.prometheus.model_copy(update={"auth": auth})})
            clusters.append(cluster)
        cfg = cfg.model_copy(update={"clusters": clusters})
    return cfg


class _Blame:
    """Which source failed during a scan (set by the tracking wrappers, read after the chain)."""

    def __init__(self) -> None:
        self.source: str | None = None


class _TrackedCluster:
    """The cluster-state port, noting a failure as the "kubernetes" source's."""

    def __init__(self, inner: Any, blame: _Blame) -> None:
        self.inner, self.blame = inner, blame

    def cluster_state(self, *, at: datetime) -> Any:
        try:
            return self.inner.cluster_state(at=at)
        except Exception:
            # the scan reads cluster state and telemetry at the same time and raises the cluster-state error when both fail
            self.blame.source = "kubernetes"
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _TrackedTelemetry:
    """The telemetry port, noting a failure as the "prometheus" source's."""

    def __init__(self, inner: Any, blame: _Blame) -> None:
        self.inner, self.blame = inner, blame

    def telemetry(self, *, at: datetime, window: timedelta) -> Any:
        try:
            return self.inner.telemetry(at=at, window=window)
        except Exception:
            self.blame.source = self.blame.source or "prometheus"
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def error_source(exc: BaseException, blame: _Blame) -> str:
    """The `source` label of a failed scan: the port that raised, else by the error's type."""
    if blame.source:
        return blame.source
    if isinstance(exc, StoreError):
        return "store"
    if isinstance(exc, DeliveryError | PermanentDeliveryError):
        return "delivery"
    if isinstance(exc, ConfigError):
        return "config"
    if isinstance(exc, SourceUnavailableError | SourceAuthError | InputFormatError):
        return "prometheus"
    return "other"


def chain_once(sources: local.Sources, cfg: GpuWasteConfig, *, cluster: str, at: datetime, window_s: int | None,
               state: Path) -> local.ChainResult:
    """One scheduled pass of exactly what `gpuwaste run` does (the one call into the run command's chain)."""
    from gpuwaste.commands.run import run_local_chain

    return run_local_chain(sources, cfg, cluster=cluster, times=[at], window_s=window_s, state=state,
                           output=Output.table, quiet=False, slack=True, tickets=True, summary=False, state_given=True)


#: Slack's interactivity Request URL on `serve` (on when `delivery.slack.signing_secret` and `bot_token` are set)
SLACK_PATH = "/slack/interactions"
#: The largest interaction body read, bytes (a button press with its message's blocks is a few KiB)
SLACK_MAX_BODY = 1 << 20


class Server:
    """The schedule, the metrics state and the HTTP endpoints of one `serve` process."""

    def __init__(self, sources: local.Sources, cfg: GpuWasteConfig, *, cluster: str, window_s: int | None,
                 state: Path, interval_s: int, clock: Callable[[], datetime] | None = None,
                 fixed_time: datetime | None = None, api_token: str | None = None,
                 mcp_port: int | None = None, actuator: ClusterActuator | None = None) -> None:
        #: the reclaim step's apiserver (`reclaim.enabled`: after each scan; None: announced and recorded, not performed)
        self.actuator = actuator
        self.api_token = api_token  # the read API's bearer token (commands/api.py); None: /api/v1 is off
        self.mcp_port = mcp_port  # the MCP server over HTTP (commands/mcp_server.py) on this port; None: off
        self.mcp_bound: int | None = None
        self.sources, self.cfg, self.cluster, self.window_s, self.state = sources, cfg, cluster, window_s, state
        self.interval_s = interval_s
        self.clock = clock or (lambda: datetime.now(tz=UTC).replace(microsecond=0))
        self.fixed_time = fixed_time  # a recording: every scan evaluates at its end
        from gpuwaste.services.metrics import MetricsState

        self.metrics = MetricsState(settings=cfg.delivery, top=cfg.serve.top_workloads,
                                    first_span=timedelta(seconds=interval_s),
                                    savings_credit=timedelta(days=cfg.serve.savings_credit_days),
                                    team_budgets=alert_budgets(cfg)[0],
                                    default_budget=alert_budgets(cfg)[1], version=__version__)
        from gpuwaste.commands.api import FindingsReader

        #: the read functions of /api/v1 and the MCP endpoint; each scan hands it its ledger (`/api/v1/showback`)
        self.reader = FindingsReader(state, cfg)
        self._lock = threading.Lock()
        #: verified Slack requests already received (timestamp#signature → forget after), so a replay is refused
        self._slack_seen: dict[str, float] = {}
        self._snapshot = self.metrics.snapshot()
        self._tick = time.monotonic()
        self.stopped = threading.Event()

    def snapshot(self) -> MetricsSnapshot:
        with self._lock:
            return self._snapshot

    def scan_once(self) -> bool:
        """Run the chain once and update the metrics; True on success (failures are counted, never raised)."""
        from gpuwaste.bootstrap import local

        blame = _Blame()
        tracked = local.Sources(cluster=_TrackedCluster(self.sources.cluster, blame),
                                telemetry=_TrackedTelemetry(self.sources.telemetry, blame),
                                recording=self.sources.recording)
        wall = self.clock()
        at = self.fixed_time or wall
        self._tick = t0 = time.monotonic()
        ok = False
        try:
            result = chain_once(tracked, self.cfg, cluster=self.cluster, at=at, window_s=self.window_s, state=self.state)
            report = result.reports[-1]
            self.reader.observe_scan(report.cluster, report.showback, report.findings)
            open_records, resolved = self._store_state(wall)
            from gpuwaste.services.showback import health_figures as showback_health
            self.metrics.observe_success(self.cluster, at=wall, duration_s=time.monotonic() - t0,
                                         window_s=report.window_s, gpus=report.inventory.physical_gpus,
                                         findings=report.findings,
                                         no_verdict_detectors=[nv.detector for nv in report.no_verdict],
                                         open_records=open_records, resolved_records=resolved,
                                         coverage=report.inventory.attribution_coverage,
                                         showback=None if report.showback is None
                                         else showback_health(report.showback, self.metrics.settings))
            ok = True
            self.reclaim_once()
        except (typer.Exit, SystemExit) as exc:  # the chain printed the error (stderr) and exited: count it
            self.metrics.observe_failure(self.cluster, at=wall, duration_s=time.monotonic() - t0,
                                         source=error_source(exc, blame))
        except Exception as exc:  # noqa: BLE001 - a failed scan is counted and logged; the schedule goes on
            source = error_source(exc, blame)
            err.print(f"[bold red]scan failed[/] ({source}): {escape(str(exc))}", highlight=False, soft_wrap=True, markup=True)
            self.metrics.observe_failure(self.cluster, at=wall, duration_s=time.monotonic() - t0, source=source)
        with self._lock:
            self._snapshot = self.metrics.snapshot()
        self._tick = time.monotonic()
        return ok

    def reclaim_once(self) -> ReclaimReport | None:
        """The reclaim step after a scan (`reclaim.enabled` only): what `gpuwaste reclaim` does, at the cluster's latest
        scan in the state, with the same service, dry-run default and caps; announced in the owner's Slack thread when
        a bot token is configured. None when reclaim is off or nothing is open. A failure is logged, never raised (the
        scan itself succeeded; the next step retries, nothing is done twice)."""
        if not self.cfg.reclaim.enabled:
            return None
        from gpuwaste.bootstrap import delivery
        from gpuwaste.services.reclaim import ReclaimService
        from gpuwaste.store.sqlite import SqliteFindingStore

        store = SqliteFindingStore(self.state)
        try:
            open_records = store.open_for_cluster(self.cluster)
            if not open_records:
                return None
            scan_id = max(open_records, key=lambda r: r.last_seen).last_scan_id
            notifier = delivery.slack_notifier(self.cfg.delivery) if self.cfg.delivery.slack.bot_token else None
            service = ReclaimService(store=store, actuator=self.actuator, notifier=notifier, settings=self.cfg.reclaim,
                                     now=self.clock)
            report = service.run(self.cluster, scan_id=scan_id)
        except Exception as exc:  # noqa: BLE001 - logged; the schedule goes on
            err.print(f"[bold red]reclaim failed[/]: {escape(str(exc))}", highlight=False, soft_wrap=True, markup=True)
            return None
        finally:
            store.close()
        err.print(f"reclaim ({self.cfg.reclaim.mode.value}) at scan {scan_id}: {len(report.planned)} planned, "
                  f"{len(report.performed)} performed, {len(report.cancelled)} cancelled, {len(report.failed)} refused, "
                  f"{len(report.capped)} over the caps", highlight=False, soft_wrap=True)
        return report

    def slack_interaction(self, headers: Mapping[str, str], body: bytes) -> HttpReply:
        """POST /slack/interactions: Slack's button presses (Snooze, Expected, Details, reclaim Keep / Approve) on
        this process's store, verified with `delivery.slack.signing_secret` (refused past
        `delivery.slack.request_max_age_s`), each signed request accepted once (a replay is 401). Keep / Approve use
        the reclaim service (`reclaim.enabled`) with this process's actuator; tickets are not opened from here.

        Raises:
            ConfigError: no signing secret or bot token (the endpoint is off; the WSGI app answers 404).
        """
        from gpuwaste.bootstrap import delivery
        from gpuwaste.errors import RequestSignatureError
        from gpuwaste.services.interactions import InteractionService, refused
        from gpuwaste.services.reclaim import ReclaimService
        from gpuwaste.sinks.slack_blocks import details_text
        from gpuwaste.sinks.slack_interactions import read_request
        from gpuwaste.sinks.slack_signature import SlackSignatureVerifier
        from gpuwaste.store.sqlite import SqliteFindingStore

        settings = self.cfg.delivery
        verifier = SlackSignatureVerifier(delivery.slack_signing_secret(settings),
                                          max_age_s=settings.slack.request_max_age_s)
        try:
            verifier.verify(headers, body)
        except RequestSignatureError as exc:
            return refused(exc)
        lower = {k.lower(): v for k, v in headers.items()}
        key = f"{lower.get('x-slack-request-timestamp', '')}#{lower.get('x-slack-signature', '')}"
        now = time.monotonic()
        with self._lock:
            self._slack_seen = {k: t for k, t in self._slack_seen.items() if t > now}
            if key in self._slack_seen:
                return refused(RequestSignatureError("request received before (replay refused)"))
            self._slack_seen[key] = now + 2 * settings.slack.request_max_age_s
        store = SqliteFindingStore(self.state)
        try:
            notifier = delivery.slack_notifier(settings)
            reclaim = ReclaimService(store=store, actuator=self.actuator, notifier=notifier, settings=self.cfg.reclaim,
                                     now=self.clock) if self.cfg.reclaim.enabled else None
            service = InteractionService(verifier=None, reader=read_request, store=store, now=self.clock,
                                         notifier=notifier, details_text=details_text, source="slack", reclaim=reclaim)
            return service.handle(headers=headers, body=body)
        finally:
            store.close()

    def _store_state(self, at: datetime) -> tuple[list[Any], list[Any]]:
        from gpuwaste.models.lifecycle import FindingState
        from gpuwaste.store.sqlite import SqliteFindingStore

        store = SqliteFindingStore(self.state)
        try:
            open_records = store.open_for_cluster(self.cluster)
            since = at - timedelta(days=self.cfg.serve.savings_credit_days)
            resolved = [r for r in store.history(since=since - timedelta(days=1), until=at + timedelta(days=1))
                        if r.cluster == self.cluster and r.state is FindingState.RESOLVED]
        finally:
            store.close()
        return open_records, resolved

    def healthy(self) -> bool:
        """The schedule is alive: a scan started or ended within 2 intervals + 5 minutes."""
        return not self.stopped.is_set() and time.monotonic() - self._tick < 2 * self.interval_s + 300

    def health_body(self) -> dict[str, Any]:
        snap = self.snapshot()
        h = next((h for h in snap.health if h.cluster == self.cluster), None)
        return {
            "status": "ok" if self.healthy() else "stalled",
            "cluster": self.cluster,
            "last_success": h.last_success.isoformat() if h and h.last_success else None,
            "last_attempt": h.last_attempt.isoformat() if h and h.last_attempt else None,
            "scans": dict(h.scans) if h else {},
            "errors": dict(h.errors) if h else {},
        }

    def wsgi_app(self) -> Callable[..., Iterable[bytes]]:
        """`/metrics` (prometheus-client, OpenMetrics when asked), `/healthz` (JSON), the read API under `/api/v1/`
        (commands/api.py: bearer token, read-only, rate-limited), `POST /slack/interactions` with a Slack signing
        secret and bot token (`slack_interaction`), else 404."""
        from prometheus_client import make_wsgi_app

        from gpuwaste.commands.api import ReadApi
        from gpuwaste.sinks.prometheus_metrics import registry_for

        metrics = make_wsgi_app(registry_for(self.snapshot))
        api = ReadApi(self.reader, self.api_token)
        slack = self.cfg.delivery.slack
        slack_on = slack.signing_secret is not None and slack.bot_token is not None

        def reply(start_response: Callable[..., Any], status: str, payload: Mapping[str, Any]) -> Iterable[bytes]:
            body = json.dumps(payload).encode()
            start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]

        def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "")
            if path == "/metrics":
                return metrics(environ, start_response)  # type: ignore[no-any-return]
            if path.startswith(ReadApi.PREFIX):
                return api(environ, start_response)
            if path == SLACK_PATH and slack_on:
                if environ.get("REQUEST_METHOD") != "POST":
                    return reply(start_response, "405 Method Not Allowed", {"error": "POST only"})
                try:
                    length = int(environ.get("CONTENT_LENGTH") or 0)
                except ValueError:
                    length = -1
                if not 0 <= length <= SLACK_MAX_BODY:
                    return reply(start_response, "413 Content Too Large", {"error": f"body over {SLACK_MAX_BODY} bytes"})
                headers = {k[5:].replace("_", "-").lower(): str(v) for k, v in environ.items() if k.startswith("HTTP_")}
                answer = self.slack_interaction(headers, environ["wsgi.input"].read(length))
                return reply(start_response, f"{answer.status} {HTTPStatus(answer.status).phrase}", answer.body)
            if path == "/healthz":
                body = json.dumps(self.health_body()).encode()
                status = "200 OK" if self.healthy() else "503 Service Unavailable"
                start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
                return [body]
            body = b"not found: use /metrics, /healthz or /api/v1/ (see /api/v1/openapi.json)\n"
            start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
            return [body]

        return application

    def run(self, *, host: str, port: int, max_scans: int = 0) -> int:
        """Serve HTTP on a thread and scan on schedule until SIGTERM/SIGINT (or `max_scans` scans); returns the
        number of failed scans."""
        from prometheus_client.exposition import ThreadingWSGIServer

        httpd = make_server(host, port, self.wsgi_app(), server_class=ThreadingWSGIServer, handler_class=_Quiet)
        thread = threading.Thread(target=httpd.serve_forever, name="gpuwaste-http", daemon=True)
        mcp = None
        if self.mcp_port is not None and self.api_token:
            from gpuwaste.commands.mcp_server import McpHttpServer, http_app

            mcp = McpHttpServer(http_app(self.reader, self.api_token), host=host,
                                port=self.mcp_port)
            try:
                self.mcp_bound = mcp.start()
            except OSError:
                httpd.server_close()
                raise
        thread.start()
        api = ", /api/v1" if self.api_token else ""
        if self.mcp_bound is not None:
            api += f" (MCP: http://{host}:{self.mcp_bound}/mcp)"
        err.print(f"gpuwaste serve: /metrics, /healthz{api} on http://{host}:{httpd.server_port}, a scan of "
                  f"{self.cluster} every {self.interval_s} s, state {self.state}", highlight=False, soft_wrap=True)
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError):  # not the main thread (tests drive run() from a thread)
                signal.signal(sig, lambda *_: self.stopped.set())
        failed = scans = 0
        try:
            while not self.stopped.is_set():
                started = time.monotonic()
                failed += 0 if self.scan_once() else 1
                scans += 1
                if max_scans and scans >= max_scans:
                    break
                self.stopped.wait(max(0.0, self.interval_s - (time.monotonic() - started)))
        finally:
            self.stopped.set()
            httpd.shutdown()
            httpd.server_close()
            if mcp is not None:
                mcp.stop()
        return failed


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        pass


def acting_actuator(cluster: ClusterConfig) -> ClusterActuator | None:
    """The reclaim step's apiserver: the cluster's `kubernetes` credentials (kubeconfig, in-cluster service account
    with the chart's opt-in reclaim role, or "eks"); None (announce and record only) when no Kubernetes access is set up.

    Raises:
        ConfigError: the configured credentials cannot be loaded.
    """
    from gpuwaste.bootstrap import local
    from gpuwaste.sinks.kube_actuator import KubernetesActuator
    from gpuwaste.sources.kubernetes import KubernetesClusterSource

    if not local.kubernetes_configured(cluster):
        err.print(f"reclaim: no Kubernetes access for {cluster.name}; actions are announced and recorded, not performed",
                  highlight=False, soft_wrap=True)
        return None
    return KubernetesActuator(KubernetesClusterSource.from_settings(cluster.kubernetes, cluster=cluster.name).api_client)


@app.command("serve")
def serve_cmd(
    recording: Annotated[Path | None, typer.Option("--recording", "-r", help="Serve over a recording directory (every scan at its end) instead of live sources.")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Configuration file (YAML/JSON); its `serve` section sets the defaults below.")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Cluster name (from --config).")] = None,
    prometheus: Annotated[str | None, typer.Option("--prometheus", "-p", help="Prometheus base URL (live).", envvar="GPUWASTE_PROMETHEUS_URL")] = None,
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="kubeconfig (live; in a pod set kubernetes.mode: in-cluster in the config).", envvar="KUBECONFIG")] = None,
    context: Annotated[str | None, typer.Option("--context", help="kubeconfig context.")] = None,
    state: Annotated[Path | None, typer.Option("--state", help="SQLite lifecycle store kept between scans (default: serve.state).")] = None,
    interval: Annotated[str | None, typer.Option("--interval", help="Time between scans, e.g. 10m (default: serve.interval_s).")] = None,
    window: Annotated[str | None, typer.Option("--window", "-w", help="Look-back window per scan, 10m or more (default: serve.window_s, else scan.window_s).")] = None,
    host: Annotated[str | None, typer.Option("--host", help="Listen address (default: serve.host, 127.0.0.1; 0.0.0.0 in a pod).")] = None,
    port: Annotated[int | None, typer.Option("--port", min=0, max=65535, help="Listen port (default: serve.port, 9402; 0 picks a free one).")] = None,
    top_workloads: Annotated[int | None, typer.Option("--top-workloads", min=1, max=1000, help="Workloads per namespace with their own series (default: serve.top_workloads, 10).")] = None,
    max_scans: Annotated[int, typer.Option("--max-scans", min=0, help="Stop after this many scans (0: run until SIGTERM).")] = 0,
    mcp_port: Annotated[int | None, typer.Option("--mcp-port", min=0, max=65535, help="Also serve the MCP server (Streamable HTTP at /mcp, the read API's token) on this port; needs the extra gpuwaste[mcp].")] = None,
    api_token_file: Annotated[Path | None, typer.Option("--api-token-file", help="File holding the read API's bearer token (a mounted Secret); else $GPUWASTE_API_TOKEN; neither: /api/v1 is off.")] = None,
) -> None:
    """Scan on a schedule (the whole `gpuwaste run` chain) and expose the findings on /metrics for Prometheus and,
    with an API token (--api-token-file or GPUWASTE_API_TOKEN), as read-only JSON under /api/v1 (docs/api.md)."""
    from gpuwaste.bootstrap import local
    from gpuwaste.commands.api import ReadError, read_token

    cfg = with_env_secrets(config_or_exit(config), os.environ)
    serve = cfg.serve
    actuator: ClusterActuator | None = None
    try:
        api_token = read_token(api_token_file, dict(os.environ))
    except ReadError as exc:
        fail(escape(str(exc)))
    if api_token:
        redaction.register_secret(api_token)
    if mcp_port is not None:
        if not api_token:
            fail("--mcp-port needs the read API's token (GPUWASTE_API_TOKEN or --api-token-file): the MCP endpoint uses it")
        from gpuwaste.commands.mcp_server import EXTRA_HINT

        try:
            import mcp  # noqa: F401
            import uvicorn  # noqa: F401
        except ModuleNotFoundError:
            fail(escape(EXTRA_HINT))
    from gpuwaste.cli_support import SOURCE_ERRORS, parse_duration

    interval_s = parse_duration(interval) if interval else serve.interval_s
    if interval_s < 1:
        fail("--interval: must be 1s or more")
    window_s = parse_window(window) if window else serve.window_s
    if top_workloads is not None:
        cfg = cfg.model_copy(update={"serve": cfg.serve.model_copy(update={"top_workloads": top_workloads})})
    fixed: datetime | None = None
    try:
        if recording is not None:
            if not recording.exists():
                fail(f"{recording}: no such file or directory")
            sources = local.recording_sources(recording, cfg, cluster_name=cluster)
            assert sources.recording is not None
            cfg, _ = local.recording_config(cfg, sources, config_given=config is not None)  # as run, scan and demo
            check_recording(sources, None)
            fixed = sources.recording.end_time()
            window_s = window_s or sources.recording.meta.window_s
            name = sources.recording.cluster
        else:
            if prometheus is None and not cfg.clusters:
                fail("nothing to serve: pass --prometheus URL (with a kubeconfig), --config FILE, or --recording DIR.")
            cc = live_cluster(cfg, cluster, prometheus, kubeconfig, context)
            sources = local.live_sources(cc, cfg)
            name = cc.name
            actuator = acting_actuator(cc) if cfg.reclaim.enabled else None
    except InputFormatError as exc:
        fail(f"{exc}\nThe recording is malformed at the place shown; fix or re-record it.")
    except SOURCE_ERRORS as exc:
        fail_source(exc)
    except GpuWasteError as exc:
        fail(str(exc) + (f" {KUBE_HINT}" if "kube" in str(exc).lower() else ""))
    server = Server(sources, cfg, cluster=name, window_s=window_s, state=check_state_path(state or Path(serve.state)),
                    interval_s=interval_s, fixed_time=fixed, api_token=api_token, mcp_port=mcp_port, actuator=actuator)
    try:
        failed = server.run(host=host or serve.host, port=serve.port if port is None else port, max_scans=max_scans)
    except OSError as exc:
        fail(f"cannot listen on {host or serve.host}:{serve.port if port is None else port}: {exc.strerror}")
    if max_scans and failed == max_scans:
        raise typer.Exit(1)


__all__ = ["SECRET_ENV", "Server", "acting_actuator", "chain_once", "error_source", "with_env_secrets"]
