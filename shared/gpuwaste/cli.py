"""The `gpuwaste` command: scan a live cluster or a recording, run the local pipeline, record, and more."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup, TyperOption

from gpuwaste import __version__
from gpuwaste.errors import ConfigError, GpuWasteError, InputFormatError, PermanentError, SourceUnavailableError

if TYPE_CHECKING:  # imported where used: `gpuwaste --help` starts without pydantic models, boto3 or requests
    from gpuwaste.bootstrap import local
    from gpuwaste.models.findings import Finding
    from gpuwaste.services.scan import ScanReport
    from gpuwaste.settings import ClusterConfig, GpuWasteConfig

#: Width of stdout when it is not a terminal, COLUMNS is not set and no terminal is attached to stderr or stdin.
PIPE_WIDTH = 80
#: The SQLite lifecycle store `run` writes and `summary` reads when --state is not given.
DEFAULT_STATE = Path(".gpuwaste/state.db")
#: The detectors' rules use 10-minute averages: a shorter window cannot hold one.
MIN_WINDOW_S = 600
WINDOW_HINT = "the detectors' rules use 10-minute averages; use --window 10m or more"


def _stdout_width() -> int | None:
    """Rich's width for stdout: COLUMNS when set; auto on a terminal; else the width of the terminal on stderr or
    stdin (`gpuwaste scan | less` is as wide as the terminal); else PIPE_WIDTH."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return None
    for stream in (sys.stderr, sys.stdin):
        try:
            if stream is not None and stream.isatty():
                return os.get_terminal_size(stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            continue
    return PIPE_WIDTH


out = Console(width=_stdout_width())


class _Verbose:
    """`gpuwaste -v COMMAND`: set by the top-level option, read by commands that hide details by default."""

    on = False


VERBOSE = _Verbose()
err = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print an error that says what to do, and exit non-zero."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True, markup=True)
    raise typer.Exit(code)


def _plain(text: str) -> str:
    """Escape rich markup in a message that comes from input (file names, values)."""
    from rich.markup import escape

    return escape(text)


class GuardedGroup(TyperGroup):
    """The command group: user mistakes that reach the top of any command become one `error:` line, never
    a traceback (pydantic ValidationError, ConfigError, InputFormatError, OSError: exit 2; a source that
    cannot be reached: exit 3)."""

    def invoke(self, ctx):  # type: ignore[no-untyped-def]
        from pydantic import ValidationError

        from gpuwaste.settings import format_validation_error

        try:
            return super().invoke(ctx)
        except ValidationError as exc:
            fail(_plain(format_validation_error(exc, source="option").replace("\n", "; ")))
        except InputFormatError as exc:
            fail(_plain(f"{exc}") + "\nThe input is malformed at the place shown; fix or re-create it.")
        except SourceUnavailableError as exc:
            fail(_plain(str(exc)) + "\nCheck the URL, network access and credentials, then retry.", code=3)
        except PermanentError as exc:  # ConfigError and the other errors retrying cannot fix
            fail(_plain(str(exc)))
        except OSError as exc:
            if isinstance(exc, BrokenPipeError):
                raise
            where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
            fail(_plain(f"{where}{exc.strerror or exc}") + " (check the path and its permissions)")


def _display_type_rich(self: TyperOption, ctx):  # type: ignore[no-untyped-def]
    """Option types in --help, without the `<bool>` of on/off flags (a flag takes no value)."""
    if self.is_flag:
        return None
    return _ORIGINAL_DISPLAY_TYPE(self, ctx)


_ORIGINAL_DISPLAY_TYPE = TyperOption.display_type_rich
TyperOption.display_type_rich = _display_type_rich  # type: ignore[method-assign]

app = typer.Typer(
    name="gpuwaste",
    cls=GuardedGroup,
    help="Find GPUs that burn money on Kubernetes, say whose they are, and price the waste in USD/day.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class Output(StrEnum):
    """Output formats."""

    table = "table"
    json = "json"
    csv = "csv"
    openmetrics = "openmetrics"
    prometheus = "prometheus"


class Fmt(StrEnum):
    """Recording formats."""

    auto = "auto"
    text = "text"
    openmetrics = "openmetrics"


OUTPUT_HELP = ("table for people; JSON keeps exact decimal strings (USD, GPU shares); CSV rounds decimals to at most "
               "6 places and has gpus_held (GPUs the workload holds) and wasted_gpus; openmetrics / prometheus print "
               "gpuwaste's metric families (prometheus: the format of node-exporter's textfile collector).")

_DURATION = re.compile(r"^(\d+)([smhd])$")


def parse_duration(text: str) -> int:
    """'90m', '1h', '3600s', '7d' → seconds.

    Raises:
        typer.BadParameter: on anything else.
    """
    m = _DURATION.match(text.strip())
    if not m:
        raise typer.BadParameter(f"{text!r}: use a number and a unit, e.g. 30m, 1h, 7d")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def parse_time(text: str | None) -> datetime | None:
    """An RFC 3339 time or a unix timestamp (seconds) → UTC datetime; None passes through.

    Raises:
        typer.BadParameter: when the text is neither.
    """
    if text is None:
        return None
    try:
        if re.fullmatch(r"\d+(\.\d+)?", text):
            return datetime.fromtimestamp(float(text), tz=UTC)
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r}: expected RFC 3339 (2024-01-01T01:20:00Z) or unix seconds") from exc
    if t.tzinfo is None:
        raise typer.BadParameter(f"{text!r}: add a time zone (e.g. Z for UTC)")
    return t.astimezone(UTC)


def parse_window(text: str, option: str = "--window") -> int:
    """A scan window ('1h', '90m') → seconds; at least MIN_WINDOW_S.

    Raises:
        typer.Exit: (exit 2, via `fail`) for a malformed, zero or too short window.
    """
    try:
        seconds = parse_duration(text)
    except typer.BadParameter as exc:
        fail(f"{option} {_plain(exc.message)}")
    if seconds < MIN_WINDOW_S:
        fail(f"{option} {text}: too short; {WINDOW_HINT.replace('--window', option)}")
    return seconds


def parse_positive(text: str, option: str) -> int:
    """A duration option that must be longer than zero ('30s', '10m', '1d') → seconds.

    Raises:
        typer.Exit: (exit 2, via `fail`) for a malformed or zero duration.
    """
    try:
        seconds = parse_duration(text)
    except typer.BadParameter as exc:
        fail(f"{option} {_plain(exc.message)}")
    if seconds <= 0:
        fail(f"{option} {text}: must be longer than zero, e.g. 30s, 10m, 1h")
    return seconds


def plural(n: int, word: str) -> str:
    """'1 GPU', '2 GPUs'."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def check_prometheus_url(url: str) -> str:
    """The URL when it starts with http:// or https://.

    Raises:
        typer.Exit: (exit 2) otherwise.
    """
    if not re.match(r"^https?://", url):
        fail(f"--prometheus {url!r}: the URL must start with http:// or https:// (e.g. http://prometheus.monitoring:9090)")
    return url


def check_kubeconfig(path: Path | None) -> None:
    """A --kubeconfig that exists and holds a YAML mapping.

    Raises:
        typer.Exit: (exit 2) otherwise, saying what to do.
    """
    if path is None:
        return
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        fail(f"--kubeconfig {path}: cannot read it ({getattr(exc, 'strerror', None) or type(exc).__name__}). {KUBE_HINT}")
    if not isinstance(doc, dict) or "clusters" not in doc:
        fail(f"--kubeconfig {path}: not a kubeconfig (no 'clusters'). {KUBE_HINT}")


KUBE_HINT = ("Pass --kubeconfig FILE (and --context NAME), or scan without the API: --recording DIR, "
             "or a telemetry file with --cluster-json FILE (kubectl get pods,nodes -A -o json).")


def quiet_http_logs(verbose: bool) -> None:
    """Keep urllib3's retry WARNING lines out of the CLI output unless --verbose (the final error says it all)."""
    logging.getLogger("urllib3").setLevel(logging.DEBUG if verbose else logging.ERROR)


def _config(path: Path | None) -> GpuWasteConfig:
    from gpuwaste.settings import load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        fail(str(exc))


def _progress(quiet: bool):  # type: ignore[no-untyped-def]
    def show(msg: str) -> None:
        if not quiet:
            err.print(f"[dim]… {msg}[/]", highlight=False)

    return show


def _telemetry_lines(report: ScanReport) -> None:
    """How the telemetry was read (plan, sample spacing, buckets) and any unreadable samples, with where they are."""
    q = report.telemetry_quality
    if not q:
        return
    spacing = q.get("sample_interval_s")
    parts = [f"plan: {q['plan']}" if q.get("plan") else "", f"{report.query_count} queries" if report.query_count else "",
             f"a sample every {spacing:g} s ({'inferred from the data' if q.get('sample_interval_inferred') else 'configured'})" if spacing else "",
             f"{q['bucket_s'] // 60}-min buckets" if q.get("bucket_s") else ""]
    out.print("telemetry: " + " · ".join(p for p in parts if p), highlight=False, style="dim", markup=False)
    problems = q.get("problems") or []
    if problems:
        out.print(f"[yellow]{q['unreadable_samples']} unreadable sample(s) were left out (never read as idle):[/]", highlight=False)
        for p in problems[:5]:
            out.print(f"  {p['metric']} at {p['where']}: {p['reason']} ({p['count']} sample(s))", highlight=False, markup=False, soft_wrap=True)
        if len(problems) > 5:
            out.print(f"  … and {len(problems) - 5} more (--output json lists them all)", highlight=False, markup=False)


class SortKey(StrEnum):
    """Orders of the findings table."""

    usd = "usd"
    gpus = "gpus"
    owner = "owner"
    namespace = "namespace"
    kind = "kind"
    workload = "workload"


class GroupBy(StrEnum):
    """What the scan's rollup groups by."""

    team = "team"
    namespace = "namespace"
    kind = "kind"


@dataclass(frozen=True)
class View:
    """What of a scan report is shown, and how (filters, order, grouping, detail)."""

    namespaces: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    sort: SortKey = SortKey.usd
    top: int | None = None
    group_by: GroupBy = GroupBy.team
    verbose: bool = False
    source: str | None = None  # what `gpuwaste explain ID` needs to find the finding again (`-r DIR`)


def team_function(config: GpuWasteConfig | None = None):  # type: ignore[no-untyped-def]
    """finding → its team: the routing rules (annotations, labels, team/namespace maps), else the namespace."""
    from gpuwaste.services.routing import route_for
    from gpuwaste.settings import GpuWasteConfig
    from gpuwaste.sinks import terminal

    settings = (config or GpuWasteConfig()).delivery

    def team(f):  # type: ignore[no-untyped-def]
        owner = route_for(f, settings).team or terminal.owner_of(f)
        return terminal.NODE_OWNER if owner.startswith("node ") else owner

    return team


def select(findings, view: View, team) -> list:  # type: ignore[no-untyped-def]
    """The findings `view` keeps (namespace, team and kind filters), in its order (sort), at most `top`."""
    from gpuwaste.people import parse_kind

    kinds = set()
    for k in view.kinds:
        kind = parse_kind(k)
        if kind is None:
            from gpuwaste.models.findings import WasteKind

            fail(f"--kind {_plain(k)}: not a kind; use one of " + ", ".join(w.value for w in WasteKind))
        kinds.add(kind)
    kept = [f for f in findings
            if (not view.namespaces or (f.subject.namespace or "") in view.namespaces)
            and (not view.teams or team(f) in view.teams)
            and (not kinds or f.kind in kinds)]
    order = {
        SortKey.usd: lambda f: (-(f.usd_per_day if f.usd_per_day is not None else -1), f.fingerprint),
        SortKey.gpus: lambda f: (-f.wasted_gpu_share, f.fingerprint),
        SortKey.owner: lambda f: (team(f), f.fingerprint),
        SortKey.namespace: lambda f: (f.subject.namespace or "~", f.fingerprint),
        SortKey.kind: lambda f: (f.kind.value, f.fingerprint),
        SortKey.workload: lambda f: (f.subject.workload_name or f.subject.node or "", f.fingerprint),
    }[view.sort]
    return sorted(kept, key=order)


def render(report: ScanReport, output: Output, *, min_usd: float = 0.0, quiet: bool = False, wide: bool = False,
           dated: str | None = None, view: View | None = None, config: GpuWasteConfig | None = None) -> None:
    """Print a scan report in the chosen format.

    The table format ends with what matters: one header line (`view.verbose`: the inventory too), data-quality
    problems, the findings (one line each), price caveats, the rollup by team (or `view.group_by`) and, last,
    the total per day and per month.

    Args:
        wide: the node, evidence and confidence columns whatever the width.
        dated: replaces "one scrape dated …" in the header (an undated scrape says where its time came from).
        view: filters, order, grouping and detail (default: everything, costliest first, by team).
    """
    from decimal import Decimal

    from gpuwaste.people import kind_label, no_codes, plain
    from gpuwaste.people import when as when_text
    from gpuwaste.sinks import terminal

    view = view or View()
    team = team_function(config)
    chosen = select(report.findings, view, team)
    findings = [f for f in chosen if f.usd_per_day is None or f.usd_per_day >= Decimal(str(min_usd))]
    if output in (Output.openmetrics, Output.prometheus):
        from gpuwaste.settings import GpuWasteConfig

        sys.stdout.buffer.write(_exposition(report, findings, config or GpuWasteConfig(),
                                            openmetrics=output is Output.openmetrics))
        sys.stdout.flush()
        return
    if output is Output.json:
        inv = report.inventory
        sys.stdout.write(terminal.to_json(
            findings,
            cluster=report.cluster,
            scan_id=report.scan_id,
            eval_time=report.eval_time.isoformat(),
            window_s=report.window_s,
            inventory=inv.__dict__,
            query_count=report.query_count,
            telemetry=report.telemetry_quality,
            no_verdict=[nv.__dict__ for nv in report.no_verdict],
        ) + "\n")
        return
    if output is Output.csv:
        sys.stdout.write(terminal.to_csv(findings))
        return
    inv = report.inventory
    if inv.single_instant:
        span = dated or f"one scrape dated {when_text(report.eval_time)}"
    else:
        span = f"{report.window_s // 60} min to {when_text(report.eval_time)}"
    out.print(Text.assemble((plain(report.cluster), "bold"), f" · {plain(span)} · {plural(inv.physical_gpus, 'GPU')} on "
                            f"{plural(inv.nodes, 'node')} · {inv.pods_holding_gpus} "
                            f"{'pod holds' if inv.pods_holding_gpus == 1 else 'pods hold'} GPUs"))
    if view.verbose:
        models = ", ".join(f"{'unknown (no modelName label)' if k == 'unknown' else k}×{v}" for k, v in sorted(inv.models.items()))
        out.print(Text(f"{plural(inv.mig_instances, 'MIG instance')} · models: {plain(models) or 'none'}", style="dim"))
        out.print(Text("activity signal per device: "
                       + ", ".join(f"{k.replace('DCGM_FI_', '')}×{v}" for k, v in sorted(inv.activity_signals.items()))
                       + " · attribution: " + (", ".join(f"{k}×{v}" for k, v in sorted(inv.attribution.items())) or "none")
                       + (f" · allocation: {inv.allocation}" if inv.allocation else ""),
                       style="dim"))
        if inv.metrics_present:
            dcgm = [m.removeprefix("DCGM_FI_") for m in inv.metrics_present if m.startswith("DCGM_FI_")]
            other = [m for m in inv.metrics_present if not m.startswith("DCGM_FI_")]
            out.print(Text(f"signals present ({len(inv.metrics_present)}): " + ", ".join(dcgm + other), style="dim"))
        if report.query_count:
            out.print(Text(f"{report.query_count} Prometheus queries", style="dim"))
    for note in inv.allocation_notes:  # capacity that is not GPUs, claims nobody uses, RBAC to grant (issue 11)
        out.print(Text(f"allocation note: {plain(note)}", style="dim"))
    if report.cluster_source:
        out.print(Text(f"cluster state: {plain(report.cluster_source)}", style="dim"))
    for note in report.cluster_notes:
        out.print(Text(f"data quality: {plain(note)}", style="yellow"))
    _telemetry_lines(report)
    if inv.single_instant:
        out.print("[yellow]The telemetry holds ONE sample per series: it shows what is there, not sustained use; "
                  "no idle or under-used verdict is possible from one sample.[/]")
    if report.no_verdict and not quiet:
        subjects: dict[str, set[str]] = {}
        for nv in report.no_verdict:
            reason = no_codes(nv.reason)
            if inv.single_instant:  # one sample: a longer window cannot help, so no look-back hint
                reason = re.sub(r"\s*\((scan with --window|needs \d+ day)[^)]*\)", "", reason)
            subjects.setdefault(reason, set()).add(nv.subject)  # count subjects (pods, nodes), not detectors
        every = set().union(*subjects.values())
        if view.verbose:
            out.print(Text("no verdict: " + "; ".join(f"{len(v)}× {r}" for r, v in sorted(subjects.items())), style="dim"))
        else:
            out.print(Text(f"no verdict on {len(every)} pods/nodes (-v says why)" if len(every) != 1
                           else "no verdict on 1 pod/node (-v says why)", style="dim"))
    dq = terminal.data_quality_table(findings, width=out.width, verbose=view.verbose)
    if dq is not None:
        out.print(dq)
    if inv.single_instant and not any(f.kind.is_waste for f in findings):
        return
    waste = [f for f in findings if f.kind.is_waste]
    shown = waste[: view.top] if view.top else waste
    ids = terminal.short_ids(report.findings)
    if shown:
        title = "GPU waste findings" + (f" (top {len(shown)} of {len(waste)})" if len(shown) < len(waste) else "")
        out.print(terminal.findings_table(shown, width=out.width, wide=wide, ids=ids, owner=team, title=title))
    else:
        out.print(Text("no waste found" + (" with these filters" if len(chosen) < len(report.findings) else ""), style="green"))
    for line in terminal.price_caveat_lines(shown):
        out.print(Text(line, style="yellow"))
    hidden = len(chosen) - len(findings)
    if hidden:
        out.print(Text(f"{hidden} finding(s) under ${min_usd:g}/day hidden by --min-usd", style="dim"))
    if shown and not quiet:
        where = f" {view.source}" if view.source else ""
        out.print(Text(f"why: gpuwaste explain ID{where}", style="dim"))
    key = {GroupBy.team: team, GroupBy.namespace: lambda f: f.subject.namespace or "(node)",
           GroupBy.kind: lambda f: kind_label(f.kind)}[view.group_by]
    terminal.print_rollup(out, waste, key=key, by=view.group_by.value, window_s=report.window_s)


def live_cluster(cfg: GpuWasteConfig, cluster: str | None, prometheus: str | None, kubeconfig: Path | None,
                 context: str | None) -> ClusterConfig:
    """The cluster a live scan or run reads: from --config (by --cluster, else the first), with the command-line
    Prometheus URL and kubeconfig/context applied on top.

    Raises:
        ConfigError: when --cluster names no configured cluster.
    """
    from gpuwaste.settings import ClusterConfig

    if prometheus:
        check_prometheus_url(prometheus)
    check_kubeconfig(kubeconfig)
    cc = cfg.cluster(cluster) if (cluster and cfg.clusters) else (cfg.clusters[0] if cfg.clusters else ClusterConfig(name=cluster or "cluster"))
    if prometheus:
        from gpuwaste.settings import PrometheusSettings

        cc.prometheus = PrometheusSettings(url=prometheus)
    if kubeconfig or context:
        cc.kubernetes.kubeconfig = str(kubeconfig) if kubeconfig else cc.kubernetes.kubeconfig
        cc.kubernetes.context = context or cc.kubernetes.context
    return cc


def _exposition(report: ScanReport, findings: list[Finding], config: GpuWasteConfig, *, openmetrics: bool) -> bytes:
    """The scan as gpuwaste's metric families (the builder `gpuwaste serve` uses): OpenMetrics, or the Prometheus
    text format that node-exporter's textfile collector reads (docs/metrics.md)."""
    from gpuwaste.services.metrics import health_of_scan, snapshot_of_scan
    from gpuwaste.sinks.prometheus_metrics import render_openmetrics, render_text

    health = health_of_scan(report.cluster, at=datetime.now(tz=UTC).replace(microsecond=0),
                            duration_s=sum(report.timings_s.values()), window_s=report.window_s,
                            gpus=report.inventory.physical_gpus, findings=findings,
                            no_verdict_detectors=[nv.detector for nv in report.no_verdict])
    snapshot = snapshot_of_scan(findings, health, config.delivery, top=config.serve.top_workloads,
                                team_budgets=dict(config.serve.team_budgets_usd_per_day),
                                default_budget=config.serve.default_team_budget_usd_per_day, version=__version__)
    return render_openmetrics(snapshot) if openmetrics else render_text(snapshot)


def _run_scan(service, at: datetime, output: Output, min_usd: float, quiet: bool, *, wide: bool = False,  # type: ignore[no-untyped-def]
              dated: str | None = None, view: View | None = None, config: GpuWasteConfig | None = None) -> ScanReport:
    try:
        report: ScanReport = service.scan(at=at)
    except InputFormatError as exc:
        fail(f"{_plain(str(exc))}\nThe recording is malformed at the place shown; fix or re-record it (gpuwaste record).")
    except SourceUnavailableError as exc:
        fail(f"{_plain(str(exc))}\nCheck the URL, network access and credentials, then retry.", code=3)
    except PermanentError as exc:
        fail(_plain(str(exc)))
    render(report, output, min_usd=min_usd, quiet=quiet, wide=wide, dated=dated, view=view, config=config)
    return report


class PodLabel(StrEnum):
    """The label of DCGM series that names the workload's pod."""

    auto = "auto"
    pod = "pod"
    exported_pod = "exported_pod"
    pod_name = "pod_name"


#: How far past the last sample of a recording --at may be (one scrape interval or so of slack, plus staleness).
AT_SLACK = timedelta(minutes=5)


def held_before(sources: local.Sources, when: datetime) -> int | None:
    """Seconds of telemetry a dated recording holds up to `when` (None: live, undated or empty)."""
    rec = sources.recording
    if rec is None:
        return None
    span = rec.time_range()
    if span is None or rec.undated():
        return None
    return int((min(when, span[1]) - span[0]).total_seconds() + rec.scrape_interval_s)


def check_window(sources: local.Sources, when: datetime, window_s: int, *, given: bool = True) -> None:
    """Refuse a window longer than the recording holds before `when`: one clear error, not a row per pod.

    Raises:
        typer.Exit: (exit 2) saying the longest window that fits.
    """
    held = held_before(sources, when)
    if held is None or window_s <= held * 1.05:
        return
    fits = max(10, held // 60)
    origin = "--window" if given else "the recording's window"
    fail(f"{origin} {_duration(window_s)} is longer than the recording holds before {when:%Y-%m-%d %H:%M} UTC "
         f"({_duration(held)} of telemetry): pass --window {fits}m or less" + (
             f", or an --at at least {_duration(window_s)} after the recording starts." if given else "."))


def warn_recording(sources: local.Sources, when: datetime, window_s: int, *, quiet: bool = False) -> None:
    """Warn (stderr) when a recording carries no cluster state."""
    if sources.recording is None or quiet:
        return
    if getattr(sources.cluster, "cluster_file", "") is None:
        err.print("[yellow]warning:[/] the recording has no cluster state (no cluster.json, no kube-state-metrics series): "
                  "GPUs cannot be tied to pods or "
                  "nodes; pass --cluster-json FILE (kubectl get pods,nodes -A -o json) to judge them.", highlight=False)


def _duration(seconds: int) -> str:
    if seconds % 60:
        return f"{seconds // 60}m" if seconds >= 60 else f"{seconds}s"
    if seconds % 86400 == 0:
        return f"{seconds // 86400}d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    return f"{seconds // 60}m"


def check_recording(sources: local.Sources, when: datetime | None) -> str | None:
    """Refuse recordings that cannot be scanned, and --at outside the recorded time; return the header text for
    an undated scrape (None when the recording is dated).

    Raises:
        typer.Exit: (exit 2) with what to do.
    """
    rec = sources.recording
    assert rec is not None
    rec.parsed(when)  # a bare scrape's samples are stamped at --at when given, else at the file's modification time
    if rec.dcgm_series() == 0:
        cluster_file = getattr(sources.cluster, "cluster_file", None)
        if cluster_file is None:
            fail(f"no DCGM series found in {_plain(str(rec.telemetry_file))} (is it a dcgm-exporter scrape?). "
                 "Scrape dcgm-exporter's /metrics (curl http://NODE:9400/metrics) or record with `gpuwaste record`.")
    if rec.undated():
        at = rec._default_time(when)
        origin = "set by --at" if when is not None else "file modification time; pass --at to set it"
        return f"undated scrape (no timestamps), evaluated at {at:%Y-%m-%d %H:%M} UTC ({origin})"
    span = rec.time_range()
    if when is not None and span is not None:
        first, last = span
        if when < first or when > last + AT_SLACK:
            fail(f"--at {when:%Y-%m-%dT%H:%M:%SZ} is outside the recording ({first:%Y-%m-%dT%H:%M:%SZ} → "
                 f"{last:%Y-%m-%dT%H:%M:%SZ}); pass an --at inside that range, or leave it out to scan at the recording's end.")
    return None


def _input_hint(message: str) -> str:
    """Parser messages name the recording-format option by its old name; say the one `scan` documents."""
    return message.replace("pass --format ", "pass --input-format ")


@app.command()
def scan(
    recording: Annotated[Path | None, typer.Option("--recording", "-r", help="Scan a recording (directory from `gpuwaste record`, an exposition file, or a Prometheus /api/v1/query(_range) JSON answer).")] = None,
    cluster_file: Annotated[Path | None, typer.Option("--cluster-json", help="Cluster objects from a file (kubectl get pods,nodes -A -o json) instead of the Kubernetes API; with --recording or --prometheus.")] = None,
    prometheus: Annotated[str | None, typer.Option("--prometheus", "-p", help="Prometheus base URL, http:// or https:// (live scan).", envvar="GPUWASTE_PROMETHEUS_URL")] = None,
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="kubeconfig file (live scan; default ~/.kube/config).", envvar="KUBECONFIG")] = None,
    context: Annotated[str | None, typer.Option("--context", help="kubeconfig context.")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Configuration file (YAML/JSON); see `gpuwaste config-schema`.")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Cluster to scan (must be in --config when given, else a label for the report).")] = None,
    at: Annotated[str | None, typer.Option("--at", help="Evaluation time (RFC 3339 or unix seconds). Default: the recording's end, or now for live scans.")] = None,
    window: Annotated[str | None, typer.Option("--window", "-w", help="Look-back window, 10m or more, e.g. 1h, 90m (default: the recording's window, else 1h).")] = None,
    input_format: Annotated[Fmt, typer.Option("--input-format", help="Recording format: OpenMetrics has second timestamps, text has milliseconds (auto also reads Prometheus API JSON).")] = Fmt.auto,
    old_format: Annotated[Fmt | None, typer.Option("--format", hidden=True, help="Old name of --input-format.")] = None,
    pod_label: Annotated[PodLabel | None, typer.Option("--pod-label", help="Workload label on DCGM series (auto: exported_pod when present, else pod).")] = None,
    output: Annotated[Output, typer.Option("--output", "-o", help=OUTPUT_HELP)] = Output.table,
    namespace: Annotated[list[str] | None, typer.Option("--namespace", "-n", metavar="NAMESPACE", help="Only findings in this namespace (repeatable).")] = None,
    team: Annotated[list[str] | None, typer.Option("--team", metavar="TEAM", help="Only findings of this team (repeatable; teams as routing sees them).")] = None,
    kind: Annotated[list[str] | None, typer.Option("--kind", "-k", metavar="KIND", help="Only findings of this kind (repeatable): idle, under-used, unallocated, stalled, wrong-hw, cpu-bound, kv-cache, serving-idle, orphaned, power, bandwidth (or the JSON names).")] = None,
    sort: Annotated[SortKey, typer.Option("--sort", help="Order of the findings table (usd: costliest first).")] = SortKey.usd,
    top: Annotated[int | None, typer.Option("--top", min=1, help="Show only the first N findings (the rollup and total still count all).")] = None,
    group_by: Annotated[GroupBy, typer.Option("--group-by", help="What the rollup at the end groups by.")] = GroupBy.team,
    min_usd: Annotated[float, typer.Option("--min-usd", min=0, help="Hide findings below this USD/day (≥ 0).")] = 0.0,
    truth: Annotated[Path | None, typer.Option("--truth", help="Compare the findings with a truth.json (from `gpuwaste generate-fleet`); exit 1 on a mismatch.")] = None,
    wide: Annotated[bool, typer.Option("--wide", help="Show the node, evidence and confidence columns whatever the terminal width.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also print what the scan saw (models, signals, attribution) and why some pods got no verdict.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress messages.")] = False,
) -> None:
    """Scan a cluster (live, or from a recording) and print priced findings, the waste per team and the total."""
    from gpuwaste.bootstrap import local
    from gpuwaste.settings import ClusterConfig

    fmt = old_format or input_format
    cfg = _config(config)
    if cluster and cfg.clusters:
        try:
            cfg.cluster(cluster)
        except ConfigError as exc:
            fail(f"--cluster: {_plain(str(exc))}")
    if pod_label:
        for c in cfg.clusters:
            c.labels.pod_label = pod_label.value
        if not cfg.clusters:
            from gpuwaste.settings import TelemetryLabels

            cfg.clusters.append(ClusterConfig(name=cluster or "recording", labels=TelemetryLabels(pod_label=pod_label.value)))
    window_s = parse_window(window) if window else None
    when = parse_time(at)
    truth_doc = _read_truth(truth) if truth is not None else None
    progress = _progress(quiet or output is not Output.table)
    dated: str | None = None
    source_hint: str | None = None
    if cluster_file is not None and not cluster_file.exists():
        fail(f"--cluster-json {_plain(str(cluster_file))}: no such file")
    if recording is not None:
        if not recording.exists():
            fail(f"{_plain(str(recording))}: no such file or directory")
        try:
            sources = local.recording_sources(recording, cfg, cluster_file=cluster_file, fmt=fmt.value, cluster_name=cluster, progress=progress)
            assert sources.recording is not None
            dated = check_recording(sources, when)
            if when is None:
                when = sources.recording.end_time()
        except InputFormatError as exc:
            fail(f"{_plain(_input_hint(str(exc)))}\nThe recording is malformed at the place shown; fix or re-record it.")
        cfg, note = local.recording_config(cfg, sources, config_given=config is not None)
        if note and output is Output.table and not quiet:
            err.print(f"[dim]{_plain(note)}[/]", highlight=False)
        window_given = window_s is not None
        if window_s is None and sources.recording.meta.window_s:
            window_s = sources.recording.meta.window_s
        if window_s is None:  # neither --window nor recording.json: the default, or what the data holds if less
            held = held_before(sources, when)
            window_s = cfg.scan.window_s if held is None else max(MIN_WINDOW_S, min(cfg.scan.window_s, held))
        else:
            check_window(sources, when, window_s, given=window_given)
        warn_recording(sources, when, window_s, quiet=quiet)
        source_hint = f"-r {_plain(str(recording))}"
    else:
        if prometheus is None and not cfg.clusters:
            fail("nothing to scan: pass --recording DIR, or --prometheus URL (cluster state from kube-state-metrics, "
                 "and from the Kubernetes API when a kubeconfig is found), or --config FILE. "
                 "Try `gpuwaste demo` for the bundled demo fleet.")
        cc = live_cluster(cfg, cluster, prometheus, None if cluster_file else kubeconfig, context)
        try:
            sources = local.live_sources(cc, cfg, cluster_file=cluster_file)
        except SourceUnavailableError as exc:
            fail(f"{_plain(str(exc))}\nCheck the URL, network access and credentials, then retry.", code=3)
        except GpuWasteError as exc:
            hint = f" {KUBE_HINT}" if "kube" in str(exc).lower() else ""
            fail(_plain(str(exc)) + hint)
        when = when or datetime.now(tz=UTC).replace(microsecond=0)
    service = local.scan_service(sources, cfg, window_s=window_s, progress=progress)
    view = View(namespaces=tuple(namespace or ()), teams=tuple(team or ()), kinds=tuple(kind or ()), sort=sort, top=top,
                group_by=group_by, verbose=verbose or VERBOSE.on, source=source_hint)
    report = _run_scan(service, when, output, min_usd, quiet, wide=wide, dated=dated, view=view, config=cfg)
    if recording is None and not any(m.startswith("DCGM_") for m in report.inventory.metrics_present):
        err.print(f"no DCGM telemetry in Prometheus for the {(window_s or cfg.scan.window_s) // 60} min ending "
                  f"{when:%Y-%m-%d %H:%M} UTC: no GPU was judged, so $0 is not an all-clear. Check that dcgm-exporter is "
                  "scraped by this Prometheus (`gpuwaste doctor --prometheus URL`), or pass an --at inside the data.",
                  style="red", highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(EXIT_NO_TELEMETRY)
    if truth_doc is not None:
        _print_truth(report, truth_doc, to=out if output is Output.table else err)


#: `scan` of a live Prometheus whose window holds no DCGM series: nothing was judged (never reported as "no waste").
EXIT_NO_TELEMETRY = 5


def _read_truth(path: Path) -> list[dict]:  # type: ignore[type-arg]
    """A truth.json list (from `generate-fleet` / the demo).

    Raises:
        typer.Exit: (exit 2) when it cannot be read or is not a list of objects.
    """
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        fail(f"--truth {_plain(str(path))}: {exc.strerror}")
    except json.JSONDecodeError as exc:
        fail(f"--truth {_plain(str(path))}: not JSON ({exc.msg} at line {exc.lineno}); pass the truth.json of a generated fleet")
    if not isinstance(doc, list) or not all(isinstance(t, dict) for t in doc):
        fail(f"--truth {_plain(str(path))}: expected a list of objects (the truth.json of `gpuwaste generate-fleet`)")
    return doc


def _print_truth(report: ScanReport, truth: list[dict], *, to: Console) -> None:  # type: ignore[type-arg]
    """Print the comparison with the ground truth; exit 1 when it does not match."""
    from gpuwaste.fleet.truth import compare

    result = compare(report.findings, truth)
    style = "green" if result.ok else "red"
    to.print(f"[{style}]ground truth: {result.matched}/{result.expected} expected findings found, "
             f"{len(result.unexpected)} unexpected, {len(result.missed)} missed[/]", highlight=False)
    for line in result.missed + result.unexpected:
        to.print(f"  {line}", style="red", highlight=False, markup=False)
    if not result.ok:
        raise typer.Exit(1)


@app.command()
def demo(
    output: Annotated[Output, typer.Option("--output", "-o", help=OUTPUT_HELP)] = Output.table,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the alerts, ticket lines and the ground-truth check: no scan tables, Slack previews or summary.")] = False,
    state: Annotated[Path | None, typer.Option("--state", help="Keep the demo's state file here (with its 30 days of history), e.g. for `gpuwaste summary --state FILE -o html --open`.")] = None,
) -> None:
    """Run the whole local pipeline on the bundled demo fleet (no setup): scan → price → dedupe → alerts,
    with a temporary SQLite store holding 30 days of generated history (so the summary has a trend), and check the
    findings against the fleet's ground truth."""
    import tempfile

    from gpuwaste.bootstrap import local
    from gpuwaste.commands.run import run_local_chain
    from gpuwaste.settings import GpuWasteConfig

    path = local.demo_recording()
    sources = local.recording_sources(path, GpuWasteConfig())
    assert sources.recording is not None
    cfg, _ = local.recording_config(GpuWasteConfig(), sources, config_given=False)
    with tempfile.TemporaryDirectory(prefix="gpuwaste-demo-") as tmp:
        path_state = state or Path(tmp) / "state.db"
        if state is not None and state.exists():
            fail(f"--state {_plain(str(state))}: exists; the demo writes a fresh state file (remove it or choose another path)")
        seed_history(path_state, sources.recording.end_time(), cluster=sources.recording.cluster)
        chain = run_local_chain(sources, cfg, cluster=sources.recording.cluster, times=[sources.recording.end_time()],
                                window_s=sources.recording.meta.window_s, state=path_state, output=output,
                                quiet=quiet, slack=True, state_kept=state is not None)
    report = chain.reports[-1]
    if output is Output.table:
        _print_truth(report, json.loads((path / "truth.json").read_text()), to=out)
        from gpuwaste.sinks import terminal

        # the demo ends as `scan` does: what the waste costs per team, then the total
        out.rule("[bold]waste now · per team and total[/]", align="left", style="dim")
        terminal.print_rollup(out, [f for f in report.findings if f.kind.is_waste], key=team_function(cfg), by="team",
                              window_s=report.window_s)


def seed_history(state: Path, end: datetime, *, cluster: str) -> int:
    """Write the demo's 30 days of past findings (`fleet.history`) into a new state file; returns how many."""
    from gpuwaste.fleet.history import demo_history
    from gpuwaste.store.sqlite import SqliteFindingStore

    state.parent.mkdir(parents=True, exist_ok=True)
    store = SqliteFindingStore(state)
    try:
        records = demo_history(end=end, cluster=cluster)
        for record in records:
            store.put_new(record)
    finally:
        store.close()
    return len(records)


class Layout(StrEnum):
    """Fleet layouts of `generate-fleet`."""

    demo = "demo"
    random = "random"
    scorecard = "scorecard"


@app.command("generate-fleet")
def generate_fleet_cmd(
    out_dir: Annotated[Path, typer.Argument(help="Directory to write the recording into (created; must be empty or absent unless --force).")],
    nodes: Annotated[int, typer.Option(help="random: nodes; scorecard: repetitions of the catalogue (1 or more); demo: ignored.")] = 10,
    layout: Annotated[Layout, typer.Option(help="demo: the hand-designed demo fleet; random: NODES nodes with a scenario mix; "
                                                "scorecard: every waste kind plus look-alikes.")] = Layout.random,
    seed: Annotated[int, typer.Option(help="Random seed (same seed, same fleet).")] = 7,
    compress: Annotated[bool, typer.Option("--compress/--no-compress", help="gzip the telemetry file (telemetry.om.gz).")] = True,
    force: Annotated[bool, typer.Option("--force", help="Write into a non-empty OUT_DIR (its recording files are replaced).")] = False,
) -> None:
    """Write a synthetic fleet recording (telemetry, cluster objects, ground truth) that `scan --recording DIR --truth DIR/truth.json` checks."""
    from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording

    if nodes < 1:
        fail(f"--nodes {nodes}: must be 1 or more")
    if out_dir.exists() and not out_dir.is_dir():
        fail(f"{_plain(str(out_dir))}: exists and is not a directory; choose a directory path")
    if out_dir.exists() and any(out_dir.iterdir()) and not force:
        fail(f"{_plain(str(out_dir))}: not empty; choose another directory or pass --force")
    fleet = generate_fleet(FleetSpec(layout=layout.value, nodes=nodes, seed=seed, cluster=f"{layout.value}-{nodes}"))
    write_recording(fleet, out_dir, compress=compress)
    out.print(f"wrote {_plain(str(out_dir))} ({plural(len({g.uuid for g in fleet.gpus}), 'GPU')}, "
              f"{plural(len(fleet.expected()), 'expected finding')}); check it with: "
              f"gpuwaste scan --recording {_plain(str(out_dir))} --truth {_plain(str(out_dir / 'truth.json'))}", highlight=False,
              soft_wrap=True)


@app.command("config-schema")
def config_schema() -> None:
    """Print the JSON Schema of the configuration document."""
    from gpuwaste.settings import config_json_schema

    sys.stdout.write(config_json_schema() + "\n")


def version_callback(value: bool) -> None:
    """Print the version and exit."""
    if value:
        out.print(f"gpuwaste {__version__}")
        raise typer.Exit()


def _log_to_stderr(level: int) -> None:
    """Log to the current stderr: one handler of ours on the root logger, replaced at each invocation (an earlier
    invocation's stderr may be closed by now — tests, embedding), leaving other handlers alone."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == "gpuwaste-cli"]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name("gpuwaste-cli")
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Show the version.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at debug level to stderr, and print the details every command hides by default.")] = False,
) -> None:
    """gpuwaste: which GPUs burn money, whose are they, and what does it cost per day."""
    VERBOSE.on = verbose
    _log_to_stderr(logging.DEBUG if verbose else logging.WARNING)
    quiet_http_logs(verbose)
    out.width = _stdout_width()  # type: ignore[assignment]  # stdout may have changed since import (tests, pipes)


COMMAND_MODULES = ("record", "run", "doctor", "explain", "summary", "replay", "serve")


def _load_commands() -> None:
    """Import the subcommand modules present in `gpuwaste.commands` (each registers itself)."""
    import importlib

    for name in COMMAND_MODULES:
        try:
            importlib.import_module(f"gpuwaste.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"gpuwaste.commands.{name}":
                raise


_load_commands()


def run() -> None:
    """Console-script entry point."""
    app()


__all__ = ["app", "run", "timedelta"]
