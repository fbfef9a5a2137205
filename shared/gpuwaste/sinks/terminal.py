"""Adapter: findings → terminal tables (rich), JSON and CSV for machines."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from rich.console import Console
from rich.table import Table

from gpuwaste.models.findings import Finding, WasteKind

CENT = Decimal("0.01")


def _usd(v: Decimal | None) -> str:
    return "unpriced" if v is None else f"${v.quantize(CENT):,}"


def _share(v: Decimal) -> str:
    return f"{v.normalize():f}" if v == v.to_integral() else f"{v:.2f}"


def owner_of(f: Finding) -> str:
    """Who a finding belongs to, for tables: team annotation/label, else namespace, else node."""
    s = f.subject
    for key in ("gpuwaste.io/team", "team"):
        for source in (s.annotations, s.labels, s.namespace_annotations, s.namespace_labels):
            if key in source:
                return source[key]
    return s.namespace or (f"node {s.node}" if s.node else "-")


def workload_of(f: Finding) -> str:
    """The workload column: Kind/name (pod), or the node."""
    s = f.subject
    if s.workload_kind and s.workload_kind != "Node" and s.workload_name:
        pod = f" ({s.pod})" if s.pod and s.pod != s.workload_name else ""
        return f"{s.workload_kind}/{s.workload_name}{pod}"
    return f"Node/{s.node}" if s.node else (s.pod or "-")


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:g}" if float(v).is_integer() else f"{v:.2f}"


def evidence_text(f: Finding) -> str:
    """The main evidence in one short line."""
    if not f.evidence:
        return f.details.get("check", "") if isinstance(f.details.get("check"), str) else ""  # type: ignore[return-value]
    e = f.evidence[0]
    if e.unit == "ratio":
        short = e.signal.replace("DCGM_FI_PROF_", "").replace("DCGM_FI_DEV_", "")
        m10 = f" max10m {e.max_avg_10m:.1%}" if e.max_avg_10m is not None else ""
        return f"{short} avg {e.avg or 0:.1%} p95 {e.p95 or 0:.1%}{m10} cov {e.coverage:.0%}"
    if e.unit == "count" and len(f.evidence) > 1:
        n = f.evidence[0].avg
        return f"{_num(n)} GPU{'' if n == 1 else 's'}, {_num(f.evidence[1].avg)} requested"
    return f"{e.signal} avg {e.avg}"


#: Terminals narrower than this drop the evidence and confidence columns (unless `wide`).
NARROW_COLUMNS = 120
#: Cloud DNS suffixes left out of node names in tables (the caption says which).
NODE_SUFFIXES = (".ec2.internal", ".compute.internal")


def short_node(name: str) -> tuple[str, str]:
    """(name without a cloud DNS suffix, the suffix removed or "")."""
    for suffix in NODE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name.removesuffix(suffix), suffix
    return name, ""


def fit_widths(columns: dict[str, list[str]], room: int) -> dict[str, int]:
    """Widths of text columns sharing `room` characters: each gets at least its longest word (so text wraps at
    spaces, never mid-word) and the rest goes where the text is longest; when even the longest words do not fit,
    every column shrinks in proportion (then words break: unavoidable).
    """
    want = {c: max([len(c), *(len(t) for t in texts)]) for c, texts in columns.items()}
    least = {c: min(want[c], max([4, *(len(w) for t in texts for w in t.split())])) for c, texts in columns.items()}
    if "evidence" in least and sum(least.values()) > room:  # evidence is numbers and signal names: it may break first
        least["evidence"] = max(8, least["evidence"] - (sum(least.values()) - room))
    room = max(room, 4 * len(columns))
    if sum(want.values()) <= room:
        return want
    if sum(least.values()) >= room:
        # the widest column gives way first, so short names (nodes, kinds) stay whole
        cut = dict(least)
        while sum(cut.values()) > room and max(cut.values()) > 4:
            widest = max(cut, key=lambda c: cut[c])
            cut[widest] -= 1
        return cut
    spare = room - sum(least.values())
    extra = {c: want[c] - least[c] for c in columns}
    total_extra = sum(extra.values()) or 1
    return {c: least[c] + spare * extra[c] // total_extra for c in columns}


def findings_table(findings: Sequence[Finding], *, title: str = "GPU waste findings", width: int | None = None,
                   wide: bool = False) -> Table:
    """A rich table: owner, workload, node, wasted GPUs, kind, evidence, confidence, USD/day, with a total row.

    Node names lose their cloud DNS suffix (NODE_SUFFIXES; the caption says so) and names wrap at spaces only
    where the width allows (each text column is at least as wide as its longest word, up to a cap).

    Args:
        width: the console width; below NARROW_COLUMNS the evidence and confidence columns are left out unless `wide`.
        wide: keep every column whatever the width.
    """
    narrow = width is not None and width < NARROW_COLUMNS and not wide
    rows = [f for f in findings if f.kind is not WasteKind.DATA_QUALITY]
    removed: set[str] = set()

    def shorten(text: str, node: str | None) -> str:
        if not node:
            return text
        short, suffix = short_node(node)
        if suffix and node in text:
            removed.add(suffix)
            return text.replace(node, short)
        return text

    # a node finding's owner is its node, which the node column shows
    owners = ["(node)" if owner_of(f).startswith("node ") else owner_of(f) for f in rows]
    workloads = [shorten(workload_of(f), f.subject.node) for f in rows]
    nodes = [shorten(f.subject.node or "-", f.subject.node) for f in rows]
    kinds = [f.kind.value + (f" ({f.idle_mode.value})" if f.idle_mode else "") for f in rows]
    evidence = [evidence_text(f) for f in rows]
    caption = f"node names without {', '.join(sorted(removed))}" if removed else None
    table = Table(title=title, show_lines=False, header_style="bold", caption=caption, caption_justify="left")
    usds = [_usd(f.usd_per_day) if f.kind.is_waste else "not waste" for f in rows] + [_usd(sum((f.usd_per_day or Decimal(0) for f in rows), Decimal(0)))]
    text_cols: dict[str, list[str]] = {"owner": owners, "workload": workloads, "node": nodes, "kind": kinds}
    if not narrow:
        text_cols["evidence"] = evidence
    fixed = {"wasted GPUs": 6, "conf.": 6 if not narrow else 0, "USD/day": max(7, *(len(u) for u in usds))}
    widths = fit_widths(text_cols, (width or 10_000) - 3 * (len(text_cols) + 3 - narrow) - 1 - sum(fixed.values()))
    table.add_column("owner", overflow="fold", width=widths["owner"])
    table.add_column("workload", overflow="fold", width=widths["workload"])
    table.add_column("node", overflow="fold", width=widths["node"])
    table.add_column("wasted GPUs", justify="right", width=fixed["wasted GPUs"])
    table.add_column("kind", overflow="fold", width=widths["kind"])
    if not narrow:
        table.add_column("evidence", overflow="fold", width=widths["evidence"])
        table.add_column("conf.", width=fixed["conf."])
    table.add_column("USD/day", justify="right", width=fixed["USD/day"])
    total = Decimal(0)
    unpriced = 0
    for f, owner, workload, node, kind, ev in zip(rows, owners, workloads, nodes, kinds, evidence, strict=True):
        usd = f.usd_per_day
        if usd is not None:
            total += usd
        elif f.kind.is_waste:
            unpriced += 1
        cells = [owner, workload, node, _share(f.wasted_gpu_share), kind]
        if not narrow:
            cells += [ev, f.confidence.value]
        caveat = " *" if f.cost is not None and f.cost.priced and f.cost.warnings else ""
        table.add_row(*cells, (_usd(usd) if f.kind.is_waste else "not waste") + caveat)
    note = f"+{unpriced} unpriced, not in the total" if unpriced else ""
    table.add_section()
    table.add_row("total", note, *[""] * (len(table.columns) - 3), _usd(total))
    return table


def data_quality_table(findings: Sequence[Finding]) -> Table | None:
    """Data-quality findings (never idle) in their own table, or None when there are none."""
    rows = [f for f in findings if f.kind is WasteKind.DATA_QUALITY]
    if not rows:
        return None
    table = Table(title="Data quality (no verdict on these)", header_style="bold")
    table.add_column("check")
    table.add_column("where", overflow="fold")
    table.add_column("what", overflow="fold")
    for f in rows:
        where = f"{f.subject.namespace}/{f.subject.pod}" if f.subject.pod else (f.subject.node or "-")
        table.add_row(str(f.details.get("check", "")), where, f.title)
    return table


def finding_dict(f: Finding) -> dict[str, Any]:
    """A finding as plain JSON-able data (Decimals as strings)."""
    return json.loads(f.model_dump_json())


def to_json(findings: Sequence[Finding], **extra: Any) -> str:
    """Findings (and extra report fields) as a JSON document."""
    total = sum((f.usd_per_day or Decimal(0) for f in findings), Decimal(0))
    doc = {**extra, "total_usd_per_day": str(total), "findings": [finding_dict(f) for f in findings]}
    return json.dumps(doc, indent=2, default=str)


CSV_COLUMNS = ("kind", "idle_mode", "cluster", "namespace", "workload_kind", "workload", "pod", "node", "gpus_held",
               "wasted_gpus", "gpu_model", "instance_type", "confidence", "signal", "avg", "p95", "max", "coverage",
               "usd_per_gpu_hour", "usd_per_day", "formula", "fingerprint", "title")
#: Decimal places kept in CSV numbers (JSON keeps the exact decimal strings).
CSV_PLACES = 6


def csv_number(v: Decimal | float | int | None) -> str:
    """A number for CSV: at most CSV_PLACES decimals, no exponent, no trailing zeros; "" for None."""
    if v is None:
        return ""
    d = v if isinstance(v, Decimal) else Decimal(repr(float(v))) if isinstance(v, float) else Decimal(v)
    if not d.is_finite():
        return str(d)
    text = f"{round(d, CSV_PLACES):f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def to_csv(findings: Sequence[Finding]) -> str:
    """Findings as CSV, one row per finding (see CSV_COLUMNS; numbers rounded to CSV_PLACES decimals)."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_COLUMNS)
    for f in findings:
        s = f.subject
        e = f.evidence[0] if f.evidence else None
        c = f.cost
        w.writerow([
            f.kind.value, f.idle_mode.value if f.idle_mode else "", s.cluster, s.namespace or "", s.workload_kind or "",
            s.workload_name or "", s.pod or "", s.node or "", csv_number(s.gpu_share), csv_number(f.wasted_gpu_share),
            s.gpu_model or "", s.instance_type or "", f.confidence.value, e.signal if e else "",
            csv_number(e.avg if e else None), csv_number(e.p95 if e else None), csv_number(e.max if e else None),
            csv_number(e.coverage if e else None),
            csv_number(c.usd_per_gpu_hour if c else None), csv_number(c.usd_per_day if c else None),
            "" if c is None else c.formula, f.fingerprint, f.title,
        ])
    return buf.getvalue()


def price_caveats(findings: Sequence[Finding]) -> list[str]:
    """One line per distinct pricing warning (spot priced at on-demand, GPU count disagreeing…), with where it applies."""
    where: dict[str, list[str]] = {}
    for f in findings:
        if f.cost is None or not f.cost.priced:
            continue
        for w in f.cost.warnings:
            where.setdefault(w, []).append(workload_of(f))
    return [f"{w} — {', '.join(sorted(set(ws)))}" for w, ws in where.items()]


def print_findings(console: Console, findings: Sequence[Finding], *, wide: bool = False) -> None:
    """Print the waste table and the data-quality table (narrow consoles drop evidence and confidence unless `wide`)."""
    console.print(findings_table(findings, width=console.width, wide=wide))
    caveats = price_caveats(findings)
    if caveats:
        console.print("* price caveats:", style="yellow", highlight=False)
        for line in caveats:
            console.print(f"  {line}", style="yellow", highlight=False)
    dq = data_quality_table(findings)
    if dq is not None:
        console.print(dq)
