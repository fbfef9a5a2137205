"""The `gpuwaste` command: scan a live cluster or a recording, run the local pipeline, record, and more."""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from gpuwaste import __version__
from gpuwaste.bootstrap import local
from gpuwaste.errors import ConfigError, GpuWasteError, InputFormatError, PermanentError, SourceUnavailableError
from gpuwaste.services.scan import ScanReport
from gpuwaste.settings import ClusterConfig, GpuWasteConfig, PrometheusSettings, config_json_schema, load_config
from gpuwaste.sinks import terminal

app = typer.Typer(
    name="gpuwaste",
    help="Find GPUs that burn money on Kubernetes, say whose they are, and price the waste in USD/day.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)


class Output(StrEnum):
    """Output formats."""

    table = "table"
    json = "json"
    csv = "csv"


class Fmt(StrEnum):
    """Recording formats."""

    auto = "auto"
    text = "text"
    openmetrics = "openmetrics"


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


def fail(message: str, code: int = 2) -> NoReturn:
    """Print an error that says what to do, and exit non-zero."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


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


def render(report: ScanReport, output: Output, *, min_usd: float = 0.0, quiet: bool = False) -> None:
    """Print a scan report in the chosen format."""
    findings = [f for f in report.findings if (f.usd_per_day or 0) >= min_usd or f.usd_per_day is None]
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
    when = (f"one scrape dated {report.eval_time:%Y-%m-%d %H:%M:%SZ}" if inv.single_instant
            else f"window {report.window_s // 60} min ending {report.eval_time:%Y-%m-%d %H:%M:%SZ}")
    out.print(
        f"[bold]{report.cluster}[/]: {when} · "
        f"{inv.physical_gpus} GPUs ({inv.mig_instances} MIG instances) on {inv.nodes} nodes · "
        f"{inv.pods_holding_gpus} pods hold GPUs · models: {', '.join(f'{k}×{v}' for k, v in sorted(inv.models.items()))}",
        highlight=False,
    )
    out.print(
        "activity signal per device: " + ", ".join(f"{k.replace('DCGM_FI_', '')}×{v}" for k, v in sorted(inv.activity_signals.items()))
        + " · attribution: " + (", ".join(f"{k}×{v}" for k, v in sorted(inv.attribution.items())) or "none"),
        highlight=False, style="dim",
    )
    if inv.metrics_present:
        dcgm = [m.removeprefix("DCGM_FI_") for m in inv.metrics_present if m.startswith("DCGM_FI_")]
        other = [m for m in inv.metrics_present if not m.startswith("DCGM_FI_")]
        out.print(f"signals present ({len(inv.metrics_present)}): " + ", ".join(dcgm + other), highlight=False, style="dim")
    if inv.single_instant:
        out.print("[yellow]The telemetry holds ONE sample per series: it shows what is there, not sustained use; "
                  "no idle or under-used verdict is possible from one sample.[/]")
    if inv.single_instant and not any(f.kind.is_waste for f in findings):
        dq = terminal.data_quality_table(findings)
        if dq is not None:
            out.print(dq)
    else:
        terminal.print_findings(out, findings)
    if report.no_verdict and not quiet:
        reasons: dict[str, int] = {}
        for nv in report.no_verdict:
            reasons[nv.reason] = reasons.get(nv.reason, 0) + 1
        out.print("no verdict: " + "; ".join(f"{n}× {r}" for r, n in sorted(reasons.items())), style="dim", highlight=False)
    out.print("[dim]USD/day = $/GPU-hour (instance price ÷ GPUs) × wasted GPUs × 24. `--output json` shows each formula and price source.[/]")


def _run_scan(service, at: datetime, output: Output, min_usd: float, quiet: bool) -> ScanReport:  # type: ignore[no-untyped-def]
    try:
        report: ScanReport = service.scan(at=at)
    except InputFormatError as exc:
        fail(f"{exc}\nThe recording is malformed at the place shown; fix or re-record it (gpuwaste record).")
    except SourceUnavailableError as exc:
        fail(f"{exc}\nCheck the URL, network access and credentials, then retry.", code=3)
    except PermanentError as exc:
        fail(str(exc))
    render(report, output, min_usd=min_usd, quiet=quiet)
    return report


@app.command()
def scan(
    recording: Annotated[Path | None, typer.Option("--recording", "-r", help="Scan a recording (directory from `gpuwaste record`, or an exposition file).")] = None,
    cluster_file: Annotated[Path | None, typer.Option("--cluster-json", help="kubectl get pods,nodes -A -o json output to pair with a telemetry file.")] = None,
    prometheus: Annotated[str | None, typer.Option("--prometheus", "-p", help="Prometheus base URL (live scan).", envvar="GPUWASTE_PROMETHEUS_URL")] = None,
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="kubeconfig file (live scan; default ~/.kube/config).", envvar="KUBECONFIG")] = None,
    context: Annotated[str | None, typer.Option("--context", help="kubeconfig context.")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Configuration file (YAML/JSON); see `gpuwaste config-schema`.")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Cluster name (from --config, or a label for the report).")] = None,
    at: Annotated[str | None, typer.Option("--at", help="Evaluation time (RFC 3339 or unix seconds). Default: the recording's end, or now for live scans.")] = None,
    window: Annotated[str | None, typer.Option("--window", "-w", help="Look-back window, e.g. 1h, 90m (default 1h).")] = None,
    fmt: Annotated[Fmt, typer.Option("--format", help="Recording format: OpenMetrics has second timestamps, text has milliseconds.")] = Fmt.auto,
    pod_label: Annotated[str | None, typer.Option("--pod-label", help="Workload label on DCGM series: auto, pod or exported_pod.")] = None,
    output: Annotated[Output, typer.Option("--output", "-o", help="table for people, json or csv for machines.")] = Output.table,
    min_usd: Annotated[float, typer.Option("--min-usd", help="Hide findings below this USD/day.")] = 0.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress messages.")] = False,
) -> None:
    """Scan a cluster (live, or from a recording) and print priced findings."""
    cfg = _config(config)
    if pod_label:
        for c in cfg.clusters:
            c.labels.pod_label = pod_label
        if not cfg.clusters:
            from gpuwaste.settings import TelemetryLabels

            cfg.clusters.append(ClusterConfig(name=cluster or "recording", labels=TelemetryLabels(pod_label=pod_label)))
    window_s = parse_duration(window) if window else None
    when = parse_time(at)
    progress = _progress(quiet or output is not Output.table)
    if recording is not None:
        if not recording.exists():
            fail(f"{recording}: no such file or directory")
        try:
            sources = local.recording_sources(recording, cfg, cluster_file=cluster_file, fmt=fmt.value, cluster_name=cluster, progress=progress)
            assert sources.recording is not None
            if when is None:
                when = sources.recording.end_time()
        except InputFormatError as exc:
            fail(f"{exc}\nThe recording is malformed at the place shown; fix or re-record it.")
        if window_s is None:
            window_s = sources.recording.meta.window_s or cfg.scan.window_s
    else:
        if prometheus is None and not cfg.clusters:
            fail("nothing to scan: pass --recording DIR, or --prometheus URL (with a kubeconfig), or --config FILE. "
                 "Try `gpuwaste demo` for the bundled demo fleet.")
        try:
            cc = cfg.cluster(cluster) if (cluster and cfg.clusters) else (cfg.clusters[0] if cfg.clusters else ClusterConfig(name=cluster or "cluster"))
        except ConfigError as exc:
            fail(str(exc))
        if prometheus:
            cc.prometheus = PrometheusSettings(url=prometheus)
        if kubeconfig or context:
            cc.kubernetes.kubeconfig = str(kubeconfig) if kubeconfig else cc.kubernetes.kubeconfig
            cc.kubernetes.context = context or cc.kubernetes.context
        try:
            sources = local.live_sources(cc, cfg)
        except GpuWasteError as exc:
            fail(str(exc))
        when = when or datetime.now(tz=UTC).replace(microsecond=0)
    service = local.scan_service(sources, cfg, window_s=window_s, progress=progress)
    _run_scan(service, when, output, min_usd, quiet)


@app.command()
def demo(
    output: Annotated[Output, typer.Option("--output", "-o", help="table, json or csv.")] = Output.table,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
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
        from gpuwaste.fleet.truth import compare

        result = compare(report.findings, json.loads((path / "truth.json").read_text()))
        style = "green" if result.ok else "red"
        out.print(f"[{style}]ground truth: {result.matched}/{result.expected} expected findings found, "
                  f"{len(result.unexpected)} unexpected, {len(result.missed)} missed[/]")
        for line in result.missed + result.unexpected:
            out.print(f"  {line}", style="red")
        if not result.ok:
            raise typer.Exit(1)


@app.command("generate-fleet")
def generate_fleet_cmd(
    out_dir: Annotated[Path, typer.Argument(help="Directory to write the recording into.")],
    nodes: Annotated[int, typer.Option(help="Nodes (random layout).")] = 10,
    layout: Annotated[str, typer.Option(help="demo or random.")] = "random",
    seed: Annotated[int, typer.Option(help="Random seed (same seed, same fleet).")] = 7,
    compress: Annotated[bool, typer.Option(help="gzip the telemetry file.")] = True,
) -> None:
    """Write a synthetic fleet recording (telemetry, cluster objects, ground truth)."""
    from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording

    fleet = generate_fleet(FleetSpec(layout=layout, nodes=nodes, seed=seed, cluster=f"{layout}-{nodes}"))
    write_recording(fleet, out_dir, compress=compress)
    out.print(f"wrote {out_dir} ({len({g.uuid for g in fleet.gpus})} GPUs, {len(fleet.expected())} expected findings)")


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


COMMAND_MODULES = ("record", "run", "doctor", "explain", "summary", "replay")


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
