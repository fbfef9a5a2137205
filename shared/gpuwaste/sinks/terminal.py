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
        return f"{_num(f.evidence[0].avg)} GPUs, {_num(f.evidence[1].avg)} requested"
    return f"{e.signal} avg {e.avg}"


def findings_table(findings: Sequence[Finding], *, title: str = "GPU waste findings") -> Table:
    """A rich table: owner, workload, GPUs, kind, evidence, USD/day, with a total row."""
    table = Table(title=title, show_lines=False, header_style="bold")
    for col, kw in (
        ("owner", {}), ("workload", {"overflow": "fold"}), ("node", {"overflow": "fold"}), ("wasted GPUs", {"justify": "right"}),
        ("kind", {}), ("evidence", {"overflow": "fold"}), ("conf.", {}), ("USD/day", {"justify": "right"}),
    ):
        table.add_column(col, **kw)  # type: ignore[arg-type]
    total = Decimal(0)
    unpriced = 0
    for f in findings:
        if f.kind is WasteKind.DATA_QUALITY:
            continue
        usd = f.usd_per_day
        if usd is not None:
            total += usd
        elif f.kind.is_waste:
            unpriced += 1
        kind = f.kind.value + (f" ({f.idle_mode.value})" if f.idle_mode else "")
        table.add_row(owner_of(f), workload_of(f), f.subject.node or "-", _share(f.wasted_gpu_share), kind, evidence_text(f),
                      f.confidence.value, _usd(usd))
    note = f" (+{unpriced} unpriced)" if unpriced else ""
    table.add_section()
    table.add_row("total", "", "", "", "", "", "", f"{_usd(total)}{note}")
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


CSV_COLUMNS = ("kind", "idle_mode", "cluster", "namespace", "workload_kind", "workload", "pod", "node", "gpus", "gpu_model",
               "instance_type", "confidence", "signal", "avg", "p95", "max", "coverage", "usd_per_gpu_hour", "usd_per_day",
               "formula", "fingerprint", "title")


def to_csv(findings: Sequence[Finding]) -> str:
    """Findings as CSV, one row per finding."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_COLUMNS)
    for f in findings:
        s = f.subject
        e = f.evidence[0] if f.evidence else None
        c = f.cost
        w.writerow([
            f.kind.value, f.idle_mode.value if f.idle_mode else "", s.cluster, s.namespace or "", s.workload_kind or "",
            s.workload_name or "", s.pod or "", s.node or "", str(f.wasted_gpu_share), s.gpu_model or "", s.instance_type or "",
            f.confidence.value, e.signal if e else "", "" if e is None or e.avg is None else e.avg,
            "" if e is None or e.p95 is None else e.p95, "" if e is None or e.max is None else e.max, "" if e is None else e.coverage,
            "" if c is None or c.usd_per_gpu_hour is None else str(c.usd_per_gpu_hour),
            "" if c is None or c.usd_per_day is None else str(c.usd_per_day), "" if c is None else c.formula, f.fingerprint, f.title,
        ])
    return buf.getvalue()


def print_findings(console: Console, findings: Sequence[Finding]) -> None:
    """Print the waste table and the data-quality table."""
    console.print(findings_table(findings))
    dq = data_quality_table(findings)
    if dq is not None:
        console.print(dq)
