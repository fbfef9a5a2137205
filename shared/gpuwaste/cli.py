"""The `gpuwaste` command: scan a live cluster or a recording, run the local pipeline, record, and more."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from typer.core import TyperGroup, TyperOption

from gpuwaste import __version__
from gpuwaste.bootstrap import local
from gpuwaste.errors import ConfigError, GpuWasteError, InputFormatError, PermanentError, SourceUnavailableError
from gpuwaste.models.findings import Finding
from gpuwaste.services.scan import ScanReport
from gpuwaste.settings import (
    ClusterConfig,
    GpuWasteConfig,
    PrometheusSettings,
    config_json_schema,
    format_validation_error,
    load_config,
)
from gpuwaste.sinks import terminal

#: Width of stdout when it is not a terminal and COLUMNS is not set.
PIPE_WIDTH = 160
#: The detectors' rules use 10-minute averages: a shorter window cannot hold one.
MIN_WINDOW_S = 600
WINDOW_HINT = "the detectors' rules use 10-minute averages; use --window 10m or more"


def _stdout_width() -> int | None:
    """Rich's width for stdout: auto on a terminal; else COLUMNS when set; else PIPE_WIDTH."""
    if sys.stdout.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH


out = Console(width=_stdout_width())
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
    try:
        return load_config(path)
    except ConfigError as exc:
        fail(str(exc))


def _progress(quiet: bool):  # type: ignore[no-untyped-def]
    def show(msg: str) -> None:
        if not quiet:
            err.print(f"[dim]… {msg}[/]", highlight=False)

    return show


def render(report: ScanReport, output: Output, *, min_usd: float = 0.0, quiet: bool = False, wide: bool = False,
           dated: str | None = None, config: GpuWasteConfig | None = None) -> None:
    """Print a scan report in the chosen format.

    Args:
        wide: keep the evidence and confidence columns on a narrow terminal (< 120 columns).
        dated: replaces "one scrape dated …" in the header (an undated scrape says where its time came from).
    """
    findings = [f for f in report.findings if (f.usd_per_day or 0) >= min_usd or f.usd_per_day is None]
    if output in (Output.openmetrics, Output.prometheus):
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
            no_verdict=[nv.__dict__ for nv in report.no_verdict],
        ) + "\n")
        return
    if output is Output.csv:
        sys.stdout.write(terminal.to_csv(findings))
        return
    inv = report.inventory
    if inv.single_instant:
        when = dated or f"one scrape dated {report.eval_time:%Y-%m-%d %H:%M:%SZ}"
    else:
        when = f"window {report.window_s // 60} min ending {report.eval_time:%Y-%m-%d %H:%M:%SZ}"
    models = ", ".join(f"{'unknown (no modelName label)' if k == 'unknown' else k}×{v}" for k, v in sorted(inv.models.items()))
    out.print(
        f"[bold]{_plain(report.cluster)}[/]: {_plain(when)} · "
        f"{plural(inv.physical_gpus, 'GPU')} ({plural(inv.mig_instances, 'MIG instance')}) on {plural(inv.nodes, 'node')} · "
        f"{inv.pods_holding_gpus} {'pod holds' if inv.pods_holding_gpus == 1 else 'pods hold'} GPUs · models: {_plain(models) or 'none'}",
        highlight=False,
    )
    out.print(
        "activity signal per device: " + ", ".join(f"{k.replace('DCGM_FI_', '')}×{v}" for k, v in sorted(inv.activity_signals.items()))
        + " · attribution: " + (", ".join(f"{k}×{v}" for k, v in sorted(inv.attribution.items())) or "none")
        + (f" · allocation: {inv.allocation}" if inv.allocation else ""),
        highlight=False, style="dim", markup=False,
    )
    if inv.metrics_present:
        dcgm = [m.removeprefix("DCGM_FI_") for m in inv.metrics_present if m.startswith("DCGM_FI_")]
        other = [m for m in inv.metrics_present if not m.startswith("DCGM_FI_")]
        out.print(f"signals present ({len(inv.metrics_present)}): " + ", ".join(dcgm + other), highlight=False, style="dim",
                  markup=False)
    if inv.single_instant:
        out.print("[yellow]The telemetry holds ONE sample per series: it shows what is there, not sustained use; "
                  "no idle or under-used verdict is possible from one sample.[/]")
    if inv.single_instant and not any(f.kind.is_waste for f in findings):
        dq = terminal.data_quality_table(findings)
        if dq is not None:
            out.print(dq)
    else:
        terminal.print_findings(out, findings, wide=wide)
    if report.no_verdict and not quiet:
        subjects: dict[str, set[str]] = {}
        for nv in report.no_verdict:
            reason = nv.reason
            if inv.single_instant:  # one sample: a longer window cannot help, so no look-back hint
                reason = re.sub(r"\s*\((scan with --window|needs \d+ day)[^)]*\)", "", reason)
            subjects.setdefault(reason, set()).add(nv.subject)  # count subjects (pods, nodes), not detectors
        out.print("no verdict: " + "; ".join(f"{len(v)}× {r}" for r, v in sorted(subjects.items())), style="dim",
                  highlight=False, markup=False)
    hidden = len(report.findings) - len(findings)
    if hidden:
        out.print(f"{hidden} finding(s) under ${min_usd:g}/day hidden by --min-usd", style="dim", highlight=False)
    out.print("[dim]USD/day = $/GPU-hour (instance price ÷ GPUs) × wasted GPUs × 24. `--output json` shows each formula and price source.[/]")


def live_cluster(cfg: GpuWasteConfig, cluster: str | None, prometheus: str | None, kubeconfig: Path | None,
                 context: str | None) -> ClusterConfig:
    """The cluster a live scan or run reads: from --config (by --cluster, else the first), with the command-line
    Prometheus URL and kubeconfig/context applied on top.

    Raises:
        ConfigError: when --cluster names no configured cluster.
    """
    if prometheus:
        check_prometheus_url(prometheus)
    check_kubeconfig(kubeconfig)
    cc = cfg.cluster(cluster) if (cluster and cfg.clusters) else (cfg.clusters[0] if cfg.clusters else ClusterConfig(name=cluster or "cluster"))
    if prometheus:
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
              dated: str | None = None, config: GpuWasteConfig | None = None) -> ScanReport:
    try:
        report: ScanReport = service.scan(at=at)
    except InputFormatError as exc:
        fail(f"{_plain(str(exc))}\nThe recording is malformed at the place shown; fix or re-record it (gpuwaste record).")
    except SourceUnavailableError as exc:
        fail(f"{_plain(str(exc))}\nCheck the URL, network access and credentials, then retry.", code=3)
    except PermanentError as exc:
        fail(_plain(str(exc)))
    render(report, output, min_usd=min_usd, quiet=quiet, wide=wide, dated=dated, config=config)
    return report


class PodLabel(StrEnum):
    """The label of DCGM series that names the workload's pod."""

    auto = "auto"
    pod = "pod"
    exported_pod = "exported_pod"
    pod_name = "pod_name"


#: How far past the last sample of a recording --at may be (one scrape interval or so of slack, plus staleness).
AT_SLACK = timedelta(minutes=5)


def warn_recording(sources: local.Sources, when: datetime, window_s: int, *, quiet: bool = False) -> None:
    """Warn (stderr) when a recording cannot fill the window or carries no cluster state."""
    rec = sources.recording
    if rec is None or quiet:
        return
    span = rec.time_range()
    if span is not None and not rec.undated():
        held = (min(when, span[1]) - span[0]).total_seconds() + rec.scrape_interval_s
        if window_s > held * 1.05:
            err.print(f"[yellow]warning:[/] the window ({_duration(window_s)}) is longer than the recording holds before "
                      f"{when:%H:%M:%SZ} ({_duration(int(held))}): coverage will be low and those pods get no verdict; "
                      f"use --window {max(10, int(held) // 60)}m or less.", highlight=False)
    if getattr(sources.cluster, "cluster_file", "") is None:
        err.print("[yellow]warning:[/] the recording has no cluster state (cluster.json): GPUs cannot be tied to pods or "
                  "nodes; pass --cluster-json FILE (kubectl get pods,nodes -A -o json) to judge them.", highlight=False)


def _duration(seconds: int) -> str:
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
        return f"undated scrape (no timestamps), evaluated at {at:%Y-%m-%d %H:%M:%SZ} ({origin})"
    span = rec.time_range()
    if when is not None and span is not None:
        first, last = span
        if when < first or when > last + AT_SLACK:
            fail(f"--at {when:%Y-%m-%dT%H:%M:%SZ} is outside the recording ({first:%Y-%m-%dT%H:%M:%SZ} → "
                 f"{last:%Y-%m-%dT%H:%M:%SZ}); pass an --at inside that range, or leave it out to scan at the recording's end.")
    return None


@app.command()
def scan(
    recording: Annotated[Path | None, typer.Option("--recording", "-r", help="Scan a recording (directory from `gpuwaste record`, or an exposition file).")] = None,
    cluster_file: Annotated[Path | None, typer.Option("--cluster-json", help="kubectl get pods,nodes -A -o json output to pair with a telemetry file (only with --recording).")] = None,
    prometheus: Annotated[str | None, typer.Option("--prometheus", "-p", help="Prometheus base URL, http:// or https:// (live scan).", envvar="GPUWASTE_PROMETHEUS_URL")] = None,
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="kubeconfig file (live scan; default ~/.kube/config).", envvar="KUBECONFIG")] = None,
    context: Annotated[str | None, typer.Option("--context", help="kubeconfig context.")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Configuration file (YAML/JSON); see `gpuwaste config-schema`.")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Cluster name (must be in --config when given, else a label for the report).")] = None,
    at: Annotated[str | None, typer.Option("--at", help="Evaluation time (RFC 3339 or unix seconds). Default: the recording's end, or now for live scans.")] = None,
    window: Annotated[str | None, typer.Option("--window", "-w", help="Look-back window, 10m or more, e.g. 1h, 90m (default: the recording's window, else 1h).")] = None,
    fmt: Annotated[Fmt, typer.Option("--format", help="Recording format: OpenMetrics has second timestamps, text has milliseconds.")] = Fmt.auto,
    pod_label: Annotated[PodLabel | None, typer.Option("--pod-label", help="Workload label on DCGM series (auto: exported_pod when present, else pod).")] = None,
    output: Annotated[Output, typer.Option("--output", "-o", help=OUTPUT_HELP)] = Output.table,
    min_usd: Annotated[float, typer.Option("--min-usd", min=0, help="Hide findings below this USD/day (≥ 0).")] = 0.0,
    truth: Annotated[Path | None, typer.Option("--truth", help="Compare the findings with a truth.json (from `gpuwaste generate-fleet`); exit 1 on a mismatch.")] = None,
    wide: Annotated[bool, typer.Option("--wide", help="Keep the evidence and confidence columns on terminals narrower than 120 columns.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress messages.")] = False,
) -> None:
    """Scan a cluster (live, or from a recording) and print priced findings."""
    cfg = _config(config)
    if cluster_file is not None and recording is None:
        fail("--cluster-json only with --recording (it pairs cluster objects with a telemetry file)")
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
            fail(f"{_plain(str(exc))}\nThe recording is malformed at the place shown; fix or re-record it.")
        if window_s is None:
            window_s = sources.recording.meta.window_s or cfg.scan.window_s
        warn_recording(sources, when, window_s, quiet=quiet)
    else:
        if prometheus is None and not cfg.clusters:
            fail("nothing to scan: pass --recording DIR, or --prometheus URL (with a kubeconfig), or --config FILE. "
                 "Try `gpuwaste demo` for the bundled demo fleet.")
        cc = live_cluster(cfg, cluster, prometheus, kubeconfig, context)
        try:
            sources = local.live_sources(cc, cfg)
        except SourceUnavailableError as exc:
            fail(f"{_plain(str(exc))}\nCheck the URL, network access and credentials, then retry.", code=3)
        except GpuWasteError as exc:
            hint = f" {KUBE_HINT}" if "kube" in str(exc).lower() else ""
            fail(_plain(str(exc)) + hint)
        when = when or datetime.now(tz=UTC).replace(microsecond=0)
    service = local.scan_service(sources, cfg, window_s=window_s, progress=progress)
    report = _run_scan(service, when, output, min_usd, quiet, wide=wide, dated=dated, config=cfg)
    if truth_doc is not None:
        _print_truth(report, truth_doc, to=out if output is Output.table else err)


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
) -> None:
    """Run the whole local pipeline on the bundled demo fleet (no setup): scan → price → dedupe → alerts,
    with a temporary SQLite store, and check the findings against the fleet's ground truth."""
    import tempfile

    from gpuwaste.commands.run import run_local_chain

    path = local.demo_recording()
    cfg = GpuWasteConfig()
    sources = local.recording_sources(path, cfg)
    assert sources.recording is not None
    with tempfile.TemporaryDirectory(prefix="gpuwaste-demo-") as tmp:
        chain = run_local_chain(sources, cfg, cluster=sources.recording.cluster, times=[sources.recording.end_time()],
                                window_s=sources.recording.meta.window_s, state=Path(tmp) / "state.db", output=output,
                                quiet=quiet, slack=True)
    report = chain.reports[-1]
    if output is Output.table:
        _print_truth(report, json.loads((path / "truth.json").read_text()), to=out)


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
    sys.stdout.write(config_json_schema() + "\n")


def version_callback(value: bool) -> None:
    """Print the version and exit."""
    if value:
        out.print(f"gpuwaste {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Show the version.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at debug level to stderr.")] = False,
) -> None:
    """gpuwaste: which GPUs burn money, whose are they, and what does it cost per day."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s %(message)s")
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
