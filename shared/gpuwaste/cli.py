"""The `gpuwaste` command: scan a live cluster or a recording, run the local pipeline, record, and more."""

from __future__ import annotations

import json
import logging
import shlex
import sys
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from gpuwaste import __version__
from gpuwaste.cli_support import (
    KUBE_HINT,
    MIN_WINDOW_S,
    OUTPUT_HELP,
    SOURCE_ERRORS,
    VERBOSE,
    Fmt,
    Output,
    PodLabel,
    app,
    check_state_path,
    config_or_exit,
    err,
    escape_markup,
    fail,
    fail_source,
    live_cluster,
    out,
    parse_time,
    parse_window,
    plural,
    progress_printer,
    quiet_http_logs,
    stdout_width,
)
from gpuwaste.cli_support.recording import (
    check_recording,
    check_window,
    held_before,
    input_hint,
    note_short_recording,
    warn_recording,
)
from gpuwaste.cli_support.scan_report import GroupBy, SortKey, View, run_scan, team_function
from gpuwaste.errors import ConfigError, GpuWasteError, InputFormatError
from gpuwaste.models import redaction

if TYPE_CHECKING:  # imported where used: `gpuwaste --help` starts without pydantic models, boto3 or requests
    from gpuwaste.services.scan import ScanReport


#: How far back a live scan without DCGM telemetry looks for any DCGM series (s): none → "not scraped at all".
NEWEST_DCGM_LOOKBACK_S = 7 * 86400


def _newest_dcgm_sample(telemetry, when: datetime) -> tuple[bool, datetime | None]:  # type: ignore[no-untyped-def]
    """Whether the source could tell, and the newest sample of any DCGM field in the `NEWEST_DCGM_LOOKBACK_S` before
    `when` (None: there is none). One series per step (the count of DCGM series, at 10-minute steps)."""
    query = getattr(telemetry, "instant_query", None)
    if query is None:
        return False, None
    promql = (f'max(max_over_time(timestamp(count({{__name__=~"DCGM_FI_.*|dcgm_fi_.*"}}))'
              f"[{NEWEST_DCGM_LOOKBACK_S}s:10m]))")
    try:
        result = query(promql, at=when, what="newest DCGM sample")
    except GpuWasteError:
        return False, None
    return True, (datetime.fromtimestamp(float(result[0]["value"][1]), tz=UTC) if result else None)


def _check_cluster_file(cluster_file: Path | None) -> None:
    """Refuse a --cluster-json that is missing or a directory, in one line (exit 2)."""
    if cluster_file is not None and not cluster_file.exists():
        fail(f"--cluster-json {escape_markup(str(cluster_file))}: no such file")
    if cluster_file is not None and cluster_file.is_dir():
        fail(f"--cluster-json {escape_markup(str(cluster_file))}: is a directory; give the file of "
             "`kubectl get pods,nodes -A -o json`")


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
    bill: Annotated[Path | None, typer.Option("--bill", help="Price from your bill: an AWS CUR 2.0 or FOCUS export, CSV or .csv.gz (effective cost per instance-hour: savings plans, reservations, spot); list prices for the rest.")] = None,
) -> None:
    """Scan a cluster (live, or from a recording) and print priced findings, the waste per team and the total."""
    from gpuwaste.bootstrap import local
    from gpuwaste.commands.showback import apply_bill
    from gpuwaste.models.settings import ClusterConfig

    fmt = old_format or input_format
    cfg = apply_bill(config_or_exit(config), bill)
    if cluster and cfg.clusters:
        try:
            cfg.cluster(cluster)
        except ConfigError as exc:
            fail(f"--cluster: {escape_markup(str(exc))}")
    if pod_label:
        # the configuration is frozen: the clusters with the command line's pod label are copies
        clusters = [c.model_copy(update={"labels": c.labels.model_copy(update={"pod_label": pod_label.value})})
                    for c in cfg.clusters]
        if not clusters:
            from gpuwaste.models.settings import TelemetryLabels

            clusters = [ClusterConfig(name=cluster or "recording", labels=TelemetryLabels(pod_label=pod_label.value))]
        cfg = cfg.model_copy(update={"clusters": clusters})
    window_s = parse_window(window) if window else None
    when = parse_time(at)
    truth_doc = _read_truth(truth) if truth is not None else None
    progress = progress_printer(quiet or output is not Output.table)
    dated: str | None = None
    source_hint: str | None = None
    _check_cluster_file(cluster_file)
    if recording is not None:
        if not recording.exists():
            fail(f"{escape_markup(str(recording))}: no such file or directory")
        try:
            sources = local.recording_sources(recording, cfg, cluster_file=cluster_file, fmt=fmt.value, cluster_name=cluster, progress=progress)
            assert sources.recording is not None
            dated = check_recording(sources, when)
            if when is None:
                when = sources.recording.end_time()
        except InputFormatError as exc:
            fail(f"{escape_markup(input_hint(str(exc)))}\nThe recording is malformed at the place shown; fix or re-record it.")
        cfg, note = local.recording_config(cfg, sources, config_given=config is not None)
        if note and output is Output.table and not quiet:
            err.print(f"[dim]{escape_markup(note)}[/]", highlight=False)
        window_given = window_s is not None
        if window_s is None and sources.recording.meta.window_s:
            window_s = sources.recording.meta.window_s
        if window_s is None:  # neither --window nor recording.json: the default, or what the data holds if less
            held = held_before(sources, when)
            window_s = cfg.scan.window_s if held is None else max(MIN_WINDOW_S, min(cfg.scan.window_s, held))
        elif window_given:
            check_window(sources, when, window_s)
        else:  # the recording's own window: scanned as recorded, the time without samples is missing telemetry
            note_short_recording(sources, when, window_s, quiet=quiet or output is not Output.table)
        warn_recording(sources, when, window_s, quiet=quiet)
        source_hint = f"-r {shlex.quote(str(recording))}"  # printed as plain text: a command to copy
    else:
        if prometheus is None and not cfg.clusters:
            fail("nothing to scan: pass --recording DIR, or --prometheus URL (cluster state from kube-state-metrics, "
                 "and from the Kubernetes API when a kubeconfig is found), or --config FILE. "
                 "Try `gpuwaste demo` for the bundled demo fleet.")
        cc = live_cluster(cfg, cluster, prometheus, None if cluster_file else kubeconfig, context)
        try:
            sources = local.live_sources(cc, cfg, cluster_file=cluster_file)
        except SOURCE_ERRORS as exc:
            fail_source(exc)
        except GpuWasteError as exc:
            hint = f" {KUBE_HINT}" if "kube" in str(exc).lower() else ""
            fail(escape_markup(str(exc)) + hint)
        when = when or datetime.now(tz=UTC).replace(microsecond=0)
        # `explain` scans the same Prometheus at the same time and window again: the same finding, the same ID
        url = cc.prometheus.url if cc.prometheus is not None else (prometheus or "")
        again = [f"--prometheus {shlex.quote(url)}", f"--at {when:%Y-%m-%dT%H:%M:%SZ}"]
        if window_s is not None:
            again.append(f"-w {window_s}s")
        if cluster_file is not None:
            again.append(f"--cluster-json {shlex.quote(str(cluster_file))}")
        elif context:
            again.append(f"--context {shlex.quote(context)}")
        if config is not None:
            again.append(f"--config {shlex.quote(str(config))}")
        if cluster:  # the cluster is part of a finding's ID
            again.append(f"--cluster {shlex.quote(cluster)}")
        source_hint = " ".join(again)
    service = local.scan_service(sources, cfg, window_s=window_s, progress=progress)
    view = View(namespaces=tuple(namespace or ()), teams=tuple(team or ()), kinds=tuple(kind or ()), sort=sort, top=top,
                group_by=group_by, verbose=verbose or VERBOSE.on, source=source_hint)
    report = run_scan(service, when, output, min_usd, quiet, wide=wide, dated=dated, view=view, config=cfg)
    if recording is None and not any(m.startswith("DCGM_") for m in report.inventory.metrics_present):
        known, newest = _newest_dcgm_sample(sources.telemetry, when)
        span = f"the {(window_s or cfg.scan.window_s) // 60} min ending {when:%Y-%m-%d %H:%M} UTC"
        if known and newest is None:
            text = (f"no DCGM telemetry: dcgm-exporter is not scraped by this Prometheus at all (no DCGM series in the "
                    f"{NEWEST_DCGM_LOOKBACK_S // 86400} days before {when:%Y-%m-%d %H:%M} UTC), so no GPU was judged and "
                    "$0 is not an all-clear. Deploy dcgm-exporter (the NVIDIA GPU Operator runs it) and have this "
                    "Prometheus scrape it; `gpuwaste doctor --prometheus URL` says how.")
        else:
            seen = f"The newest DCGM sample is at {newest:%Y-%m-%d %H:%M} UTC: " if newest is not None else ""
            text = (f"no DCGM telemetry in Prometheus for {span}: no GPU was judged, so $0 is not an all-clear. {seen}"
                    "pass an --at inside the data, or, if dcgm-exporter stopped being scraped, check its pods and "
                    "Prometheus's /targets page (`gpuwaste doctor --prometheus URL`).")
        err.print(text, style="red", highlight=False, soft_wrap=True, markup=False)
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
    from gpuwaste.files import read_capped, recording_max_bytes

    try:
        doc = json.loads(read_capped(path, recording_max_bytes(), what="truth file",
                                     hint="if it is genuine, raise it with GPUWASTE_RECORDING_MAX_MB=<MiB>"))
    except InputFormatError as exc:
        fail(f"--truth {escape_markup(str(exc))}")
    except json.JSONDecodeError as exc:
        fail(f"--truth {escape_markup(str(path))}: not JSON ({exc.msg} at line {exc.lineno}); pass the truth.json of a generated fleet")
    if not isinstance(doc, list) or not all(isinstance(t, dict) for t in doc):
        fail(f"--truth {escape_markup(str(path))}: expected a list of objects (the truth.json of `gpuwaste generate-fleet`)")
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
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also print what the scan saw and why some pods got no verdict (grouped by cause).")] = False,
) -> None:
    """Run the whole local pipeline on the bundled demo fleet (no setup): scan → price → dedupe → alerts,
    with a temporary SQLite store holding 30 days of generated history (so the summary has a trend), and check the
    findings against the fleet's ground truth."""
    import tempfile

    from gpuwaste.bootstrap import local
    from gpuwaste.commands.run import run_local_chain
    from gpuwaste.config import GpuWasteConfig

    VERBOSE.on = VERBOSE.on or verbose
    path = local.demo_recording()
    sources = local.recording_sources(path, GpuWasteConfig())
    assert sources.recording is not None
    cfg, _ = local.recording_config(GpuWasteConfig(), sources, config_given=False)
    with tempfile.TemporaryDirectory(prefix="gpuwaste-demo-") as tmp:
        path_state = state or Path(tmp) / "state.db"
        if state is not None and state.is_dir():
            check_state_path(state)
        if state is not None and state.exists():
            fail(f"--state {escape_markup(str(state))}: exists; the demo writes a fresh state file (remove it or choose another path)")
        seed_history(path_state, sources.recording.end_time(), cluster=sources.recording.cluster)
        chain = run_local_chain(sources, cfg, cluster=sources.recording.cluster, times=[sources.recording.end_time()],
                                window_s=sources.recording.meta.window_s, state=path_state, output=output,
                                quiet=quiet, slack=True, state_kept=state is not None, recording=path)
    report = chain.reports[-1]
    if output is Output.table:
        _print_truth(report, _read_truth(path / "truth.json"), to=out)
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
    allocation = "allocation"


@app.command("generate-fleet")
def generate_fleet_cmd(
    out_dir: Annotated[Path, typer.Argument(help="Directory to write the recording into (created; must be empty or absent unless --force).")],
    nodes: Annotated[int, typer.Option(help="random: nodes; scorecard: repetitions of the catalogue (1 or more); demo: ignored.")] = 10,
    layout: Annotated[Layout, typer.Option(help="demo: the hand-designed demo fleet; random: NODES nodes with a scenario mix; "
                                                "scorecard: every waste kind plus look-alikes; allocation: one cluster handing out GPUs every "
                                                "way (device plugin, DRA with a shared claim, HAMi, KAI fractions, Blackwell MIG).")] = Layout.random,
    seed: Annotated[int, typer.Option(help="Random seed (same seed, same fleet).")] = 7,
    compress: Annotated[bool, typer.Option("--compress/--no-compress", help="gzip the telemetry file (telemetry.om.gz).")] = True,
    force: Annotated[bool, typer.Option("--force", help="Write into a non-empty OUT_DIR (its recording files are replaced).")] = False,
) -> None:
    """Write a synthetic fleet recording (telemetry, cluster objects, ground truth) that `scan --recording DIR --truth DIR/truth.json` checks."""
    from gpuwaste.fleet import FleetSpec, generate_fleet, write_recording

    if nodes < 1:
        fail(f"--nodes {nodes}: must be 1 or more")
    if out_dir.exists() and not out_dir.is_dir():
        fail(f"{escape_markup(str(out_dir))}: exists and is not a directory; choose a directory path")
    if out_dir.exists() and any(out_dir.iterdir()) and not force:
        fail(f"{escape_markup(str(out_dir))}: not empty; choose another directory or pass --force")
    extra = {"label_style": "pod", "inference_metrics": False} if layout is Layout.allocation else {}
    fleet = generate_fleet(FleetSpec(layout=layout.value, nodes=nodes, seed=seed, cluster=f"{layout.value}-{nodes}", **extra))
    write_recording(fleet, out_dir, compress=compress)
    out.print(f"wrote {escape_markup(str(out_dir))} ({plural(len({g.uuid for g in fleet.gpus}), 'GPU')}, "
              f"{plural(len(fleet.expected()), 'expected finding')}); check it with: "
              f"gpuwaste scan --recording {escape_markup(str(out_dir))} --truth {escape_markup(str(out_dir / 'truth.json'))}", highlight=False,
              soft_wrap=True)


@app.command("config-schema")
def config_schema() -> None:
    """Print the JSON Schema of the configuration document."""
    from gpuwaste.config import config_json_schema

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
    redaction.install(handler)  # no logger, at any level, writes a credential (models/redaction.py)
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
    out.width = stdout_width()  # type: ignore[assignment]  # stdout may have changed since import (tests, pipes)


COMMAND_MODULES = ("record", "run", "doctor", "explain", "summary", "replay", "serve", "mcp_server", "showback", "justify",
                   "reclaim")


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


def kubectl_run() -> None:
    """Console-script entry point as a kubectl plugin (`kubectl-gpuwaste`): the same commands, with help naming
    `kubectl gpuwaste`; the live commands use the current kube context (KUBECONFIG / ~/.kube/config) as kubectl does."""
    app(prog_name="kubectl gpuwaste")


__all__ = ["app", "kubectl_run", "run", "timedelta"]
