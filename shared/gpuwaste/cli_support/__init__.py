"""What the `gpuwaste` command and its subcommands share: the Typer app, the consoles, option parsing and the
option checks; the scan report's renderer is `cli_support.scan_report`, the recording checks `cli_support.recording`.

`gpuwaste.cli` (scan, demo, generate-fleet) and each `gpuwaste.commands.*` module import from here; nothing here
imports them, so there is no import circle (import-linter's "layers" contract: cli > commands > cli_support).
"""


from __future__ import annotations

import logging
import os
import re
import sys
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer
from rich.console import Console
from typer.core import TyperGroup, TyperOption

from gpuwaste.errors import (
    ConfigError,
    InputFormatError,
    PermanentError,
    SourceAnswerError,
    SourceAuthError,
    SourceUnavailableError,
)

if TYPE_CHECKING:  # imported where used: `gpuwaste --help` starts without pydantic models, boto3 or requests
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.models.settings import ClusterConfig

#: Width of stdout when it is not a terminal, COLUMNS is not set and no terminal is attached to stderr or stdin.
PIPE_WIDTH = 80
#: The SQLite lifecycle store `run` writes and `summary` reads when --state is not given.
DEFAULT_STATE = Path(".gpuwaste/state.db")
#: The detectors' rules use 10-minute averages: a shorter window cannot hold one.
MIN_WINDOW_S = 600
WINDOW_HINT = "the detectors' rules use 10-minute averages; use --window 10m or more"


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


class PodLabel(StrEnum):
    """The label of DCGM series that names the workload's pod."""

    auto = "auto"
    pod = "pod"
    exported_pod = "exported_pod"
    pod_name = "pod_name"
