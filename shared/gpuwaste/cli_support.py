"""What the `gpuwaste` command and its subcommands share: the Typer app, the consoles, option parsing, the
scan table renderer and the recording checks.

`gpuwaste.cli` (scan, demo, generate-fleet) and each `gpuwaste.commands.*` module import from here; nothing here
imports them, so there is no import circle (import-linter's "layers" contract: cli > commands > cli_support).
"""


from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup, TyperOption

from gpuwaste import __version__
from gpuwaste.errors import (
    ConfigError,
    InputFormatError,
    PermanentError,
    SourceAnswerError,
    SourceAuthError,
    SourceUnavailableError,
)

if TYPE_CHECKING:  # imported where used: `gpuwaste --help` starts without pydantic models, boto3 or requests
    from gpuwaste.bootstrap import local
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.models.findings import Finding
    from gpuwaste.models.settings import ClusterConfig
    from gpuwaste.services.scan import Inventory, ScanReport

#: Width of stdout when it is not a terminal, COLUMNS is not set and no terminal is attached to stderr or stdin.
PIPE_WIDTH = 80
#: The SQLite lifecycle store `run` writes and `summary` reads when --state is not given.
DEFAULT_STATE = Path(".gpuwaste/state.db")
#: The detectors' rules use 10-minute averages: a shorter window cannot hold one.
MIN_WINDOW_S = 600
WINDOW_HINT = "the detectors' rules use 10-minute averages; use --window 10m or more"



def coverage_text(coverage: dict[str, dict[str, float]]) -> str:
    """The share of allocated GPU-hours with attributable telemetry, in all and per allocation kind:
    "attribution coverage: 97% of 212.0 allocated GPU-h · device plugin 100% · MIG 80%"."""
    total = coverage.get("all", {})
    kinds = "".join(f" · {k} {v['ratio']:.0%}" for k, v in coverage.items() if k != "all")
    return (f"attribution coverage: {total.get('ratio', 1.0):.0%} of {total.get('allocated_gpu_hours', 0.0):.1f} "
            f"allocated GPU-h{kinds}")

def funnel_text(funnel: dict[str, dict[str, float]]) -> str:
    """The fleet funnel in one line: "funnel: 22 GPUs → allocated 12.4 → active 8.0 → effective 3.1 GPUs (56% of allocated)"."""
    total = {k: sum(row[k] for row in funnel.values()) for k in ("total_gpus", "allocated_gpus", "active_gpus", "effective_gpus",
                                                                  "unobserved_gpus")}
    share = f" ({total['effective_gpus'] / total['allocated_gpus']:.0%} of allocated)" if total["allocated_gpus"] else ""
    unobserved = f" · {total['unobserved_gpus']:.1f} allocated GPUs unobserved" if total["unobserved_gpus"] else ""
    return (f"funnel: {total['total_gpus']:.1f} GPUs → allocated {total['allocated_gpus']:.1f} → active {total['active_gpus']:.1f} "
            f"→ effective {total['effective_gpus']:.1f}{share}{unobserved}")


def unmet_text(unmet: dict[str, dict[str, float | int | None]]) -> str:
    """Pending pods asking for GPUs that no node took: "unmet GPU requests: nvidia.com/gpu 3 pods asking 5 (longest wait 2h)"."""
    from gpuwaste.people import duration

    parts = []
    for resource, row in unmet.items():
        wait = row.get("longest_wait_s")
        waited = f", longest wait {duration(int(wait))}" if isinstance(wait, (int, float)) else ""
        parts.append(f"{resource} {plural(int(row['pods'] or 0), 'pod')} asking {row['requested']}{waited}")
    return "unmet GPU requests: " + "; ".join(parts)


def stdout_width() -> int | None:
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


out = Console(width=stdout_width())


class _Verbose:
    """`gpuwaste -v COMMAND`: set by the top-level option, read by commands that hide details by default."""

    on = False


VERBOSE = _Verbose()
err = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print an error that says what to do, and exit non-zero."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True, markup=True)
    raise typer.Exit(code)


#: The first 16 bytes of every SQLite 3 database file (sqlite.org/fileformat.html, "The Database Header").
SQLITE_HEADER = b"SQLite format 3\x00"


def check_state_path(path: Path, option: str = "--state") -> Path:
    """`path` when it can be a state file: missing (a new one is created), empty, or an SQLite database; else exits
    with one line that says what is wrong — a directory, an unreadable file, a file that is not SQLite — instead of
    a traceback from the store."""
    if path.is_dir():
        fail(escape_markup(f"{option} {path}: is a directory, not a state file; give a file path such as "
                           f"{path / 'state.db'}"))
    if path.exists():
        try:
            with path.open("rb") as fh:
                head = fh.read(len(SQLITE_HEADER))
        except OSError as exc:
            fail(escape_markup(f"{option} {path}: cannot be read ({exc.strerror or exc})"))
        if head and head != SQLITE_HEADER:
            fail(escape_markup(f"{option} {path}: not a gpuwaste state file (not an SQLite database); give the file "
                               "`gpuwaste run --state` wrote, or a new path"))
    return path


def escape_markup(text: str) -> str:
    """Escape rich markup in a message that comes from input (file names, values)."""
    from rich.markup import escape

    return escape(text)


#: Exit 3: a source (Prometheus, the Kubernetes API) unreachable, rejecting the credentials, or answering nothing usable
#: (malformed, refused, redirected, over its size cap, past its deadline) — the source is at fault, not the input.
SOURCE_ERRORS = (SourceUnavailableError, SourceAuthError, SourceAnswerError)
#: The generic hint under a source error whose message carries none of its own.
SOURCE_HINT = "Check the URL, network access and credentials, then retry."
#: A source error's own hint: "…; check the URL, DNS…", "… — raise prometheus.max_answer_mb", "…; retry later".
_OWN_HINT = re.compile(r"[;—]\s*(check|raise|retry|set|give|pass|use|install|enable)\b", re.IGNORECASE)


def fail_source(exc: BaseException) -> NoReturn:
    """Exit 3 on a source error (one of `SOURCE_ERRORS`) with one hint: the error's own where its message carries one
    ("cannot connect to Prometheus at …; check the URL, DNS, network path …"), else `SOURCE_HINT` under it."""
    message = str(exc)
    fail(escape_markup(message) + ("" if _OWN_HINT.search(message) else "\n" + SOURCE_HINT), code=3)


class GuardedGroup(TyperGroup):
    """The command group: user mistakes that reach the top of any command become one `error:` line, never
    a traceback (pydantic ValidationError, ConfigError, InputFormatError, OSError: exit 2; a source that
    cannot be reached: exit 3)."""

    def invoke(self, ctx):  # type: ignore[no-untyped-def]
        from pydantic import ValidationError

        from gpuwaste.config import format_validation_error

        try:
            return super().invoke(ctx)
        except ValidationError as exc:
            fail(escape_markup(format_validation_error(exc, source="option").replace("\n", "; ")))
        except InputFormatError as exc:
            fail(escape_markup(f"{exc}") + "\nThe input is malformed at the place shown; fix or re-create it.")
        except SOURCE_ERRORS as exc:
            fail_source(exc)
        except PermanentError as exc:  # ConfigError and the other errors retrying cannot fix
            fail(escape_markup(str(exc)))
        except OSError as exc:
            if isinstance(exc, BrokenPipeError):
                raise
            where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
            fail(escape_markup(f"{where}{exc.strerror or exc}") + " (check the path and its permissions)")


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
               "6 places and has gpus_held (GPUs the workload holds) and wasted_gpus; CSV and JSON name each finding's team "
               "(the owner --team selects); openmetrics / prometheus print "
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
        fail(f"{option} {escape_markup(exc.message)}")
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
        fail(f"{option} {escape_markup(exc.message)}")
    if seconds <= 0:
        fail(f"{option} {text}: must be longer than zero, e.g. 30s, 10m, 1h")
    return seconds


def plural(n: int, word: str) -> str:
    """'1 GPU', '2 GPUs'."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def check_prometheus_url(url: str) -> str:
    """The URL when it starts with http:// or https:// and is no link-local or metadata-service address.

    Raises:
        typer.Exit: (exit 2) otherwise.
    """
    if not re.match(r"^https?://", url):
        fail(f"--prometheus {url!r}: the URL must start with http:// or https:// (e.g. http://prometheus.monitoring:9090)")
    from gpuwaste.models.settings import outbound_url_problem

    problem = outbound_url_problem(url)
    if problem:
        fail(escape_markup(f"--prometheus {url!r}: {problem.split(';')[0]}; to read it anyway, configure "
                           "clusters[].prometheus with allow_link_local_urls: true"))
    return url


def check_kubeconfig(path: Path | None) -> None:
    """A --kubeconfig that exists and holds a YAML mapping.

    Raises:
        typer.Exit: (exit 2) otherwise, saying what to do.
    """
    if path is None:
        return
    import yaml

    from gpuwaste.files import read_capped

    try:
        doc = yaml.safe_load(read_capped(path, 16 << 20, what="kubeconfig").decode("utf-8"))
    except InputFormatError as exc:
        fail(f"--kubeconfig {escape_markup(str(exc))}. {KUBE_HINT}")
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        fail(f"--kubeconfig {path}: cannot read it ({type(exc).__name__}). {KUBE_HINT}")
    if not isinstance(doc, dict) or "clusters" not in doc:
        fail(f"--kubeconfig {path}: not a kubeconfig (no 'clusters'). {KUBE_HINT}")


KUBE_HINT = ("Pass --kubeconfig FILE (and --context NAME), or scan without the API: leave out --kubeconfig to read the "
             "cluster state from kube-state-metrics in the same Prometheus, --recording DIR, "
             "or a telemetry file with --cluster-json FILE (kubectl get pods,nodes -A -o json).")


def quiet_http_logs(verbose: bool) -> None:
    """Keep urllib3's retry WARNING lines out of the CLI output unless --verbose (the final error says it all)."""
    logging.getLogger("urllib3").setLevel(logging.DEBUG if verbose else logging.ERROR)


def alert_budgets(config: GpuWasteConfig) -> tuple[dict[str, Decimal], Decimal | None]:
    """The waste budgets (USD/day per team, default) that /metrics exposes as gpuwaste_team_budget_usd_per_day: the
    per-day budgets, with the monthly ones as budget ÷ days of the current UTC month (`services.month_end`)."""
    from gpuwaste.services.month_end import alert_budgets_per_day

    s = config.serve
    return alert_budgets_per_day(datetime.now(UTC), budgets_per_day=dict(s.team_budgets_usd_per_day),
                                 default_per_day=s.default_team_budget_usd_per_day,
                                 budgets_per_month=dict(s.team_budgets_usd_per_month),
                                 default_per_month=s.default_team_budget_usd_per_month)


def config_or_exit(path: Path | None) -> GpuWasteConfig:
    from gpuwaste.config import load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        fail(str(exc))


def progress_printer(quiet: bool):  # type: ignore[no-untyped-def]
    def show(msg: str) -> None:
        if not quiet:
            err.print(f"[dim]… {msg}[/]", highlight=False)

    return show


def telemetry_lines(report: ScanReport) -> None:
    """How the telemetry was read (plan, sample spacing, buckets) and any unreadable samples, with where they are."""
    from gpuwaste.sinks import terminal

    q = report.telemetry_quality
    if not q:
        return
    spacing = q.get("sample_interval_s")
    parts = [f"plan: {q['plan']}" if q.get("plan") else "", f"{report.query_count} queries" if report.query_count else "",
             f"a sample every {spacing:g} s ({'inferred from the data' if q.get('sample_interval_inferred') else 'configured'})" if spacing else "",
             f"{q['bucket_s'] // 60}-min buckets" if q.get("bucket_s") else ""]
    terminal.print_fitted(out, "telemetry: " + " · ".join(p for p in parts if p), style="dim")
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
    source: str | None = None  # what `gpuwaste explain ID` needs to find the finding again (`-r DIR`, `--state FILE`)


def team_function(config: GpuWasteConfig | None = None):  # type: ignore[no-untyped-def]
    """finding → its team: the routing rules (annotations, labels, team/namespace maps), else the namespace."""
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.services.routing import route_for
    from gpuwaste.sinks import terminal

    settings = (config or GpuWasteConfig()).delivery

    def team(f):  # type: ignore[no-untyped-def]
        owner = route_for(f, settings).team or terminal.owner_of(f)
        return terminal.NODE_OWNER if owner.startswith("node ") else owner

    return team


def select(findings: Sequence[Finding], view: View, team: Callable[[Finding], str]) -> list[Finding]:
    """The findings `view` keeps (namespace, team and kind filters), in its order (sort), at most `top`."""
    from gpuwaste.people import kind_names, parse_kind

    kinds = set()
    for k in view.kinds:
        kind = parse_kind(k)
        if kind is None:
            from gpuwaste.models.findings import WasteKind

            fail(f"--kind {escape_markup(k)}: not a kind; use one of " + ", ".join(kind_names())
                 + " (the JSON values are accepted too: " + ", ".join(w.value for w in WasteKind) + ")")
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


def _gpus_where(inv: Inventory) -> str:
    """Where the header's GPUs are: "on 8 nodes", or "in the telemetry, no node known" (never "3 GPUs on 0 nodes")."""
    if inv.nodes or not inv.physical_gpus:
        return f"on {plural(inv.nodes, 'node')}"
    return "in the telemetry, no node known"


def _no_waste_line(report: ScanReport, *, filtered: bool) -> Text:
    """The line for a scan without waste findings: "no waste found", or — when nothing could be judged for want of
    cluster state — what was missing and the three ways to give it (never "no waste")."""
    if any(f.details.get("check") == "no_cluster_state" for f in report.findings):
        return Text("nothing judged: no cluster state to tie the GPUs to pods and nodes; give the scan --kubeconfig, "
                    "or kube-state-metrics in this Prometheus (`gpuwaste doctor --prometheus URL` lists what is missing), "
                    "or --cluster-json FILE", style="yellow")
    return Text("no waste found" + (" with these filters" if filtered else ""), style="green")


def _print_json(report: ScanReport, findings: list[Finding], team: Callable[[Finding], str],
                config: GpuWasteConfig | None) -> None:
    """The JSON output of `render`: the findings, the inventory (with the per-team funnel when showback ran)."""
    from gpuwaste.sinks import terminal

    inv = report.inventory
    inventory = dict(inv.__dict__)
    if report.showback is not None:  # the per-team funnel: teams as routing sees them (the same teams as the findings)
        from gpuwaste.services.showback import funnel_figures

        inventory["funnel"] = {**inv.funnel, "team": funnel_figures(report.showback, "team", (config.delivery if config else None))}
    sys.stdout.write(terminal.to_json(
        findings,
        team=team,
        cluster=report.cluster,
        scan_id=report.scan_id,
        eval_time=report.eval_time.isoformat(),
        window_s=report.window_s,
        inventory=inventory,
        query_count=report.query_count,
        telemetry=report.telemetry_quality,
        no_verdict=[nv.__dict__ for nv in report.no_verdict],
    ) + "\n")


def _print_header(report: ScanReport, view: View, dated: str | None) -> None:
    """The table output's header line (cluster, span, GPUs, pods) and, with `view.verbose`, the inventory."""
    from gpuwaste.people import plain
    from gpuwaste.people import when as when_text
    from gpuwaste.sinks import terminal

    inv = report.inventory
    if inv.single_instant:
        span = dated or f"one scrape dated {when_text(report.eval_time)}"
    else:
        span = f"{report.window_s // 60} min to {when_text(report.eval_time)}"
    header = (f"{plain(report.cluster)} · {plain(span)} · {plural(inv.physical_gpus, 'GPU')} {_gpus_where(inv)} · "
              f"{inv.pods_holding_gpus} "
              f"{'pod holds' if inv.pods_holding_gpus == 1 else 'pods hold'} GPUs")
    for n, line in enumerate(terminal.fit_line(header, out.width)):  # broken at " · " only, never mid-phrase
        cluster = plain(report.cluster)
        out.print(Text.assemble((cluster, "bold"), line[len(cluster):]) if n == 0 and line.startswith(cluster) else Text(line),
                  soft_wrap=True)
    if view.verbose:
        models = ", ".join(f"{'unknown (no modelName label)' if k == 'unknown' else k}×{v}" for k, v in sorted(inv.models.items()))
        terminal.print_fitted(out, f"{plural(inv.mig_instances, 'MIG instance')} · models: {plain(models) or 'none'}",
                              style="dim")
        terminal.print_fitted(out, "activity signal per device: "
                              + ", ".join(f"{k.replace('DCGM_FI_', '')}×{v}" for k, v in sorted(inv.activity_signals.items()))
                              + " · attribution: " + (", ".join(f"{k}×{v}" for k, v in sorted(inv.attribution.items())) or "none")
                              + (f" · allocation: {plain(str(inv.allocation))}" if inv.allocation else ""), style="dim")
        if inv.metrics_present:
            dcgm = [m.removeprefix("DCGM_FI_") for m in inv.metrics_present if m.startswith("DCGM_FI_")]
            other = [m for m in inv.metrics_present if not m.startswith("DCGM_FI_")]
            terminal.print_fitted(out, f"signals present ({len(inv.metrics_present)}): " + ", ".join(dcgm + other), style="dim")
        if report.query_count:
            out.print(Text(f"{report.query_count} Prometheus queries", style="dim"))


def _print_inventory_notes(report: ScanReport, view: View) -> None:
    """Print the table output's lines under the header.

    Coverage, funnel, unmet requests, conservation, allocation notes, the cluster state's source and its data-quality
    notes.
    """
    from gpuwaste.people import plain
    from gpuwaste.sinks import terminal

    inv = report.inventory
    if inv.attribution_coverage:  # the share of allocated GPU-hours with attributable telemetry (issue 21 §12)
        terminal.print_fitted(out, coverage_text(inv.attribution_coverage), style="dim")
    if inv.funnel.get("cluster"):  # total → allocated → active → effective (issue 24 §1)
        terminal.print_fitted(out, funnel_text(inv.funnel["cluster"]), style="dim")
        if view.verbose:
            from gpuwaste.services.showback import FUNNEL_RULE

            terminal.print_fitted(out, f"funnel rule: {FUNNEL_RULE}", style="dim")
            for model, row in inv.funnel.get("gpu_model", {}).items():
                terminal.print_fitted(out, f"  {plain(model)}: " + funnel_text({model: row}).removeprefix("funnel: "), style="dim")
    if inv.unmet_gpu_requests:
        terminal.print_fitted(out, unmet_text(inv.unmet_gpu_requests), style="yellow")
    if inv.conservation and not inv.conservation.get("physical_gpus") and inv.physical_gpus:
        # no GPU node in the cluster state: nothing to charge; "holds: 0 physical GPUs" beside "1 GPU" contradicted the header
        terminal.print_fitted(out, f"share conservation: not checked — no GPU node in the cluster state, so the {inv.physical_gpus} "
                                   f"GPU(s) in the telemetry are neither charged nor priced", style="dim")
    elif inv.conservation:  # every physical GPU-hour charged once (issue 24 §3)
        text = str(inv.conservation.get("text", ""))
        terminal.print_fitted(out, text, style="dim" if inv.conservation.get("holds") else "red")
    for note in inv.allocation_notes:  # capacity that is not GPUs, claims nobody uses, RBAC to grant (issue 11)
        out.print(Text(f"allocation note: {plain(note)}", style="dim"))
    if report.cluster_source:
        out.print(Text(f"cluster state: {plain(report.cluster_source)}", style="dim"))
    for note in report.cluster_notes:
        out.print(Text(f"data quality: {plain(note)}", style="yellow"))


def _print_no_verdict(report: ScanReport, view: View) -> None:
    """Print the "no verdict" lines: a count of pods/nodes, or (`view.verbose`) the causes, most common first."""
    from gpuwaste.people import reason_words
    from gpuwaste.sinks import terminal

    inv = report.inventory
    subjects: dict[str, set[str]] = {}
    for nv in report.no_verdict:
        reason = reason_words(nv.reason)
        if inv.single_instant:  # one sample: a longer window cannot help, so no look-back hint
            reason = re.sub(r"\s*\((scan with --window|needs \d+ day)[^)]*\)", "", reason)
        subjects.setdefault(reason, set()).add(nv.subject)  # count subjects (pods, nodes), not detectors
    every = set().union(*subjects.values())
    if view.verbose:  # the reasons grouped by cause, the most common first, one per line
        what = "1 pod/node" if len(every) == 1 else f"{len(every)} pods/nodes"
        out.print(Text(f"no verdict on {what}, by cause:", style="dim"))
        for r, v in sorted(subjects.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            terminal.print_fitted(out, f"{len(v):3d}× {r}", first="  ", indent="        ", style="dim")
    else:
        out.print(Text(f"no verdict on {len(every)} pods/nodes (-v says why)" if len(every) != 1
                       else "no verdict on 1 pod/node (-v says why)", style="dim"))


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

    from gpuwaste.people import kind_label, namespace_label
    from gpuwaste.sinks import terminal

    view = view or View()
    team = team_function(config)
    chosen = select(report.findings, view, team)
    findings = [f for f in chosen if f.usd_per_day is None or f.usd_per_day >= Decimal(str(min_usd))]
    if output in (Output.openmetrics, Output.prometheus):
        from gpuwaste.config import GpuWasteConfig

        sys.stdout.buffer.write(_exposition(report, findings, config or GpuWasteConfig(),
                                            openmetrics=output is Output.openmetrics))
        sys.stdout.flush()
        return
    if output is Output.json:
        _print_json(report, findings, team, config)
        return
    if output is Output.csv:
        sys.stdout.write(terminal.to_csv(findings, team=team))
        return
    inv = report.inventory
    _print_header(report, view, dated)
    _print_inventory_notes(report, view)
    telemetry_lines(report)
    if inv.single_instant:
        out.print("[yellow]The telemetry holds ONE sample per series: it shows what is there, not sustained use; "
                  "no idle or under-used verdict is possible from one sample.[/]")
    if report.no_verdict and not quiet:
        _print_no_verdict(report, view)
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
        out.print(_no_waste_line(report, filtered=len(chosen) < len(report.findings)))
    for line in terminal.price_caveat_lines(shown):
        out.print(Text(line, style="yellow"))
    hidden = len(chosen) - len(findings)
    if hidden:
        out.print(Text(f"{hidden} finding(s) under ${min_usd:g}/day hidden by --min-usd", style="dim"))
    if shown and not quiet and view.source:  # one line, never folded: a command to copy
        out.print(Text(f"why: gpuwaste explain ID {view.source}", style="dim"), soft_wrap=True)
    key = {GroupBy.team: team, GroupBy.namespace: lambda f: namespace_label(f.subject.namespace),
           GroupBy.kind: lambda f: kind_label(f.kind)}[view.group_by]
    terminal.print_rollup(out, waste, key=key, by=view.group_by.value, window_s=report.window_s)


def live_cluster(cfg: GpuWasteConfig, cluster: str | None, prometheus: str | None, kubeconfig: Path | None,
                 context: str | None) -> ClusterConfig:
    """The cluster a live scan or run reads: from --config (by --cluster, else the first), with the command-line
    Prometheus URL and kubeconfig/context applied on top.

    Raises:
        ConfigError: when --cluster names no configured cluster.
    """
    from gpuwaste.models.settings import ClusterConfig

    if prometheus:
        check_prometheus_url(prometheus)
    check_kubeconfig(kubeconfig)
    cc = cfg.cluster(cluster) if (cluster and cfg.clusters) else (cfg.clusters[0] if cfg.clusters else ClusterConfig(name=cluster or "cluster"))
    if prometheus:
        from gpuwaste.models.settings import PrometheusSettings

        cc = cc.model_copy(update={"prometheus": PrometheusSettings(url=prometheus)})  # frozen: a changed copy
    if kubeconfig or context:
        kubernetes = cc.kubernetes.model_copy(update={"kubeconfig": str(kubeconfig) if kubeconfig else cc.kubernetes.kubeconfig,
                                                      "context": context or cc.kubernetes.context})
        cc = cc.model_copy(update={"kubernetes": kubernetes})
    return cc


def _exposition(report: ScanReport, findings: list[Finding], config: GpuWasteConfig, *, openmetrics: bool) -> bytes:
    """The scan as gpuwaste's metric families (the builder `gpuwaste serve` uses): OpenMetrics, or the Prometheus
    text format that node-exporter's textfile collector reads (docs/metrics.md)."""
    from gpuwaste.services.metrics import health_of_scan, snapshot_of_scan
    from gpuwaste.services.showback import health_figures
    from gpuwaste.sinks.prometheus_metrics import render_openmetrics, render_text

    health = health_of_scan(report.cluster, at=datetime.now(tz=UTC).replace(microsecond=0),
                            duration_s=report.duration_s, window_s=report.window_s,
                            gpus=report.inventory.physical_gpus, findings=findings,
                            no_verdict_detectors=[nv.detector for nv in report.no_verdict],
                            coverage=report.inventory.attribution_coverage,
                            showback=None if report.showback is None else health_figures(report.showback, config.delivery))
    snapshot = snapshot_of_scan(findings, health, config.delivery, top=config.serve.top_workloads,
                                team_budgets=alert_budgets(config)[0],
                                default_budget=alert_budgets(config)[1], version=__version__)
    return render_openmetrics(snapshot) if openmetrics else render_text(snapshot)


def run_scan(service, at: datetime, output: Output, min_usd: float, quiet: bool, *, wide: bool = False,  # type: ignore[no-untyped-def]
              dated: str | None = None, view: View | None = None, config: GpuWasteConfig | None = None) -> ScanReport:
    try:
        report: ScanReport = service.scan(at=at)
    except InputFormatError as exc:
        fail(f"{escape_markup(str(exc))}\nThe recording is malformed at the place shown; fix or re-record it (gpuwaste record).")
    except SOURCE_ERRORS as exc:
        fail_source(exc)
    except PermanentError as exc:
        fail(escape_markup(str(exc)))
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
    """Refuse a window longer than the recording holds before `when`: one clear error, not a row per pod (a
    `--window` given on the command line; the recording's own window is scanned as recorded: `note_short_recording`).

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


def note_short_recording(sources: local.Sources, when: datetime, window_s: int, *, quiet: bool = False) -> bool:
    """Say (stderr) when a recording holds less telemetry than its own window before `when` — `gpuwaste record` at a
    time past the newest sample (the exporter or the scrape stopped): the scan keeps the recorded window and
    evaluation time, as the live scan at that time did, and the time without samples is reported as missing/stale
    telemetry (data-quality findings), never idle. Returns whether it said so."""
    held = held_before(sources, when)
    if held is None or window_s <= held * 1.05:
        return False
    if not quiet:
        err.print(f"[yellow]note:[/] the recording holds {_duration(held)} of telemetry in its {_duration(window_s)} window "
                  f"before {when:%Y-%m-%d %H:%M} UTC; the time without samples is reported as missing telemetry, "
                  "never as idle GPUs", highlight=False, soft_wrap=True)
    return True


def warn_recording(sources: local.Sources, when: datetime, window_s: int, *, quiet: bool = False) -> None:
    """Warn (stderr) when a recording carries no cluster state."""
    if sources.recording is None or quiet:
        return
    from gpuwaste.sources.recording import RecordingClusterSource

    if isinstance(sources.cluster, RecordingClusterSource) and sources.cluster.cluster_file is None:
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
        from gpuwaste.sources.recording import RecordingClusterSource

        if not isinstance(sources.cluster, RecordingClusterSource) or sources.cluster.cluster_file is None:
            fail(f"no DCGM series found in {escape_markup(str(rec.telemetry_file))} (is it a dcgm-exporter scrape?). "
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


def input_hint(message: str) -> str:
    """Parser messages name the recording-format option by its old name; say the one `scan` documents."""
    return message.replace("pass --format ", "pass --input-format ")


