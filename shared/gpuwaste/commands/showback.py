"""`gpuwaste showback` and `gpuwaste export`: who held the GPUs of a window and what it cost, charged once.

`showback` groups the window's ledger (`services.showback`) by team, namespace or an allow-listed label: allocated
GPU-hours and USD, used, wasted (the scan's own priced waste findings: the money ledger's numbers), effective, and
efficiency — with the share-conservation check. `export` writes FOCUS rows (`sinks.focus`) per workload per day.
Both scan a recording (`--recording DIR`) or a live cluster (`--prometheus URL`, with `--config`), over `--window`
ending at `--at`. `showback --since 7d` / `--period 2026-03` reads any period from the lifecycle store instead
(`--state`: the allocation ledger `gpuwaste run` records per cluster and hour; `services.showback.stored`).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuwaste.cli_support import (
    DEFAULT_STATE,
    app,
    check_state_path,
    config_or_exit,
    err,
    escape_markup,
    fail,
    live_cluster,
    out,
    parse_positive,
    parse_time,
    parse_window,
)
from gpuwaste.errors import GpuWasteError, InputFormatError
from gpuwaste.models.text import for_terminal

if TYPE_CHECKING:
    from gpuwaste.config import GpuWasteConfig
    from gpuwaste.models.findings import Finding
    from gpuwaste.models.settings.delivery import DeliverySettings
    from gpuwaste.pricing.bill import BillRates
    from gpuwaste.services.scan import ScanReport
    from gpuwaste.services.showback import ScanLedger, ShowbackRow

#: Labels `--by label:KEY` may group by unless the configuration's allow-list (`GPUWASTE_SHOWBACK_LABELS`, comma-
#: separated) names others: label values are people's words, never arbitrary pod metadata.
DEFAULT_LABELS = ("team", "cost_center", "cost-center", "costcenter", "project", "app.kubernetes.io/part-of", "owner")


class ExportFormat(StrEnum):
    """File formats of `export`."""

    csv = "csv"
    parquet = "parquet"


class ShowbackOutput(StrEnum):
    """Output formats of `showback`."""

    table = "table"
    json = "json"
    csv = "csv"


def allowed_labels() -> tuple[str, ...]:
    """The label allow-list: `GPUWASTE_SHOWBACK_LABELS` (comma-separated) when set, else `DEFAULT_LABELS`."""
    import os

    raw = os.environ.get("GPUWASTE_SHOWBACK_LABELS", "")
    names = tuple(x.strip() for x in raw.split(",") if x.strip())
    return names or DEFAULT_LABELS


#: The groupings `--by` (and the read API's `by`) accept besides `label:KEY`.
GROUPINGS = ("team", "namespace", "cluster", "gpu_model", "node", "mechanism")


def grouping_problem(by: str) -> str | None:
    """What is wrong with the grouping `by` (None: showback knows it and, for `label:KEY`, KEY is allow-listed)."""
    if by.startswith("label:"):
        key = by[6:]
        if key not in allowed_labels():
            return (
                f"label {key!r} is not allow-listed; allowed: {', '.join(allowed_labels())} "
                "(set GPUWASTE_SHOWBACK_LABELS=key1,key2 to change the list)"
            )
        return None
    if by not in GROUPINGS:
        return "use team, namespace, label:KEY, cluster, gpu_model, node or mechanism"
    return None


def check_by(by: str) -> str:
    """`by` when it is a grouping showback knows and (for `label:KEY`) KEY is allow-listed; else exit 2."""
    problem = grouping_problem(by)
    if problem is not None:
        fail(f"--by {escape_markup(by)}: {escape_markup(problem)}")
    return by


def showback_document(
    cluster: str, sl: ScanLedger, findings: Sequence[Finding], groupings: Sequence[str], delivery: DeliverySettings
) -> dict[str, Any]:
    """`showback --output json`'s document (the read API's `/api/v1/showback` answers the same).

    Shape: `{"cluster", "period": {"start", "end"} (RFC 3339), "conservation": services.showback.conservation_figures,
    "groups": {by: [ShowbackRow.as_dict(), ...]}}`: GPU-hours to 4 decimals, USD numbers to the cent.
    """
    from gpuwaste.services.showback import conservation_figures, showback

    return {
        "cluster": cluster,
        "period": {"start": sl.window_start.isoformat(), "end": sl.window_end.isoformat()},
        "conservation": conservation_figures(sl.ledger.conservation),
        "groups": {b: [r.as_dict() for r in showback(sl, findings, b, delivery)] for b in groupings},
    }


def read_bill_or_exit(bill: Path | None) -> BillRates | None:
    """The bill's rates (`pricing.bill.read_bill`: CUR 2.0 or FOCUS), or None without `--bill`.

    Says on stderr what the bill prices (and, with CUR 2.0 split cost allocation data, what AWS split to EKS pods).
    Exits 2 on a missing file or one that is neither bill.
    """
    if bill is None:
        return None
    from gpuwaste.pricing.bill import read_bill

    if not bill.exists():
        fail(f"--bill {escape_markup(str(bill))}: no such file")
    try:
        rates = read_bill(bill)
    except InputFormatError as exc:
        fail(f"--bill {escape_markup(str(exc))}")
    if rates.pods:
        pods = list(rates.pods.values())
        total = sum(p.usd for p in pods)
        err.print(f"split cost allocation: AWS split ${total:,.2f} of instances to {len(pods)} EKS pods "
                  f"({pods[0].source}); gpuwaste charges GPU-hours by GPU share", markup=False, soft_wrap=True)
    if not rates.overrides:
        err.print(f"--bill {bill}: no EC2 instance-hours in it; list prices stay", markup=False)
    else:
        err.print(
            f"priced from your bill: {len(rates.overrides)} instance types from {rates.lines_used} line items "
            f"({rates.source}); list prices for the rest",
            markup=False,
            soft_wrap=True,
        )
    return rates


def with_rates(cfg: GpuWasteConfig, rates: BillRates | None) -> GpuWasteConfig:
    """`cfg` with the bill's instance rates over its rate card (unchanged without rates)."""
    if rates is None or not rates.overrides:
        return cfg
    from gpuwaste.pricing.bill import with_bill

    return cfg.model_copy(update={"pricing": with_bill(cfg.pricing, rates)})


def apply_bill(cfg: GpuWasteConfig, bill: Path | None) -> GpuWasteConfig:
    """`cfg` with the effective instance-hour rates of a bill (CUR 2.0 or FOCUS) over its rate card.

    The bill (`pricing.bill`) is layered over the rate card; the bill's period is said on stderr (`read_bill_or_exit`).
    Exits 2 on a file that is neither bill.
    """
    return with_rates(cfg, read_bill_or_exit(bill))


def bill_split_document(rates: BillRates | None) -> dict[str, object] | None:
    """AWS's split of instances to EKS pods per cluster and namespace (CUR 2.0 split cost allocation), or None.

    Over the bill's own period (its provenance says which), never the scan window: set beside the showback, not in it.
    """
    if rates is None or not rates.pods:
        return None
    by_ns: dict[str, dict[str, object]] = {}
    for p in rates.pods.values():
        slot = by_ns.setdefault(f"{p.cluster}/{p.namespace}", {"cluster": p.cluster, "namespace": p.namespace,
                                                               "usd": Decimal(0), "pods": 0})
        slot["usd"] = slot["usd"] + p.usd  # type: ignore[operator]
        slot["pods"] = int(str(slot["pods"])) + 1
    return {
        "source": next(iter(rates.pods.values())).source,
        "rule": "AWS split cost allocation: each pod's split_line_item_split_cost + split_line_item_unused_cost",
        "usd": str(sum(p.usd for p in rates.pods.values())),
        "namespaces": [{**v, "usd": str(v["usd"])} for _, v in sorted(by_ns.items())],
    }


def scan_window(
    recording: Path | None,
    prometheus: str | None,
    config: Path | None,
    cluster: str | None,
    at: str | None,
    window: str | None,
    kubeconfig: Path | None = None,
    context: str | None = None,
    bill: BillRates | None = None,
) -> tuple[ScanReport, GpuWasteConfig]:
    """One priced scan over the window, as `gpuwaste scan` runs it.

    The same findings, the same ledger. `bill`: a bill's effective rates, over list prices (`read_bill_or_exit`).
    """
    from datetime import UTC, datetime

    from gpuwaste.bootstrap import local

    cfg = with_rates(config_or_exit(config), bill)
    window_s = parse_window(window) if window else None
    when = parse_time(at)
    try:
        if recording is not None:
            if not recording.exists():
                fail(f"{escape_markup(str(recording))}: no such file or directory")
            sources = local.recording_sources(recording, cfg, cluster_name=cluster)
            assert sources.recording is not None
            cfg, _ = local.recording_config(cfg, sources, config_given=config is not None)
            when = when or sources.recording.end_time()
            window_s = window_s or sources.recording.meta.window_s
        else:
            if prometheus is None and not cfg.clusters:
                fail("nothing to read: pass --recording DIR, or --prometheus URL, or --config FILE")
            sources = local.live_sources(live_cluster(cfg, cluster, prometheus, kubeconfig, context), cfg)
            when = when or datetime.now(tz=UTC).replace(microsecond=0)
        return local.scan_service(sources, cfg, window_s=window_s).scan(at=when), cfg
    except InputFormatError as exc:
        fail(f"{escape_markup(str(exc))}\nThe recording is malformed at the place shown; fix or re-record it.")
    except GpuWasteError as exc:
        fail(escape_markup(str(exc)), code=3)


def rows_csv(rows: list[dict[str, object]]) -> str:
    """Rows of dicts as CSV (header from the first row)."""
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return buf.getvalue()


def _table(rows: list[ShowbackRow], by: str, report: ScanReport) -> None:
    from rich.table import Table
    from rich.text import Text

    sl = report.showback
    assert sl is not None
    t = Table(
        title=f"showback by {by} · {sl.window_start:%Y-%m-%d %H:%M} – {sl.window_end:%Y-%m-%d %H:%M} UTC · "
        f"{report.cluster}",
        title_justify="left",
    )
    for col in (
        "group",
        "holders",
        "allocated GPU-h",
        "allocated",
        "used GPU-h",
        "wasted GPU-h",
        "wasted",
        "efficiency",
    ):
        t.add_column(col, justify="left" if col == "group" else "right", overflow="fold")
    for r in rows:
        d = r.as_dict()
        eff = d["efficiency"]
        t.add_row(
            Text(for_terminal(str(d["group"]))),
            str(d["holders"] or ""),
            f"{d['allocated_gpu_hours']:,.2f}",
            f"${d['allocated_usd']:,.2f}",
            f"{d['used_gpu_hours']:,.2f}",
            f"{d['wasted_gpu_hours']:,.2f}",
            f"${d['wasted_usd']:,.2f}",
            "" if eff is None else f"{eff:.0%}",
        )
    total_cents = sum(r.allocated_cents for r in rows)
    wasted = sum(r.as_dict()["wasted_usd"] for r in rows)  # type: ignore[misc]
    t.add_row(
        "total",
        "",
        f"{sum(r.allocated_gpu_hours for r in rows):,.2f}",
        f"${total_cents / 100:,.2f}",
        "",
        "",
        f"${wasted:,.2f}",
        "",
        style="bold",
    )
    out.print(t)
    out.print(f"[dim]{escape_markup(sl.ledger.conservation.text())}[/]", soft_wrap=True)


#: The scan options `showback` and `export` share (one declaration each).
RecordingOpt = Annotated[
    Path | None,
    typer.Option("--recording", "-r", help="Scan a recording (directory from `gpuwaste record` or `generate-fleet`)."),
]
PrometheusOpt = Annotated[
    str | None, typer.Option("--prometheus", "-p", help="Prometheus base URL (live).", envvar="GPUWASTE_PROMETHEUS_URL")
]
KubeconfigOpt = Annotated[
    Path | None, typer.Option("--kubeconfig", help="kubeconfig file (live).", envvar="KUBECONFIG")
]
ContextOpt = Annotated[str | None, typer.Option("--context", help="kubeconfig context.")]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="Configuration file (routing decides the teams).")
]
ClusterOpt = Annotated[str | None, typer.Option("--cluster", help="Cluster (in --config), or a label for a recording.")]
AtOpt = Annotated[
    str | None,
    typer.Option("--at", help="End of the period (RFC 3339 or unix seconds; default: the recording's end, or now)."),
]


@app.command("showback")
def showback_cmd(
    recording: RecordingOpt = None,
    prometheus: PrometheusOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    config: ConfigOpt = None,
    cluster: ClusterOpt = None,
    at: AtOpt = None,
    window: Annotated[
        str | None,
        typer.Option(
            "--window",
            "-w",
            help="Length of the period, e.g. 1h, 24h, 7d (default: the recording's window, else the scan window).",
        ),
    ] = None,
    by: Annotated[
        list[str] | None,
        typer.Option(
            "--by",
            help="Group by team (default), namespace, label:KEY (allow-listed: team, cost_center, project and more), "
            "cluster, gpu_model, node, mechanism; repeatable.",
        ),
    ] = None,
    output: Annotated[
        ShowbackOutput, typer.Option("--output", "-o", help="table, json (exact numbers) or csv.")
    ] = ShowbackOutput.table,
    bill: Annotated[
        Path | None,
        typer.Option(
            "--bill",
            help="Price from your bill: an AWS CUR 2.0 or FOCUS export, CSV or .csv.gz (effective cost per "
            "instance-hour: savings plans, "
            "reservations, spot); list prices for the rest.",
        ),
    ] = None,
    since: StoredSinceOpt = None,
    period: StoredPeriodOpt = None,
    until: StoredUntilOpt = "latest",
    state: StoredStateOpt = DEFAULT_STATE,
) -> None:
    """Showback: GPU-hours and USD per team / namespace / label over a period.

    Allocated, used, wasted and efficiency — every physical GPU-hour charged once (holders, unsold slices of shared
    GPUs, unallocated GPUs), to the cent.
    """
    from gpuwaste.services.showback import showback

    groupings = [check_by(b) for b in (by or ["team"])]
    if since is not None or period is not None:
        if recording is not None or prometheus is not None or window is not None or bill is not None:
            fail("--since/--period read the stored history (--state): leave out --recording, --prometheus, --window "
                 "and --bill (they scan one window)")
        stored_cmd(state, config, groupings, output, since=since, period=period, until=until)
        return
    rates = read_bill_or_exit(bill)
    report, cfg = scan_window(recording, prometheus, config, cluster, at, window, kubeconfig, context, rates)
    sl = report.showback
    if sl is None:
        fail("the scan produced no ledger")
    if output is ShowbackOutput.json:
        doc = showback_document(report.cluster, sl, report.findings, groupings, cfg.delivery)
        split = bill_split_document(rates)
        if split is not None:
            doc["bill_split_cost"] = split
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    views = {b: showback(sl, report.findings, b, cfg.delivery) for b in groupings}
    if output is ShowbackOutput.csv:
        flat = [
            {
                "by": b,
                "period_start": sl.window_start.isoformat(),
                "period_end": sl.window_end.isoformat(),
                "cluster": report.cluster,
                **r.as_dict(),
            }
            for b, rows in views.items()
            for r in rows
        ]
        sys.stdout.write(rows_csv(flat))
        return
    for b, rows in views.items():
        _table(rows, b, report)
    if not sl.ledger.conservation.holds:
        err.print(
            "share conservation failed: " + "; ".join(sl.ledger.conservation.problems[:5]), style="red", markup=False
        )
        raise typer.Exit(1)


StoredSinceOpt = Annotated[
    str | None,
    typer.Option("--since", help="Read the stored history (--state) instead of scanning: the period before --until, "
                 "e.g. 1d, 7d, 30d."),
]
StoredPeriodOpt = Annotated[
    str | None, typer.Option("--period", help="Read the stored history (--state) for a UTC day or month: 2026-03-09 "
                             "or 2026-03."),
]
StoredUntilOpt = Annotated[
    str, typer.Option("--until", help="End of the --since period: 'latest' (the newest activity in the state), 'now', "
                      "or a time.")
]
StoredStateOpt = Annotated[
    Path, typer.Option("--state", help="SQLite state file written by `gpuwaste run` (for --since / --period).")
]


def stored_period(since: str | None, period: str | None, until: str,
                  latest: datetime | None) -> tuple[datetime, datetime]:
    """[start, end) of `--since DURATION --until …` or `--period YYYY-MM[-DD]` (UTC); exits 2 on a bad value."""
    from datetime import UTC

    if since is not None and period is not None:
        fail("--since and --period both choose the period: give one of them")
    if period is not None:
        try:
            if len(period) == 7:
                first = datetime.strptime(period, "%Y-%m").replace(tzinfo=UTC)
                return first, datetime(first.year + (first.month == 12), first.month % 12 + 1, 1, tzinfo=UTC)
            day = datetime.strptime(period, "%Y-%m-%d").replace(tzinfo=UTC)
            return day, day + timedelta(days=1)
        except ValueError:
            fail(f"--period {escape_markup(period)}: use a UTC day (2026-03-09) or month (2026-03)")
    assert since is not None
    span = timedelta(seconds=parse_positive(since, "--since"))
    if until == "latest":
        end = (latest or datetime.now(UTC)) + timedelta(seconds=1)
    elif until == "now":
        end = datetime.now(UTC)
    else:
        end = parse_time(until) or datetime.now(UTC)
    return end - span, end


def stored_cmd(state: Path, config: Path | None, groupings: list[str], output: ShowbackOutput, *, since: str | None,
               period: str | None, until: str) -> None:
    """`showback --since/--period`: the stored allocation ledger of the period, grouped by team or namespace."""
    from gpuwaste.bootstrap import summary as bootstrap
    from gpuwaste.models.spend import spend_of
    from gpuwaste.services.showback.stored import STORED_GROUPINGS, stored_document, stored_showback

    for b in groupings:
        if b not in STORED_GROUPINGS:
            fail(f"--by {escape_markup(b)}: the stored history keeps team and namespace; scan a window "
                 "(--recording / --prometheus) for the other groupings")
    cfg = config_or_exit(config)
    check_state_path(state)
    if until not in ("latest", "now"):
        parse_time(until)  # a malformed time fails here, before the store is opened
    try:
        service = bootstrap.local_summary_service(cfg, state)
        start, end = stored_period(since, period, until, service.last_activity() if until == "latest" else None)
        spend = spend_of(service.store.allocation(since=start, until=end))
        # a record last active before the period may still have wasted in it: read a month more
        records = service.store.history(since=start - timedelta(days=31), until=end)
    except GpuWasteError as exc:
        fail(escape_markup(str(exc)), code=3)
    views = {b: stored_showback(spend, records, since=start, until=end, by=b, team_of=service.team_of)
             for b in groupings}
    if output is ShowbackOutput.json:
        sys.stdout.write(json.dumps(stored_document(spend, views, since=start, until=end), indent=2) + "\n")
        return
    if output is ShowbackOutput.csv:
        sys.stdout.write(rows_csv([{"by": b, "period_start": start.isoformat(), "period_end": end.isoformat(), **r}
                                   for b, rows in views.items() for r in rows]))
        return
    _stored_tables(views, spend, start, end)


def _stored_tables(views: dict[str, list[dict[str, object]]], spend: Any, start: datetime, end: datetime) -> None:
    from rich.table import Table
    from rich.text import Text

    from gpuwaste.sinks.summary_spend import funnel_text

    if spend.empty:
        err.print(f"no allocation ledger stored for {start:%Y-%m-%d %H:%M} – {end:%Y-%m-%d %H:%M} UTC "
                  "(`gpuwaste run` records one per scan)", markup=False)
    for b, rows in views.items():
        t = Table(title=f"showback by {b} · {start:%Y-%m-%d %H:%M} – {end:%Y-%m-%d %H:%M} UTC · from the store",
                  title_justify="left")
        for col in ("group", "allocated GPU-h", "allocated", "effective GPU-h", "efficiency", "wasted"):
            t.add_column(col, justify="left" if col == "group" else "right", overflow="fold")
        for r in rows:
            eff = r["efficiency"]
            t.add_row(Text(for_terminal(str(r["group"]))), f"{r['allocated_gpu_hours']:,.2f}",
                      f"${r['allocated_usd']:,.2f}", f"{r['effective_gpu_hours']:,.2f}",
                      "" if eff is None else f"{eff:.0%}", f"${r['wasted_usd']:,.2f}")
        t.add_row("total", "", f"${spend.cents / 100:,.2f}", "", "", "", style="bold")
        out.print(t)
    out.print(f"[dim]fleet funnel: {escape_markup(funnel_text(spend.fleet))} · {spend.scans} scans, "
              f"{spend.observed_hours:,.1f} of {spend.hours} cluster-hours observed[/]", soft_wrap=True)


def focus_csv(rows: list[dict[str, object]], columns: tuple[str, ...]) -> str:
    """FOCUS rows as CSV (`services.focus.focus_csv`)."""
    from gpuwaste.services import focus

    return focus.focus_csv(rows, columns)


@app.command("export")
def export_cmd(
    recording: RecordingOpt = None,
    prometheus: PrometheusOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    config: ConfigOpt = None,
    cluster: ClusterOpt = None,
    at: AtOpt = None,
    window: Annotated[str | None, typer.Option("--window", "-w", help="Length of the period, e.g. 24h, 7d.")] = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", "-o", help="File to write (default: CSV on stdout).")
    ] = None,
    fmt: Annotated[
        ExportFormat,
        typer.Option("--format", help="csv, or parquet (needs --out and the extra: pip install 'gpuwaste[parquet]')."),
    ] = ExportFormat.csv,
    account: Annotated[
        str, typer.Option("--account", help="BillingAccountId / BillingAccountName of the rows (default: the cluster).")
    ] = "",
    bill: Annotated[
        Path | None,
        typer.Option(
            "--bill",
            help="Price from your bill: an AWS CUR 2.0 or FOCUS export, CSV or .csv.gz (effective cost per "
            "instance-hour: savings plans, "
            "reservations, spot); list prices for the rest.",
        ),
    ] = None,
) -> None:
    """Export FOCUS rows (FinOps Open Cost and Usage Specification).

    The GPU cost of each workload per UTC day, with the unsold slices and unallocated GPUs as rows of their own and
    gpuwaste's x_ columns (waste kind, wasted GPU-hours, wasted cost, efficiency). docs/showback.md lists the columns
    and their sources.
    """
    from gpuwaste.services.focus import COLUMNS, DECIMAL_COLUMNS, TIME_COLUMNS, focus_rows, split_unpriced

    if fmt is ExportFormat.parquet:
        from gpuwaste.sinks import focus_parquet

        if out_file is None:
            fail("--format parquet writes a file: pass --out FILE.parquet")
        try:
            focus_parquet.focus_parquet([], COLUMNS, decimals=DECIMAL_COLUMNS, timestamps=TIME_COLUMNS)
        except GpuWasteError as exc:  # the extra is missing: say so before scanning
            fail(escape_markup(str(exc)))
    report, cfg = scan_window(recording, prometheus, config, cluster, at, window, kubeconfig, context,
                              read_bill_or_exit(bill))
    if report.showback is None:
        fail("the scan produced no ledger")
    priced, unpriced = split_unpriced(focus_rows(report.showback, report.findings, cfg.delivery, account=account))
    rows = [r.values for r in priced]
    if unpriced:
        hours = sum(float(str(r.values["x_GpuHours"])) for r in unpriced)
        nodes = sorted({str(r.values["x_Node"]) for r in unpriced})
        err.print(
            f"{len(unpriced)} rows of unpriced GPUs ({hours:.2f} GPU-h on {', '.join(nodes[:5])}) left out: "
            "FOCUS costs are never null and gpuwaste never writes an unknown price as $0; "
            "add the instance type to pricing.rate_card",
            markup=False,
        )
    if fmt is ExportFormat.parquet:
        assert out_file is not None
        data = focus_parquet.focus_parquet(rows, COLUMNS, decimals=DECIMAL_COLUMNS, timestamps=TIME_COLUMNS)
        out_file.write_bytes(data)
        err.print(f"wrote {len(rows)} FOCUS rows to {out_file} (Parquet)", markup=False)
        return
    text = focus_csv(rows, COLUMNS)
    if out_file is None:
        sys.stdout.write(text)
        return
    out_file.write_text(text, encoding="utf-8")
    err.print(f"wrote {len(rows)} FOCUS rows to {out_file}", markup=False)
