"""Adapter: findings → terminal tables (rich), JSON and CSV for machines.

A scan prints, top to bottom: one header line, data-quality problems, the findings (one line each, an 80-column
terminal included), the rollup per team (or namespace, or kind) and, last, the total. Every name from the
cluster goes through `people.plain` (no control characters) and is drawn as `rich.text.Text` (never parsed as
markup), so a hostile pod name cannot colour, move or hide anything.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuwaste.models.findings import Finding, WasteKind
from gpuwaste.models.text import for_csv_cell, for_json
from gpuwaste.people import (
    DAYS_PER_MONTH,
    NO_OWNER,
    counted_usd_per_day,
    elide,
    kind_label,
    percent,
    plain,
    short_node,
    signal_name,
    usd_whole,
    wasted_gpu_hours,
)
from gpuwaste.people import gpus as gpus_text
from gpuwaste.people import hours as hours_text
from gpuwaste.people import usd as usd_text

CENT = Decimal("0.01")


def _usd(v: Decimal | None) -> str:
    return usd_text(v)


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
    """The main evidence in one short line, signals by their names and ratios as percent ("SM activity avg 0.2 %
    p95 1 % cov 100 %")."""
    if not f.evidence:
        check = f.details.get("check")
        return check.replace("_", " ") if isinstance(check, str) else ""
    e = f.evidence[0]
    short = signal_name(e.signal)
    if e.unit == "ratio":
        m10 = f" max10m {percent(e.max_avg_10m)}" if e.max_avg_10m is not None else ""
        return f"{short} avg {percent(e.avg or 0)} p95 {percent(e.p95 or 0)}{m10} cov {percent(e.coverage)}"
    if e.unit == "count" and len(f.evidence) > 1:
        n = f.evidence[0].avg
        return f"{_num(n)} GPU{'' if n == 1 else 's'}, {_num(f.evidence[1].avg)} requested"
    unit = {"percent": " %", "MiB": " MiB", "W": " W"}.get(e.unit, f" {e.unit}" if e.unit not in ("", "count") else "")
    return f"{short} avg {_num(e.avg)}{unit}"


#: Characters of a finding's fingerprint shown as its ID (more when two findings of the scan share them).
SHORT_ID = 6
#: USD/day from which a finding's amount is shown in red (high) or yellow (medium).
SEVERITY_USD = ((Decimal(100), "bold red"), (Decimal(20), "yellow"))
#: The rollup's name for node-level findings nobody owns (free GPUs, node-wide problems): the words Slack and the
#: daily summary use for a group without a team.
NODE_OWNER = NO_OWNER
#: Least width of the elided text columns (owner, workload).
MIN_TEXT = {"owner": 6, "workload": 10, "node": 8, "evidence": 20}


def short_ids(findings: Sequence[Finding], least: int = SHORT_ID) -> dict[str, str]:
    """fingerprint → the shortest prefix (≥ `least` hex characters) that no other finding of the scan shares.

    `gpuwaste explain ID` accepts any unique prefix, so the ID shown is enough to find the finding again.
    """
    prints = sorted({f.fingerprint for f in findings})
    out: dict[str, str] = {}
    for n, fp in enumerate(prints):
        size = least
        for other in (prints[n - 1] if n else "", prints[n + 1] if n + 1 < len(prints) else ""):
            common = next((i for i, (a, b) in enumerate(zip(fp, other, strict=False)) if a != b), min(len(fp), len(other)))
            size = max(size, common + 1)
        out[fp] = fp[:size]
    return out


def severity_style(usd_per_day: Decimal | None) -> str:
    """Rich style of an amount: red from $100/day, yellow from $20/day, magenta when unpriced (NO_COLOR: none)."""
    if usd_per_day is None:
        return "magenta"
    for floor, style in SEVERITY_USD:
        if usd_per_day >= floor:
            return style
    return ""


def fit_widths(columns: dict[str, list[str]], room: int, least: dict[str, int] | None = None) -> dict[str, int]:
    """Widths of single-line text columns sharing `room` characters: each column gets its longest cell when all
    fit; otherwise the widest column gives way first, down to its least width (`least`, default 6), so short
    names (kinds, owners) stay whole and long ones (workloads, evidence) are elided in the middle.
    """
    want = {c: max([len(c), *(len(t) for t in texts)]) for c, texts in columns.items()}
    floor = {c: min(want[c], max(len(c), (least or {}).get(c, 6))) for c in columns}
    cut = dict(want)
    while sum(cut.values()) > room:
        shrinkable = [c for c in cut if cut[c] > floor[c]]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda c: cut[c])
        cut[widest] -= 1
    return cut


_URL_TOKEN = re.compile(r"^\(?(https?://[^\s()]+)\)?[.,;:]?$")
#: Separators a long line is broken at, from the loosest to the tightest (never inside a word).
BREAKS = (" · ", "; ", ", ", " ")


def fit_line(text: str, width: int | None, *, indent: str = "", first: str = "",
             breaks: Sequence[str] = BREAKS) -> list[str]:
    """`first` + `text` as lines of at most `width` characters (continuation lines start with `indent`), broken only
    at the loosest separator that suffices (` · ` parts, then `; `, `, ` items, then spaces; `breaks`) and never
    inside a word; the separator stays at the end of the line ("… ·"). A URL too long for the line gets a line of
    its own, whole (without parentheses around it), even when wider than `width`: a terminal wraps it itself, and
    it stays clickable."""
    if width is None or width <= 0:
        return [first + text]
    lines: list[str] = []

    def fits(candidate: str) -> bool:
        return len(candidate) <= width - len(first if not lines else indent)

    def pack(part: str, levels: Sequence[str], current: str) -> str:
        """Add `part` after the unfinished line `current`; return the new unfinished line."""
        joined = f"{current} {part}" if current else part
        if fits(joined):
            return joined
        if current and fits(part):
            lines.append(current)
            return part
        if not levels:  # one word that does not fit: whole, on a line of its own
            if current:
                lines.append(current)
            url = _URL_TOKEN.match(part)
            if url:
                lines.append(url.group(1))
                return ""
            return part
        sep, mark = levels[0], levels[0].rstrip()
        pieces = part.split(sep)
        for i, piece in enumerate(pieces):
            current = pack(piece + (mark if i < len(pieces) - 1 else ""), levels[1:], current)
        return current

    last = pack(text, breaks, "")
    if last:
        lines.append(last)
    out = []
    for n, line in enumerate(lines or [""]):
        lead = first if n == 0 else indent
        out.append(line if _URL_TOKEN.match(line) and len(lead) + len(line) > width else lead + line)
    return out


#: Breaks of prose (a sentence, a hint): spaces only.
PROSE = (" ",)


def print_fitted(console: Console, text: str, *, indent: str = "", first: str = "", style: str = "",
                 breaks: Sequence[str] = BREAKS) -> None:
    """Print `first` + `text` fitted to the console (`fit_line`): every line whole, never re-folded by rich."""
    for line in fit_line(text, console.width, indent=indent, first=first, breaks=breaks):
        console.print(Text(line, style=style), soft_wrap=True)


def table_overhead(columns: int) -> int:
    """Characters a findings table spends beside its cells (SIMPLE_HEAD box, no outer edge: 3 per gap)."""
    return 3 * (columns - 1)


@dataclass(frozen=True)
class Row:
    """One finding as the table shows it (every cell plain text: control characters removed)."""

    finding: Finding
    id: str
    owner: str
    workload: str
    node: str
    kind: str
    gpus: str
    usd: str
    evidence: str
    confidence: str


def _rows(findings: Sequence[Finding], ids: dict[str, str], owner: Callable[[Finding], str], *,
          long_names: bool) -> tuple[list[Row], set[str]]:
    removed: set[str] = set()
    rows = []
    for f in findings:
        s = f.subject
        node = s.node or "-"
        short, suffix = short_node(node)
        if suffix:
            removed.add(suffix)
        if s.workload_kind and s.workload_kind != "Node" and s.workload_name:
            work = f"{s.workload_kind}/{s.workload_name}" if long_names else s.workload_name
        else:
            work = f"node {short}" if s.node else (s.pod or "-")
        who = owner(f)
        kind = kind_label(f.kind)
        caveat = " *" if f.cost is not None and f.cost.priced and f.cost.warnings else ""
        usd = "(shared)" if f.money_owner else usd_text(counted_usd_per_day(f)) if f.kind.is_waste else "not waste"
        rows.append(Row(f, ids.get(f.fingerprint, f.fingerprint[:SHORT_ID]),
                        plain(NODE_OWNER if who.startswith("node ") or who == NODE_OWNER else who),
                        plain(work), plain(short), kind, gpus_text(f.wasted_gpu_share), usd + caveat,
                        plain(evidence_text(f)), f.confidence.value))
    return rows, removed


def findings_table(findings: Sequence[Finding], *, title: str | None = "GPU waste findings", width: int | None = None,
                   wide: bool = False, ids: dict[str, str] | None = None,
                   owner: Callable[[Finding], str] | None = None) -> Table:
    """The findings, one line each: ID, owner, workload, kind, wasted GPUs, USD/day (+ node, evidence and
    confidence when they fit, or with `wide`).

    No cell ever wraps: names are shortened in the middle (`llama-70b-…-vllm`), node names lose their cloud
    DNS suffix (the caption says so), and the optional columns are left out when they do not fit `width`
    (the caption says `--wide` shows them). With `wide` the evidence wraps at spaces instead.
    """
    waste = [f for f in findings if f.kind is not WasteKind.DATA_QUALITY]
    ids = ids or short_ids(waste)
    rows, removed = _rows(waste, ids, owner or owner_of, long_names=wide or (width or 10_000) >= 120)
    room = width or 10_000
    fixed = {"ID": max([2, *(len(r.id) for r in rows)]), "GPUs": max([4, *(len(r.gpus) for r in rows)]),
             "USD/day": max([7, *(len(r.usd) for r in rows)])}
    text: dict[str, list[str]] = {"owner": [r.owner for r in rows], "workload": [r.workload for r in rows],
                                  "kind": [r.kind for r in rows]}
    kind_w = max([4, *(len(k) for k in text["kind"])])
    optional: list[tuple[str, list[str]]] = [("node", [r.node for r in rows]), ("conf.", [r.confidence for r in rows]),
                                             ("evidence", [r.evidence for r in rows])]
    chosen: list[str] = []
    left_out: list[str] = []
    for name, cells in optional:
        trial = {**text, name: cells} if name != "conf." else text
        extra_fixed = 6 if name == "conf." or "conf." in chosen else 0
        cols = len(fixed) + len(text) + len(chosen) + 1
        need = sum(fixed.values()) + extra_fixed + table_overhead(cols)
        natural = sum(max([len(c), *(len(t) for t in v)]) for c, v in trial.items())
        others = sum(max([len(c), *(len(t) for t in text[c])]) for c in text)
        if wide or need + natural <= room or (name == "conf." and need + others <= room):
            chosen.append(name)
            if name != "conf.":
                text[name] = cells
        else:
            left_out.append(name)
    n_cols = len(fixed) + len(text) + (1 if "conf." in chosen else 0)
    room_text = room - sum(fixed.values()) - (6 if "conf." in chosen else 0) - table_overhead(n_cols)
    least = {**MIN_TEXT, "kind": kind_w}
    if wide and "evidence" in text:  # --wide: the evidence wraps at spaces, so it can give way to the names
        least["evidence"] = min(max([8, *(len(w) for e in text["evidence"] for w in e.split())]), 24)
    widths = fit_widths(text, room_text, least)
    caption_bits = []
    if removed:
        caption_bits.append(f"node names without {', '.join(sorted(removed))}")
    if left_out:
        caption_bits.append(f"{', '.join('confidence' if c == 'conf.' else c for c in left_out)}: --wide")
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold",
                  caption=" · ".join(caption_bits) or None, caption_justify="left", title_justify="left")
    table.add_column("ID", no_wrap=True, style="cyan")
    columns = ["owner", "workload", *(["node"] if "node" in chosen else []), "kind"]
    for c in columns:
        table.add_column(c, no_wrap=True, width=widths[c])
    table.add_column("GPUs", justify="right", no_wrap=True)
    if "conf." in chosen:
        table.add_column("conf.", no_wrap=True, width=6)
    if "evidence" in chosen:
        table.add_column("evidence", no_wrap=not wide, overflow="fold", width=widths["evidence"])
    table.add_column("USD/day", justify="right", no_wrap=True)
    for r in rows:
        row_cells: list[Text] = [Text(r.id)]
        for c in columns:
            value = getattr(r, c)
            row_cells.append(Text(elide(value, widths[c])))
        row_cells.append(Text(r.gpus))
        if "conf." in chosen:
            row_cells.append(Text(r.confidence))
        if "evidence" in chosen:
            row_cells.append(Text(r.evidence if wide else elide(r.evidence, widths["evidence"])))
        row_cells.append(Text(r.usd, style=severity_style(r.finding.usd_per_day)))
        table.add_row(*row_cells)
    return table


@dataclass(frozen=True)
class Group:
    """One line of the rollup: a team (or namespace, or kind) and what its findings waste."""

    name: str
    findings: int
    gpu_hours: Decimal
    usd_per_day: Decimal
    unpriced: int


def rollup(findings: Sequence[Finding], key: Callable[[Finding], str]) -> list[Group]:
    """Waste findings grouped by `key`, costliest first (money counted once: see `counted_usd_per_day`)."""
    acc: dict[str, list[Finding]] = {}
    for f in findings:
        if f.kind.is_waste:
            acc.setdefault(key(f), []).append(f)
    groups = []
    for name, fs in acc.items():
        usd = sum((counted_usd_per_day(f) or Decimal(0) for f in fs), Decimal(0))
        unpriced = sum(1 for f in fs if f.usd_per_day is None and not f.money_owner)
        groups.append(Group(name, len(fs), sum((wasted_gpu_hours(f) for f in fs), Decimal(0)), usd, unpriced))
    return sorted(groups, key=lambda g: (-g.usd_per_day, -g.gpu_hours, g.name))


def rollup_table(groups: Sequence[Group], *, by: str = "team", width: int | None = None, window_s: int | None = None) -> Table:
    """The per-owner rollup: name, findings, GPU-hours wasted in the window, USD/day, USD/month (no total row:
    the total is the line printed after it)."""
    hours_head = "GPU-h"
    span = f" (GPU-hours in the {window_s // 60}-min window)" if window_s else ""
    title = f"Waste by {by}{span}"
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold",
                  title_justify="left", min_width=min(len(title), width or 10_000))
    fixed = 8 + len(hours_head) + 11 + 12 + table_overhead(5)
    name_w = max(4, min(max([len(by), *(len(g.name) for g in groups)]), (width or 10_000) - fixed))
    table.add_column(by, no_wrap=True, width=name_w)
    table.add_column("findings", justify="right", no_wrap=True)
    table.add_column(hours_head, justify="right", no_wrap=True)
    table.add_column("USD/day", justify="right", no_wrap=True)
    table.add_column("USD/month", justify="right", no_wrap=True)
    for g in groups:
        table.add_row(Text(elide(plain(g.name), name_w)), str(g.findings), hours_text(g.gpu_hours),
                      Text(usd_text(g.usd_per_day), style=severity_style(g.usd_per_day)),
                      usd_whole(g.usd_per_day * DAYS_PER_MONTH))
    return table


def total_line(findings: Sequence[Finding], *, window_s: int | None = None) -> str:
    """The last line of a scan: what all shown waste costs, per day and per month, and what is not in it."""
    waste = [f for f in findings if f.kind.is_waste]
    usd = sum((counted_usd_per_day(f) or Decimal(0) for f in waste), Decimal(0))
    unpriced = sum(1 for f in waste if f.usd_per_day is None and not f.money_owner)
    hrs = sum((wasted_gpu_hours(f) for f in waste), Decimal(0))
    del window_s  # the rollup's GPU-h column says the window
    more = f" ({unpriced} unpriced)" if unpriced else ""  # of the findings counted, not more of them
    return (f"Total: {usd_text(usd)}/day · {usd_whole(usd * DAYS_PER_MONTH)}/month · "
            f"{len(waste)} finding{'s' if len(waste) != 1 else ''}{more} · {hours_text(hrs)} GPU-h")


def data_quality_table(findings: Sequence[Finding], *, width: int | None = None, verbose: bool = False) -> Table | None:
    """Data-quality findings (never idle) in their own table, one line each (`verbose`: with what was seen), or
    None when there are none."""
    rows = [f for f in findings if f.kind is WasteKind.DATA_QUALITY]
    if not rows:
        return None
    table = Table(title="Data quality: no verdict on these", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  header_style="bold", title_justify="left")
    checks = [str(f.details.get("check", "")).replace("_", " ") for f in rows]
    wheres = [plain(f"{f.subject.namespace}/{f.subject.pod}" if f.subject.pod else (short_node(f.subject.node or "-")[0]))
              for f in rows]
    titles = [plain(f.title) for f in rows]
    check_w = max([5, *(len(c) for c in checks)])
    where_natural = max([5, *(len(w) for w in wheres)])
    where_w = max(8, min(where_natural, (width or 10_000) - check_w - table_overhead(2)))
    what_w = 0
    if verbose:  # the text wraps at spaces; its longest word (a GPU UUID, a pod name) gets room before `where`,
        # which the text repeats anyway; a word still too long is elided in the middle, never folded
        room = (width or 10_000) - check_w - table_overhead(3)
        longest = max(len(w) for t in titles for w in [*t.split(), ""])
        where_w = max(8, min(where_natural, room - max(longest, 20)))
        what_w = max(8, room - where_w)
        titles = [" ".join(elide(w, what_w) for w in t.split(" ")) for t in titles]
    table.add_column("check", no_wrap=True)
    table.add_column("where", no_wrap=True, width=where_w)
    if verbose:
        table.add_column("what", width=what_w, overflow="ellipsis")
    for check, where, title in zip(checks, wheres, titles, strict=True):
        cells = [Text(check), Text(elide(where, where_w))]
        if verbose:
            cells.append(Text(title))
        table.add_row(*cells)
    return table


def finding_dict(f: Finding) -> dict[str, Any]:
    """A finding as plain JSON-able data (Decimals as strings)."""
    data: dict[str, Any] = json.loads(f.model_dump_json())
    return data


def to_json(findings: Sequence[Finding], *, team: Callable[[Finding], str] | None = None, **extra: Any) -> str:
    """Findings (and extra report fields) as a JSON document; with `team` each finding has its resolved "team" (the
    owner the table shows, `--team` selects and the rollup groups by)."""
    total = sum((f.usd_per_day or Decimal(0) for f in findings), Decimal(0))
    items = [finding_dict(f) | ({"team": team(f)} if team else {}) for f in findings]
    doc = {**extra, "total_usd_per_day": str(total), "findings": items}
    return json.dumps(for_json(json.loads(json.dumps(doc, default=str))), indent=2)  # text fields without controls


CSV_COLUMNS = ("kind", "idle_mode", "cluster", "namespace", "workload_kind", "workload", "pod", "node", "gpus_held",
               "wasted_gpus", "gpu_model", "instance_type", "confidence", "signal", "avg", "p95", "max", "coverage",
               "usd_per_gpu_hour", "usd_per_day", "formula", "fingerprint", "title", "team")
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


def _owner_or_nodes(f: Finding) -> str:
    owner = owner_of(f)
    return NODE_OWNER if owner.startswith("node ") else owner


def to_csv(findings: Sequence[Finding], *, team: Callable[[Finding], str] | None = None) -> str:
    """Findings as CSV, one row per finding (see CSV_COLUMNS; numbers rounded to CSV_PLACES decimals). "team" is
    `team(finding)` (the owner the table shows, `--team` selects and the rollup groups by), else the owner from
    the finding alone (`owner_of`; node capacity: NODE_OWNER)."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_COLUMNS)
    cell = for_csv_cell  # text cells: controls stripped, formulas neutralised (OWASP); numbers stay numbers
    for f in findings:
        s = f.subject
        e = f.evidence[0] if f.evidence else None
        c = f.cost
        w.writerow([
            cell(f.kind.value), cell(f.idle_mode.value if f.idle_mode else ""), cell(s.cluster), cell(s.namespace),
            cell(s.workload_kind), cell(s.workload_name), cell(s.pod), cell(s.node), csv_number(s.gpu_share),
            csv_number(f.wasted_gpu_share), cell(s.gpu_model), cell(s.instance_type), cell(f.confidence.value),
            cell(e.signal if e else ""),
            csv_number(e.avg if e else None), csv_number(e.p95 if e else None), csv_number(e.max if e else None),
            csv_number(e.coverage if e else None),
            csv_number(c.usd_per_gpu_hour if c else None), csv_number(c.usd_per_day if c else None),
            cell("" if c is None else c.formula), cell(f.fingerprint), cell(f.title),
            cell(team(f) if team else _owner_or_nodes(f)),
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
    """Print the data-quality table, the findings table and the price caveats (the scan's middle part)."""
    dq = data_quality_table(findings, width=console.width)
    if dq is not None:
        console.print(dq)
    console.print(findings_table(findings, width=console.width, wide=wide))
    for line in price_caveat_lines(findings):
        console.print(Text(line, style="yellow"))


def price_caveat_lines(findings: Sequence[Finding]) -> list[str]:
    """'* price caveat: …' lines, one per distinct warning, with how many findings it applies to."""
    where: dict[str, int] = {}
    for f in findings:
        if f.cost is None or not f.cost.priced:
            continue
        for w in f.cost.warnings:
            where[w] = where.get(w, 0) + 1
    return [f"* {plain(w)} ({n} finding{'s' if n != 1 else ''})" for w, n in where.items()]


def print_rollup(console: Console, findings: Sequence[Finding], *, key: Callable[[Finding], str], by: str = "team",
                 window_s: int | None = None) -> None:
    """Print the rollup by `by` and, as the very last line, the total."""
    groups = rollup(findings, key)
    if groups:
        console.print(rollup_table(groups, by=by, width=console.width, window_s=window_s))
    console.print(Text(total_line(findings, window_s=window_s), style="bold"))
