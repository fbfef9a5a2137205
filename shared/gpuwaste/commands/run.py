"""`gpuwaste run`: the whole pipeline in one process — dispatch → scan → price → dedupe → alerts.

The same services as the Lambda functions, with an in-process queue (JSON envelopes, as on SQS) and
the SQLite lifecycle store, so a second run on the same input tells nobody anything new.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuwaste.cli_support import (
    DEFAULT_STATE,
    KUBE_HINT,
    SOURCE_ERRORS,
    VERBOSE,
    Output,
    app,
    check_state_path,
    config_or_exit,
    err,
    escape_markup,
    fail,
    fail_source,
    live_cluster,
    out,
    parse_positive,
    parse_time,
    parse_window,
    progress_printer,
)
from gpuwaste.cli_support.recording import check_recording
from gpuwaste.cli_support.scan_report import View, render, team_function
from gpuwaste.errors import (
    ConfigError,
    GpuWasteError,
    InputFormatError,
    PermanentError,
    StateInUseError,
    StoreError,
)
from gpuwaste.models.text import for_terminal, strip_controls

if TYPE_CHECKING:  # imported where used, so `gpuwaste --help` stays fast
    from gpuwaste.bootstrap import local
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.models.messages import AlertMessage
    from gpuwaste.ports import FindingStore

#: Rich style of each alert action's line.
ACTION_STYLE = {"new": "bold red", "worse": "red", "reminder": "yellow", "escalate": "magenta", "resolved": "green"}


#: Least characters of an alert line's owner/workload name before the reason moves to a line of its own.
ALERT_NAME_MIN = 24


def alert_line(alert: AlertMessage, *, width: int | None = None, prefix: str = "") -> str:
    """One line per alert: `prefix`, action, owner/workload, kind (people's label), USD/day, why.

    With `width`, the text fits it: the name is elided in the middle (down to ALERT_NAME_MIN characters), then the
    reason moves to an indented line of its own (wrapped at spaces), then the name gives way further."""
    from gpuwaste.people import elide, kind_label
    from gpuwaste.sinks.terminal import fit_line

    f = alert.finding
    s = f.subject
    who = for_terminal(f"{s.namespace}/{s.workload_name}" if s.namespace else f"node {s.node or s.workload_name or '-'}")
    from gpuwaste.sinks.slack_blocks import SIZING_NOTE, finding_per_day

    cost = finding_per_day(f)  # the digest's words: "$1,234.56/day", "unpriced", or a sizing note (no GPU cost)
    extra = f" · saved ${alert.saved_usd_per_day}/day" if alert.saved_usd_per_day else ""
    reason = for_terminal(alert.reason)  # names come from the cluster: no escape sequences, no markup reach the terminal
    if cost == SIZING_NOTE and reason == "new waste":  # a $0 sizing note is new, not "new waste" (issue 22)
        reason = "new"

    def head(name: str) -> str:
        return f"{prefix}[{alert.action.value.upper()}] {name} · {kind_label(f.kind)} · {cost}{extra}"

    line = f"{head(who)} · {reason}".rstrip(" ·")
    if width is None or len(line) <= width:
        return line
    spare = width - len(line) + len(who)
    if reason and spare >= ALERT_NAME_MIN:
        return f"{head(elide(who, spare))} · {reason}"
    top = head(who)
    if len(top) > width:
        top = head(elide(who, max(8, width - len(top) + len(who))))
    rest = fit_line(reason, width - 2) if reason else []
    return "\n".join([top, *("  " + r for r in rest)])


def print_alert(alert: AlertMessage) -> None:
    """Print one alert line (the local stand-in for the Slack message), fitted to the terminal's width."""
    out.print(alert_line(alert, width=out.width), style=ACTION_STYLE.get(alert.action.value, ""), highlight=False,
              soft_wrap=True, markup=False)


def _section(title: str) -> None:
    out.rule(f"[bold]{title}[/]", align="left", style="dim")


#: `gpuwaste run` exit code when a delivery (Slack post, ticket) failed: it stays pending in the state's outbox.
EXIT_UNDELIVERED = 4


def _slack_stage(cfg: GpuWasteConfig, *, quiet: bool = False) -> local.DeliverStage:
    """notify_slack's local twin over the state's outbox: each pending alert posted to Slack (with a bot token in the
    config) or printed as the message notify_slack would send (not printed with `quiet`: -q quiets output, it does
    not stop deliveries); returns the deliveries that failed."""
    from rich.console import Console

    from gpuwaste.bootstrap import local_delivery
    from gpuwaste.sinks.terminal_notify import TerminalNotifier

    console = Console(quiet=True) if quiet else out

    def deliver(alerts, store, at, redelivered):  # type: ignore[no-untyped-def]
        # ages and "since" read from the scan's time, so a replayed recording reads as it happened
        printer = TerminalNotifier(console, now=at) if cfg.delivery.slack.bot_token is None else None
        service = local_delivery.local_notify_service(cfg, store, notifier=printer, console=console, now=lambda: at)
        report = service.plan(alerts, redelivered=redelivered).deliver_all()
        for alert, exc in report.failed:
            out.print(f"not delivered (kept for the next run): {alert_line(alert)}: {for_terminal(str(exc))}", style="red",
                      highlight=False, soft_wrap=True)
        return report.failed

    return deliver


def _show_told(alerts, at):  # type: ignore[no-untyped-def]
    from gpuwaste.models.messages import AlertAction

    _section(f"messages · scan at {at:%Y-%m-%d %H:%M}Z ({len(alerts)} alerts)")
    for alert in sorted(alerts, key=lambda a: (list(AlertAction).index(a.action), -(a.finding.usd_per_day or 0))):
        print_alert(alert)


def _ticket_stage(cfg, *, panels: bool, explain_args: str = ""):  # type: ignore[no-untyped-def]
    """create_tickets' local twin over the state's outbox: each pending ticket request handled by the ticket service —
    with Jira when the config has `delivery.jira.base_url`, else printed as the ticket that would be created
    (LOCAL-<n>); returns the requests that failed."""
    from rich.console import Console

    from gpuwaste.bootstrap import local, local_delivery
    from gpuwaste.models.messages import AlertAction
    from gpuwaste.services.tickets import plan_tickets

    team = team_function(cfg)

    def _started(store: FindingStore) -> datetime | None:
        """The oldest sighting in the store: the quiet start counts from it."""
        records = store.history(since=datetime(1970, 1, 1, tzinfo=UTC), until=datetime(9999, 1, 1, tzinfo=UTC))
        return min((r.first_seen for r in records), default=None)

    def file_tickets(requests, store, at, redelivered):  # type: ignore[no-untyped-def]
        _section(f"tickets · scan at {at:%Y-%m-%d %H:%M}Z ({len(requests)} requests)")
        try:
            service = local_delivery.local_ticket_service(cfg, store, terminal=True, console=out if panels else Console(quiet=True))
        except GpuWasteError as exc:
            out.print(f"tickets left out (kept for the next run): {exc}", style="red", highlight=False, soft_wrap=True)
            return [(r, exc) for r in requests]
        assert service is not None
        failed: list[tuple[AlertMessage, Exception]] = []
        ticketed: list[str] = []
        service.now = lambda: at  # ages and "open since" read from the scan's time (a replay reads as it happened)
        # the printed ticket's `gpuwaste explain ID …` works as printed; a real Jira ticket's readers have no local state
        service.explain_args = "" if service.settings.jira.base_url else explain_args
        plan = plan_tickets(requests, team_of=team, jira=service.settings.jira, started_at=_started(store), now=at)
        if plan.deferred:
            local.release_ticket_requests(plan.deferred, store)
            out.print(f"{len(plan.deferred)} ticket requests wait for a later run (ticket cap of this run"
                      f"{', quiet start' if plan.quiet else ''}: delivery.jira.max_per_run / quiet_start_days)",
                      style="yellow", highlight=False, soft_wrap=True, markup=False)
        for team_name, folded in plan.folded.items():
            try:
                overflow_key = service.open_overflow(team_name, folded)
            except GpuWasteError as exc:  # its requests stay pending: the next run files them (never marked done unfiled)
                out.print(f"overflow ticket failed for team {strip_controls(team_name)} (its {len(folded)} requests kept for"
                          f" the next run): {strip_controls(str(exc))}", style="red", highlight=False, soft_wrap=True,
                          markup=False)
                failed.extend((r, exc) for r in folded)
                continue
            out.print(f"ticket {overflow_key}: {len(folded)} more findings of team {strip_controls(team_name)} in one ticket (over the per-team cap)",
                      style="magenta", highlight=False, soft_wrap=True, markup=False)
        for request in plan.open:
            try:
                key = service.handle(request)
            except GpuWasteError as exc:  # shown, not fatal: the rest of the chain carries on
                out.print(f"ticket failed (kept for the next run): {alert_line(request)}: {for_terminal(str(exc))}", style="red",
                          highlight=False, soft_wrap=True)
                failed.append((request, exc))
                continue
            verb = {AlertAction.ESCALATE: "ticket", AlertAction.WORSE: "comment on",
                    AlertAction.RESOLVED: "resolved"}.get(request.action, request.action.value)
            out.print(alert_line(request, width=out.width, prefix=f"{verb} {key or '-'}: "), style="magenta", highlight=False,
                      soft_wrap=True, markup=False)
            if key and request.action is AlertAction.ESCALATE:
                ticketed.append(request.fingerprint)
        _show_tickets_in_chat(cfg, store, ticketed, at)
        return failed

    return file_tickets


def _show_tickets_in_chat(cfg, store, fingerprints: list[str], at: datetime) -> None:  # type: ignore[no-untyped-def]
    """The Slack messages of the findings that got a ticket in this run edited in place to show it (once per finding
    and ticket: `NotifyService.show_tickets`); a failure is shown, not fatal (the ticket exists and links the thread;
    the message keeps showing no ticket — a later run does not retry the edit)."""
    from gpuwaste.bootstrap import local_delivery

    if not fingerprints or cfg.delivery.slack.bot_token is None:
        return
    try:
        service = local_delivery.local_notify_service(cfg, store, now=lambda: at)
        edited = service.show_tickets(fingerprints)
    except GpuWasteError as exc:
        out.print(f"Slack message not updated with its ticket: {for_terminal(str(exc))}", style="yellow",
                  highlight=False, soft_wrap=True)
        return
    for message in edited:
        out.print(f"Slack message {message.message_id} in {message.destination} updated to show its ticket"
                  f"{'s' if len(message.fingerprints) > 1 else ''}", style="magenta", highlight=False, soft_wrap=True,
                  markup=False)


def print_summary(cfg, state: Path, at: datetime, showback=None, findings=()) -> None:  # type: ignore[no-untyped-def]
    """The daily summary (services/summary) of the state file for the day ending at the last scan; marks the
    state's pending summaries done once shown. With `showback` (the last scan's `services.showback.ScanLedger`), the
    fleet funnel, the per-team showback and the share-conservation check of that scan's window come first."""
    from gpuwaste.bootstrap import summary as summary_root
    from gpuwaste.sinks.summary_report import SummaryNotes, render_terminal
    from gpuwaste.store.sqlite import SqliteFindingStore

    if showback is not None:  # the last window's ledger first: the summary's tables end the section
        print_showback(cfg, showback, findings)
    _section("summary · the day up to the last scan")
    try:
        service = summary_root.local_summary_service(cfg, state)
    except GpuWasteError as exc:
        out.print(f"summary left out: {exc}", style="red", highlight=False)
        return
    try:
        end = at + timedelta(seconds=1)
        notes = SummaryNotes(data_quality=service.data_quality_problems(since=end - timedelta(days=1), until=end))
        render_terminal(service.build(since=end - timedelta(days=1), until=end), out, notes)
        if isinstance(service.store, SqliteFindingStore):
            queue = service.store.delivery_queue("summary")
            queue.done([p.id for p in queue.pending()])  # the newest summary shown supersedes older pending ones
    finally:
        if isinstance(service.store, SqliteFindingStore):
            service.store.close()


def print_showback(cfg, sl, findings=()) -> None:  # type: ignore[no-untyped-def]
    """The last scan window's funnel, per-team showback (allocated / wasted / efficiency) and conservation check."""
    from gpuwaste.cli_support.scan_report import funnel_text, unmet_text
    from gpuwaste.services.showback import funnel_figures, showback, unmet_by_resource

    _section(f"fleet funnel and showback · the last scan's window ({sl.window_start:%H:%M}–{sl.window_end:%H:%M} UTC)")
    out.print(funnel_text(funnel_figures(sl, "cluster", cfg.delivery)), highlight=False, markup=False)
    for row in showback(sl, findings, "team", cfg.delivery):
        d = row.as_dict()
        eff = "" if d["efficiency"] is None else f" · efficiency {d['efficiency']:.0%}"
        out.print(f"  {for_terminal(row.group)}: allocated {d['allocated_gpu_hours']:,.2f} GPU-h ${d['allocated_usd']:,.2f} · wasted "
                  f"{d['wasted_gpu_hours']:,.2f} GPU-h ${d['wasted_usd']:,.2f}{eff}", highlight=False, markup=False)
    if sl.unmet:
        out.print(unmet_text(unmet_by_resource(sl.unmet)), style="yellow", highlight=False, markup=False)
    out.print(sl.ledger.conservation.text(), style="dim" if sl.ledger.conservation.holds else "red", highlight=False,
              markup=False)


def _pending_line(result: local.ChainResult, why: list[str], *, kept: bool = True) -> str | None:
    parts = []
    if result.pending_alerts:
        parts.append(f"{result.pending_alerts} alert{'s' if result.pending_alerts != 1 else ''}")
    if result.pending_tickets:
        parts.append(f"{result.pending_tickets} ticket request{'s' if result.pending_tickets != 1 else ''}")
    if not parts:
        return None
    reason = f" ({', '.join(why)})" if why else ""
    if not kept:
        return f"not delivered{reason}: {' and '.join(parts)}"
    return (f"not delivered yet{reason}: {' and '.join(parts)} kept in the state; the next `gpuwaste run` that delivers"
            " sends them, once")


def run_local_chain(sources: local.Sources, cfg, *, cluster: str, times: list[datetime], window_s: int | None,  # type: ignore[no-untyped-def]
                    state: Path, output: Output, quiet: bool, slack: bool = False, tickets: bool = True,
                    summary: bool = True, wide: bool = False, state_given: bool = True,
                    state_kept: bool = True, recording: Path | None = None,
                    state_wait_s: float | None = None) -> local.ChainResult:
    """Run the chain and print each scan, its messages and tickets, then the daily summary; exits non-zero
    with a clear message on failure (exit `EXIT_UNDELIVERED` when a delivery failed). `quiet` keeps only the
    one-line alerts and ticket lines and delivers as without it. Modes that do not deliver (`-o json|csv`,
    `--no-slack`, `--no-tickets`) leave the deliveries pending in the state and say so on stderr. `recording` (the one
    scanned) is what `gpuwaste explain ID` is told to read when the state is not kept. `state_wait_s`: how long to wait
    for another run holding the same state (default `store.sqlite.STATE_LOCK_WAIT_S`), then exit 3 with one line."""

    from gpuwaste.bootstrap import local
    from gpuwaste.store.sqlite import STATE_LOCK_WAIT_S

    table = output is Output.table
    explain_args = explain_source(state if state_kept else None, recording)
    view = View(source=explain_args.strip() or None, verbose=VERBOSE.on)  # -v (global or the command's)

    def on_scan(report):  # type: ignore[no-untyped-def]
        if table and not quiet:
            render(report, output, quiet=quiet, wide=wide, config=cfg, view=view)

    delivering = table and slack
    deliver = _slack_stage(cfg, quiet=quiet) if delivering else None
    file_tickets = _ticket_stage(cfg, panels=not quiet, explain_args=explain_args) if table and tickets else None
    why = []
    if not table:
        why.append(f"-o {output.value}")
    else:
        if not slack:
            why.append("--no-slack")
        if not tickets:
            why.append("--no-tickets")
    try:
        result = local.run_chain(sources, cfg, state_path=state, cluster=cluster, times=times, window_s=window_s,
                                 on_scan=on_scan, on_told=_show_told if table else None, deliver=deliver,
                                 file_tickets=file_tickets, progress=progress_printer(quiet or not table),
                                 on_lock_wait=lambda line: err.print(line, style="yellow", highlight=False, markup=False),
                                 lock_wait_s=STATE_LOCK_WAIT_S if state_wait_s is None else state_wait_s)
    except StateInUseError as exc:
        fail(escape_markup(str(exc)), code=3)
    except StoreError as exc:
        fail(escape_markup(f"{exc}\nThe state file {state} cannot be used; check it, or use another --state."), code=3)
    except InputFormatError as exc:
        fail(f"{exc}\nThe recording is malformed at the place shown; fix or re-record it (gpuwaste record).")
    except SOURCE_ERRORS as exc:
        fail_source(exc)
    except PermanentError as exc:
        fail(str(exc))
    pending = _pending_line(result, why, kept=state_kept)
    if not table:
        render(result.reports[-1], output, quiet=True, wide=wide, config=cfg)
        if pending:
            err.print(pending, style="yellow", highlight=False)
    else:
        out.print(f"[bold]alerts[/] ({len(result.alerts)}; {result.new_alerts} new), ticket requests {len(result.tickets)}"
                  f", delivered {result.delivered_alerts} alerts and {result.delivered_tickets} ticket requests"
                  f" — state {state if state_kept else 'temporary (keep it with: gpuwaste demo --state FILE)'}",
                  highlight=False)
        if pending:
            err.print(pending, style="yellow", highlight=False)
        if not result.alerts and not result.delivered_alerts:
            hint = "" if state_given else " (run again later, or use --state FILE for a fresh store)"
            out.print(f"no new alerts: every finding is already known to the store {state}{hint}",
                      style="dim", highlight=False)
        if summary and not quiet:
            last = result.reports[-1] if result.reports else None
            print_summary(cfg, state, times[-1], showback=last.showback if last else None, findings=last.findings if last else ())
    if result.failed:
        err.print(f"{len(result.failed)} deliveries failed (first: {result.failed[0][1]}); they stay pending in "
                  f"{state} and the next run retries them", style="red", highlight=False)
        raise typer.Exit(EXIT_UNDELIVERED)
    return result


def explain_source(state: Path | None, recording: Path | None) -> str:
    """The arguments after `gpuwaste explain ID` that find a finding of this run again, shell-quoted: the state file
    when it is kept (it stores each finding as last seen), else the recording; empty when neither."""
    import shlex

    if state is not None:
        return f" --state {shlex.quote(str(state))}"
    if recording is not None:
        return f" -r {shlex.quote(str(recording))}"
    return ""


@app.command("run")
def run_cmd(
    recording: Annotated[Path | None, typer.Option("--recording", "-r", help="Run over a recording directory (else live sources).")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Configuration file (YAML/JSON).")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Cluster name (from --config).")] = None,
    prometheus: Annotated[str | None, typer.Option("--prometheus", "-p", help="Prometheus base URL (live).", envvar="GPUWASTE_PROMETHEUS_URL")] = None,
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="kubeconfig (live).", envvar="KUBECONFIG")] = None,
    context: Annotated[str | None, typer.Option("--context", help="kubeconfig context.")] = None,
    state: Annotated[Path | None, typer.Option("--state", help=f"SQLite lifecycle store, kept between runs; `summary` reads the same default ({DEFAULT_STATE}).")] = None,
    scans: Annotated[int, typer.Option("--scans", min=1, max=1000, metavar="N", help="Successive scans, --interval apart, the last at --at.")] = 1,
    interval: Annotated[str, typer.Option("--interval", help="Time between successive scans, e.g. 10m.")] = "10m",
    at: Annotated[str | None, typer.Option("--at", help="Time of the last scan (RFC 3339 / unix s). Default: recording end, or now.")] = None,
    window: Annotated[str | None, typer.Option("--window", "-w", help="Look-back window per scan, 10m or more, e.g. 1h.")] = None,
    output: Annotated[Output, typer.Option("--output", "-o", metavar="FORMAT", help="table (scans + alerts), or the last scan as json, csv, openmetrics or prometheus. JSON keeps exact decimal strings; CSV rounds decimals to at most 6 places (gpus_held, wasted_gpus columns).")] = Output.table,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the alerts and ticket lines: no scan tables, message previews or summary. Deliveries still happen (--no-slack / --no-tickets switch them off).")] = False,
    slack: Annotated[bool, typer.Option("--slack/--no-slack", help="Show each alert as the Slack message the owner gets (posted to Slack when delivery.slack has a bot token).")] = True,
    tickets: Annotated[bool, typer.Option("--tickets/--no-tickets", help="Handle ticket requests: show each ticket that would be opened for the owning team (created in Jira when delivery.jira is configured). "
                                                        "--no-tickets leaves them unfiled and unmarked: the next run requests them again.")] = True,
    summary: Annotated[bool, typer.Option("--summary/--no-summary", help="Print the daily summary of the state file after the scans.")] = True,
    wide: Annotated[bool, typer.Option("--wide", help="Keep the evidence and confidence columns on terminals narrower than 120 columns.")] = False,
    state_wait: Annotated[float, typer.Option("--state-wait", min=0, metavar="<s>", help="Seconds to wait for another `gpuwaste run` on the same --state to finish (one run per state file), then exit 3.")] = 120.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also print what each scan saw and why some pods got no verdict (grouped by cause).")] = False,
) -> None:
    """Run the whole pipeline locally (embedded queue + SQLite store): scans, pricing, dedupe, alerts."""
    from gpuwaste.bootstrap import local

    VERBOSE.on = VERBOSE.on or verbose

    cfg = config_or_exit(config)
    check_state_path(state or DEFAULT_STATE)
    step = timedelta(seconds=parse_positive(interval, "--interval"))
    window_s = parse_window(window) if window else None
    when = parse_time(at)
    if cluster and cfg.clusters:
        try:
            cfg.cluster(cluster)
        except ConfigError as exc:
            fail(f"--cluster: {exc}")
    try:
        if recording is not None:
            if not recording.exists():
                fail(f"{recording}: no such file or directory")
            sources = local.recording_sources(recording, cfg, cluster_name=cluster)
            assert sources.recording is not None
            cfg, _ = local.recording_config(cfg, sources, config_given=config is not None)
            check_recording(sources, when)
            when = when or sources.recording.end_time()
            window_s = window_s or sources.recording.meta.window_s or cfg.scan.window_s
            name = sources.recording.cluster
        else:
            if prometheus is None and not cfg.clusters:
                fail("nothing to run on: pass --recording DIR, or --prometheus URL (with a kubeconfig), or --config FILE. "
                     "Try `gpuwaste demo`.")
            cc = live_cluster(cfg, cluster, prometheus, kubeconfig, context)
            sources = local.live_sources(cc, cfg)
            when = when or datetime.now(tz=UTC).replace(microsecond=0)
            name = cc.name
    except InputFormatError as exc:
        fail(f"{exc}\nThe recording is malformed at the place shown; fix or re-record it.")
    except SOURCE_ERRORS as exc:
        fail_source(exc)
    except GpuWasteError as exc:
        fail(str(exc) + (f" {KUBE_HINT}" if "kube" in str(exc).lower() else ""))
    times = local.replay_times(when, scans=scans, interval=step)
    run_local_chain(sources, cfg, cluster=name, times=times, window_s=window_s, state=state or DEFAULT_STATE,
                    output=output, quiet=quiet, slack=slack, tickets=tickets, summary=summary, wide=wide,
                    state_given=state is not None, recording=recording, state_wait_s=state_wait)
