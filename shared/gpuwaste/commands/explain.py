"""`gpuwaste explain ID [--recording DIR | --state FILE]`: show one finding's evidence, thresholds, formula and numbers
(from the recording scanned again, or as stored in a run's state file).

The text (`explain_text`) is built by a pure function from the finding and its detector's settings, so
tests check the output without a terminal.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuwaste.cli_support import (
    DEFAULT_STATE,
    app,
    check_state_path,
    config_or_exit,
    escape_markup,
    fail,
    fail_source,
    out,
    parse_time,
    parse_window,
)
from gpuwaste.errors import GpuWasteError, InputFormatError

if TYPE_CHECKING:  # imported where used, so `gpuwaste --help` stays fast
    from pydantic import BaseModel

    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.models.findings import Evidence, Finding


def share_text(v: Decimal | float) -> str:
    """A GPU share or count with at most 4 decimals, trailing zeros dropped (0.142857… → "0.1429", 1.0 → "1")."""
    d = Decimal(str(v)).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP).normalize()
    return f"{d:f}"


def _evidence_line(e: Evidence) -> str:
    from gpuwaste.people import no_codes, percent, rule_text, value_text

    if e.unit == "count":
        # a count (e.g. physical or requested GPUs) is one number, not a sampled series: no samples or coverage
        parts = [f"{e.signal}: {'-' if e.avg is None else share_text(e.avg)}"]
        if e.note:
            parts.append(f"note: {no_codes(e.note)}")
        return " · ".join(parts)
    # every reading in its unit and rounded as the other surfaces show it (`people.value_text`: ratios as percent,
    # "352 W", "3.5 d"); `scan -o json` / `explain -o json` keep the exact values
    def show(v: float | None) -> str:
        return value_text(v, e.unit)

    unit = f" ({e.unit})" if e.unit == "owners" else ""
    stats = (("avg", e.avg), ("p95", e.p95), ("max", e.max), ("min", e.min), ("highest 10-min avg", e.max_avg_10m))
    parts = [f"{e.signal}{unit}", *(f"{name} {show(v)}" for name, v in stats if v is not None),
             f"{e.samples} samples", f"coverage {percent(e.coverage)}"]
    rule = rule_text(e)
    if rule:
        parts.append(f"rule: {rule.split(': ', 1)[1]}")
    elif e.comparison:
        parts.append(f"({e.comparison})")
    if e.note:
        parts.append(f"note: {no_codes(e.note)}")
    return " · ".join(parts)


#: Details that only machines read (`episodes` is shown in its own words; `ongoing` is in it).
_MACHINE_DETAILS = frozenset({"ongoing"})


def _detail(v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def explain_text(finding: Finding, settings: BaseModel | None = None) -> str:
    """Plain text: what was found, on whom, with which evidence, thresholds, formula and money (for people:
    ratios as percent, money rounded to the cent; `scan -o json` keeps the exact values)."""
    from gpuwaste.advice import advise
    from gpuwaste.models.findings import WasteKind
    from gpuwaste.people import idle_mode_label, kind_label, no_codes, people_formula, plain, setting_text, when

    s = finding.subject
    who = f"{s.namespace}/{s.pod}" if s.pod else f"node {s.node}"
    node_level = s.pod is None or finding.kind is WasteKind.UNALLOCATED  # capacity nobody holds: it is free
    workload = f"{s.workload_kind}/{s.workload_name}" if s.workload_kind or s.workload_name else "-"
    lines = [
        f"{plain(finding.title)}",
        f"kind: {kind_label(finding.kind)} · confidence: {finding.confidence.value}"
        + (f" · idle mode: {idle_mode_label(finding.idle_mode.value)}" if finding.idle_mode else ""),
        f"ID: {finding.fingerprint[:6]} (fingerprint {finding.fingerprint})",
        plain(f"subject: {who} · workload {workload} · node {s.node or '-'} · {s.instance_type or 'unknown instance'} "
              f"({s.capacity_type or 'capacity type unknown'}) · {s.gpu_model or 'unknown GPU'} · "
              f"{share_text(s.gpu_share)} GPU(s) {'free' if node_level else 'held'} · "
              f"attribution {s.attribution.value}"),
        f"window: {finding.window_s // 60} min ending {when(finding.observed_at)}",
        "evidence:",
        *(f"  - {plain(_evidence_line(e))}" for e in finding.evidence),
    ]
    if settings is not None:
        lines.append("thresholds (detector settings): " + ", ".join(setting_text(k, v) for k, v in settings.model_dump().items()))
    formula = finding.details.get("formula")
    if formula:
        lines.append(f"waste formula: {formula} → {share_text(finding.wasted_gpu_share)} GPU(s) wasted")
    other = {k: v for k, v in finding.details.items() if k != "formula" and v not in ("", None)}
    if other:
        lines.append("details: " + plain("; ".join(f"{k.replace('_', ' ')}: {_detail(v)}" for k, v in other.items()
                                                   if k not in _MACHINE_DETAILS)))
    if finding.cost is not None:
        c = finding.cost
        lines.append(f"cost: {people_formula(finding)} (exact values: scan -o json)")
        if c.basis:
            lines.append(f"price basis: {no_codes(c.basis)}")
        if c.source:
            lines.append(f"price source: {no_codes(c.source)} (effective {c.effective_date or 'undated'})")
        lines.extend(f"warning: {no_codes(w)}" for w in c.warnings)
    advice = advise(finding)
    lines.append(f"how to fix: {advice.action}")
    if advice.caution:
        lines.append(f"  {advice.caution}")
    lines.extend(f"  $ {c.shell()}" for c in advice.commands)
    return "\n".join(lines)


def find(findings: list[Finding], prefix: str) -> list[Finding]:
    """Findings whose fingerprint starts with `prefix` (case-insensitive)."""
    p = prefix.strip().lower()
    return [f for f in findings if f.fingerprint.startswith(p)]


def _scanned(recording: Path, fingerprint: str, cfg: GpuWasteConfig, *, config_given: bool, at: str | None,
             window: str | None) -> tuple[GpuWasteConfig, list[Finding]]:
    """The recording scanned again (at its end unless `at`) and the findings matching `fingerprint`, with the
    configuration the recording implies; exits 2 when none matches, listing what the scan found."""
    from gpuwaste.bootstrap import local

    if not recording.exists():
        fail(f"{recording}: no such file or directory")
    try:
        sources = local.recording_sources(recording, cfg)
        assert sources.recording is not None
        cfg, _ = local.recording_config(cfg, sources, config_given=config_given)
        when = parse_time(at) or sources.recording.end_time()
        window_s = parse_window(window) if window else (sources.recording.meta.window_s or cfg.scan.window_s)
        report = local.scan_service(sources, cfg, window_s=window_s).scan(at=when)
    except InputFormatError as exc:
        fail(f"{exc}\nThe recording is malformed at the place shown; fix or re-record it.")
    return cfg, _matching(report.findings, fingerprint)


def _live(fingerprint: str, cfg: GpuWasteConfig, *, prometheus: str | None, cluster: str | None,
          cluster_file: Path | None, kubeconfig: Path | None, context: str | None, at: str | None,
          window: str | None) -> list[Finding]:
    """A live scan again (Prometheus, and the cluster state from kube-state-metrics, the Kubernetes API or
    --cluster-json) at `at` (default now) over `window`, and the findings matching `fingerprint`: the same ID as the
    live `gpuwaste scan` showed when `--at` and `--window` are the scan's (its hint prints them); exits 3 when the
    source is unreachable, 2 when none matches."""
    from gpuwaste.bootstrap import local
    from gpuwaste.cli_support import KUBE_HINT, SOURCE_ERRORS, live_cluster

    try:
        cc = live_cluster(cfg, cluster, prometheus, None if cluster_file else kubeconfig, context)
        sources = local.live_sources(cc, cfg, cluster_file=cluster_file)
        when = parse_time(at) or datetime.now(tz=UTC).replace(microsecond=0)
        window_s = parse_window(window) if window else cfg.scan.window_s
        report = local.scan_service(sources, cfg, window_s=window_s).scan(at=when)
    except SOURCE_ERRORS as exc:
        fail_source(exc)
    except GpuWasteError as exc:
        fail(escape_markup(str(exc)) + (f" {KUBE_HINT}" if "kube" in str(exc).lower() else ""))
    return _matching(report.findings, fingerprint)


def _matching(findings: list[Finding], fingerprint: str) -> list[Finding]:
    """The scan's findings matching `fingerprint`; exits 2 when none does, listing what the scan found."""
    matches = find(findings, fingerprint)
    if not matches:
        known = found_list(findings)
        fail(escape_markup(f"no finding with ID {fingerprint!r} in this scan; the scan found:\n{known or '  nothing'}"))
    return matches


def found_list(findings: list[Finding]) -> str:
    """The findings of a scan as the lines `explain` lists when an ID matches none: short ID, kind, subject
    (`namespace/pod`, or `node NAME` for node-level findings, as the scan table says it)."""
    from gpuwaste.people import kind_label as people_kind
    from gpuwaste.people import plain
    from gpuwaste.sinks.terminal import short_ids

    ids = short_ids(findings)

    def subject(f: Finding) -> str:
        if f.subject.pod:
            return f"{plain(f.subject.namespace or '')}/{plain(f.subject.pod)}" if f.subject.namespace else plain(f.subject.pod)
        return f"node {plain(f.subject.node or '-')}"

    return "\n".join(f"  {ids[f.fingerprint]:8}  {people_kind(f.kind):14} {subject(f)}" for f in findings)


def stored_findings(state: Path, prefix: str) -> list[Finding]:
    """The findings a state file (`gpuwaste run` / `demo --state`) stored under fingerprints starting with `prefix`:
    each as last seen (priced), so `explain` works without the recording or a live source."""
    from gpuwaste.models.findings import Finding
    from gpuwaste.store.sqlite import SqliteFindingStore

    store = SqliteFindingStore(state)
    try:
        records = store.history(since=datetime(1970, 1, 1, tzinfo=UTC), until=datetime(9999, 1, 1, tzinfo=UTC))
    finally:
        store.close()
    p = prefix.strip().lower()
    return [Finding.model_validate_json(r.finding_json) for r in records
            if r.fingerprint.startswith(p) and r.finding_json]


@app.command()
def explain(
    fingerprint: Annotated[str, typer.Argument(help="The finding's ID from the scan table (any unique start of its fingerprint).")],
    recording: Annotated[Path | None, typer.Option("--recording", "-r", help="The recording the finding came from (scanned again).")] = None,
    state: Annotated[Path | None, typer.Option("--state", help="The state file of the `gpuwaste run` (or `demo --state`) "
                                                                "that found it: the finding as last seen. Default without "
                                                                f"--recording: {DEFAULT_STATE}, `run`'s default.")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Configuration file (thresholds).")] = None,
    at: Annotated[str | None, typer.Option("--at", help="Evaluation time (default: the recording's end; now for --prometheus).")] = None,
    window: Annotated[str | None, typer.Option("--window", "-w", help="Look-back window (default: the recording's, else 1h).")] = None,
    prometheus: Annotated[str | None, typer.Option("--prometheus", "-p", help="Scan this Prometheus again (live), as `gpuwaste scan --prometheus` did; "
                                                                           "pass the --at it printed for the same ID.")] = None,
    cluster_file: Annotated[Path | None, typer.Option("--cluster-json", help="Cluster objects from a file (with --prometheus).")] = None,
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="kubeconfig file (with --prometheus).", envvar="KUBECONFIG")] = None,
    context: Annotated[str | None, typer.Option("--context", help="kubeconfig context (with --prometheus).")] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Cluster of --config to scan (with --prometheus).")] = None,
) -> None:
    """Explain one finding (its ID from `gpuwaste scan` or `run`): evidence, thresholds, formula and numbers. Reads
    the recording again (-r), Prometheus again (--prometheus, a live scan's finding: the `--at` the scan printed gives
    the same ID), or the finding stored in a run's state file (--state, default .gpuwaste/state.db)."""
    cfg = config_or_exit(config)
    if sum(x is not None for x in (recording, state, prometheus)) > 1:
        fail("pass one of --recording, --prometheus or --state")
    if prometheus is not None:
        matches = _live(fingerprint, cfg, prometheus=prometheus, cluster=cluster, cluster_file=cluster_file,
                        kubeconfig=kubeconfig, context=context, at=at, window=window)
    elif recording is None:
        path = check_state_path(state or DEFAULT_STATE)
        if not path.is_file():
            fail(escape_markup(f"{path}: no such state file. Pass -r DIR (the recording the finding came from) or "
                               "--state FILE (the state file of the `gpuwaste run` that found it)."))
        try:
            matches = stored_findings(path, fingerprint)
        except GpuWasteError as exc:
            fail(escape_markup(f"{path}: {exc}"))
        if not matches:
            fail(escape_markup(f"no finding with ID {fingerprint!r} in the state file {path}; pass the state file of "
                               "the run that found it (--state FILE) or its recording (-r DIR)"))
    else:
        cfg, matches = _scanned(recording, fingerprint, cfg, config_given=config is not None, at=at, window=window)
    if len(matches) > 1:
        fail(f"{fingerprint!r} matches {len(matches)} findings; give more characters")
    finding = matches[0]
    settings = cfg.detectors.by_name().get(finding.detector)
    out.print(explain_text(finding, settings), highlight=False, soft_wrap=True, markup=False)
    sys.stdout.flush()


__all__ = ["explain", "explain_text", "find", "share_text", "stored_findings"]
