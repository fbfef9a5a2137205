"""Adapter (pure): numbers, dates and names as people read them, one format across every surface.

Terminal tables, Jira tickets, the summary report (terminal, Markdown, HTML) and the Slack summary header use
these helpers, so a date or an amount reads the same wherever it appears. Exact values stay in JSON.

- money: `$1,234.57` (cents), `$2.74/GPU-h` (price per GPU-hour), `$84.20/day`, `$2,526/month` (whole dollars);
- dates: `2026-11-28 10:00 UTC` (`when`), `2026-11-28` (`day`);
- ratios (0–1) shown as percent (`4 %`): one unit for people, whatever the detector stores;
- names from the cluster: `plain` drops control characters (a pod name cannot move the cursor or ring a
  bell) and `elide` shortens a name in the middle (`llama-70b-…-vllm`) so a table cell never wraps.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from gpuwaste.models.findings import Evidence, Finding, WasteKind
from gpuwaste.models.ledger import LedgerSpan
from gpuwaste.models.signals import Signal
from gpuwaste.models.text import strip_controls

#: Cloud DNS suffixes left out of node names in tables (the caption says which).
NODE_SUFFIXES = (".ec2.internal", ".compute.internal")
CENT = Decimal("0.01")
DOLLAR = Decimal("1")
#: Days in the "USD/month" figures people read (30; the JSON keeps USD/day exact).
DAYS_PER_MONTH = Decimal(30)
HOURS_PER_DAY = Decimal(24)



def plain(text: str) -> str:
    """`text` without escape sequences and control characters (C0/C1, bidi overrides, zero-width): safe to print in
    one cell as plain text (`models.text.strip_controls`, the product's one sanitiser)."""
    return strip_controls(text)


def elide(text: str, width: int) -> str:
    """`text` shortened to at most `width` characters by cutting its middle (`llama-70b-…-vllm`)."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    if width <= 2:
        return text[:width]
    head = (width - 1 + 1) // 2
    tail = width - 1 - head
    return text[:head] + "…" + (text[-tail:] if tail else "")


def usd(value: Decimal | None) -> str:
    """USD with cents and thousands separators ("$1,234.50"); "unpriced" for None."""
    if value is None:
        return "unpriced"
    return f"${value.quantize(CENT, rounding=ROUND_HALF_UP):,}"


def usd_whole(value: Decimal | None) -> str:
    """USD rounded to whole dollars ("$2,526") for monthly figures; cents below $10 ("$7.20")."""
    if value is None:
        return "unpriced"
    if abs(value) < 10:
        return usd(value)
    return f"${value.quantize(DOLLAR, rounding=ROUND_HALF_UP):,}"


def per_gpu_hour(value: Decimal | None) -> str:
    """A price per GPU-hour as people read it: "$2.74/GPU-h" (exact value in JSON)."""
    return "unpriced" if value is None else f"{usd(value)}/GPU-h"


def per_day(value: Decimal | None) -> str:
    """"$84.20/day"; "unpriced" for None."""
    return "unpriced" if value is None else f"{usd(value)}/day"


def per_month(usd_per_day: Decimal | None) -> str:
    """USD/day × 30 as "$2,526/month"; "unpriced" for None."""
    return "unpriced" if usd_per_day is None else f"{usd_whole(usd_per_day * DAYS_PER_MONTH)}/month"


def money(value: Decimal) -> str:
    """Money for machines that people also read (summary JSON): a decimal string rounded to the cent."""
    return f"{value.quantize(CENT, rounding=ROUND_HALF_UP)}"


def gpus(value: Decimal | float) -> str:
    """A GPU count or share with at most 2 decimals, trailing zeros dropped ("2", "0.29")."""
    d = Decimal(str(value)).quantize(CENT, rounding=ROUND_HALF_UP).normalize()
    return f"{d:f}"


def hours(value: Decimal | float) -> str:
    """GPU-hours with one decimal ("12.5")."""
    return f"{Decimal(str(value)).quantize(Decimal('0.1'), rounding=ROUND_HALF_UP):,}"


def percent(ratio: float | None) -> str:
    """A ratio 0–1 as percent for people: "4 %", "0.5 %", "96 %"; "-" for None."""
    if ratio is None:
        return "-"
    p = ratio * 100
    if p != 0 and abs(p) < 1:
        return f"{p:.1f} %"
    return f"{p:.0f} %"


def when(value: datetime) -> str:
    """A UTC time as "2026-11-28 10:00 UTC" (the one date-time format of every surface)."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def day(value: datetime) -> str:
    """A UTC date as "2026-11-28"."""
    return value.astimezone(UTC).strftime("%Y-%m-%d")


def period_date(until: datetime) -> str:
    """The date a report for a period ending at `until` (exclusive) is titled with: the period's last day."""
    return day(until - timedelta(microseconds=1))


def waste_since(first_seen: datetime, finding: Finding | None = None, ledger: Sequence[LedgerSpan] = (),
                window_s: int | None = None) -> datetime:
    """When the waste began, which every "since" / "open for" says (not when gpuwaste first reported it): the
    earliest start of the finding's episodes and of the money ledger's spans that the first report's evidence
    window covers (`first_seen − window_s` on), else `first_seen`. A finding seen over a 70-min window at its first
    scan was wasting 70 min before that scan, so "since" is 70 min before `first_seen`.

    Args:
        first_seen: when gpuwaste first reported the finding (its record's first scan; "first reported").
        finding: the latest sighting (its `episodes`, `window_s`).
        ledger: the record's money spans (`FindingRecord.ledger`); spans of earlier open periods are ignored.
        window_s: the evidence window of the first report when `finding` is not given (seconds).
    """
    window = window_s if window_s is not None else (finding.window_s if finding is not None else 0)
    floor = first_seen - timedelta(seconds=max(0, window))
    starts = [e.start for e in finding.episodes] if finding is not None else []
    starts += [span.start for span in ledger if span.end >= floor]
    return min([first_seen, *(max(t, floor) for t in starts)])


def since_words(first_seen: datetime, finding: Finding, scan: datetime) -> str:
    """"Since" as people read it, every surface alike: "2024-01-01 00:10 UTC (1h 10m before the scan)", with
    "first reported …" when gpuwaste reported it later than the waste began; for a finding without waste episodes
    (a sizing note) "first reported at this scan (2024-01-01 01:20 UTC), on 70 min of evidence"."""
    start = waste_since(first_seen, finding)
    if not finding.episodes and start == scan:
        return f"first reported at this scan ({when(scan)}), on {duration(finding.window_s)} of evidence"
    text = f"{when(start)} ({age(start, scan)} before the scan)"
    if first_seen != start and first_seen < scan:
        text += f"; first reported {when(first_seen)}"
    return text


def age(since: datetime, now: datetime) -> str:
    """How long ago, from the scan's time (not the wall clock): "3d 4h", "5h 10m", "35m"."""
    seconds = max(0, int((now - since).total_seconds()))
    days, rest = divmod(seconds, 86400)
    hrs, rest = divmod(rest, 3600)
    if days:
        return f"{days}d {hrs}h"
    if hrs:
        return f"{hrs}h {rest // 60}m"
    return f"{rest // 60}m"


#: A group of findings without a team (free node capacity, pods nobody labelled), as people read it: the scan's
#: rollup, the daily summary and Slack say the same words (JSON keeps its own value, "unassigned").
NO_OWNER = "no owner"
#: The team value the daily summary's JSON gives a group without a team.
UNASSIGNED = "unassigned"


#: The namespace of a node-level finding (free capacity: no namespace), in every table that has a namespace column.
NO_NAMESPACE = "(node)"


def namespace_label(namespace: str | None) -> str:
    """A finding's namespace as people read it: NO_NAMESPACE for a node-level finding, on every surface."""
    return namespace or NO_NAMESPACE


def trend_words(current: Decimal, previous: Decimal, *, new: bool | None = None) -> str:
    """The change against the period before, for every surface: "+$12.00 (+25%)", "-$3.00 (-50%)"; "new" when
    nothing of it was seen then (`new`; default: it cost nothing then), "+$1.00" / "±0" when it was seen at $0."""
    if previous == 0:
        if new if new is not None else bool(current):
            return "new"
        return f"+{usd(current)}" if current else "±0"
    delta = current - previous
    return f"{'+' if delta >= 0 else '-'}{usd(abs(delta))} ({delta / previous:+.0%})"


def versus_words(current: Decimal, previous: Decimal) -> str:
    """A period's waste against the period before, in words: "nothing wasted the period before", or
    "-$3.00 (-50%) vs $6.00 the period before" (never "new vs $0.00")."""
    if previous == 0:
        return "nothing wasted the period before"
    return f"{trend_words(current, previous)} vs {usd(previous)} the period before"


def group_label(dimension: str, name: str) -> str:
    """A rollup group's name as people read it: kinds by their label, a team-less group as NO_OWNER."""
    if dimension == "kind":
        return kind_label(name)
    if dimension == "team" and name in (UNASSIGNED, NO_OWNER):
        return NO_OWNER
    return name


#: Kind names for people (short enough for an 80-column table).
KIND_LABELS: dict[WasteKind, str] = {
    WasteKind.IDLE: "idle",
    WasteKind.UNDERUSED: "under-used",
    WasteKind.UNALLOCATED: "unallocated",
    WasteKind.DATA_QUALITY: "data quality",
    WasteKind.POWER_ANOMALY: "power",
    WasteKind.LOW_MEMORY_BANDWIDTH: "bandwidth",
    WasteKind.STALLED: "stalled",
    WasteKind.WRONG_HARDWARE: "wrong hw",
    WasteKind.CPU_BOUND: "CPU-bound",
    WasteKind.KV_CACHE_PRESSURE: "KV cache",
    WasteKind.INFERENCE_IDLE: "serving idle",
    WasteKind.ORPHANED: "orphaned",
    WasteKind.UNREQUESTED_USE: "unrequested use",
}


#: Idle modes as people say them (the JSON keeps the values: batch_idle, inference_idle, ...).
IDLE_MODE_LABELS: dict[str, str] = {"batch_idle": "batch job between steps", "inference_idle": "inference server without traffic",
                                    "provisioning_idle": "not started yet", "idle_held": "held while unused"}


#: Data-quality problems (a data-quality finding's `check`, the `problem` label of gpuwaste_data_quality_problems) as
#: people read them; the JSON and the metrics keep the values.
PROBLEM_LABELS: dict[str, str] = {
    "no_telemetry": "no telemetry",
    "stale_series": "stale series",
    "frozen_exporter": "frozen exporter",
    "partial_coverage": "telemetry with gaps",
    "unmonitored_gpus": "GPUs not monitored",
    "no_activity_signal": "no activity signal",
    "lost_device": "GPU lost",
    "unreadable_samples": "unreadable samples",
    "allocated_without_telemetry": "allocated, no telemetry",
    "attribution_missing": "no pod attribution",
    "unknown_gpu_resource": "unknown GPU resource",
    "profiling_counter_broken": "profiling counter broken",
    "activity_signals_disagree": "activity signals disagree",
    "unknown": "unknown problem",
}


def problem_label(problem: str) -> str:
    """A data-quality problem as people read it ("frozen exporter"); an unknown one with spaces for underscores."""
    return PROBLEM_LABELS.get(problem, problem.replace("_", " "))


def idle_mode_label(mode: str) -> str:
    """An idle mode as people read it ("inference server without traffic")."""
    return IDLE_MODE_LABELS.get(mode, mode.replace("_", " "))


def kind_label(kind: WasteKind | str) -> str:
    """A kind as people read it ("idle", "wrong hw", "KV cache")."""
    try:
        return KIND_LABELS[WasteKind(kind)]
    except ValueError:
        return str(kind).replace("_", " ")


def parse_kind(text: str) -> WasteKind | None:
    """A kind from its value (`idle_allocation`), its label (`idle`, `wrong hw`) or a dashed form; None if unknown."""
    t = text.strip().lower().replace("-", "_").replace(" ", "_")
    for kind in WasteKind:
        label = KIND_LABELS.get(kind, kind.value)
        if t in (kind.value, label.lower().replace("-", "_").replace(" ", "_")):
            return kind
    return None


def kind_names() -> list[str]:
    """The short names `--kind` accepts, as people type them ("idle", "wrong-hw", "kv-cache"): each label in lower
    case with dashes for spaces (`parse_kind` also accepts the JSON values)."""
    return [KIND_LABELS[k].lower().replace(" ", "-") if k in KIND_LABELS else k.value.replace("_", "-") for k in WasteKind]


def people_formula(finding: Finding) -> str:
    """The cost formula with rounded numbers that multiply out: "$2.7447/GPU-h × 2 GPUs × 24 h = $131.75/day".

    The price keeps up to 4 decimals (as the pricing formula does): "$2.74" × 2 × 24 would be $131.52, not $131.75.
    """
    c = finding.cost
    if c is None or not c.priced or c.usd_per_gpu_hour is None:
        return "unpriced (no price for this instance type or GPU)"
    share = c.wasted_gpu_share
    unit = "GPU" if share == 1 else "GPUs"
    price = c.usd_per_gpu_hour.quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP).normalize()
    return f"${price:f}/GPU-h × {gpus(share)} {unit} × 24 h = {per_day(c.usd_per_day)}"


def wasted_gpu_hours(finding: Finding) -> Decimal:
    """GPU-hours wasted in the scan window: the finding's own figure, else share × observed (or window) hours."""
    if finding.wasted_gpu_hours:
        return finding.wasted_gpu_hours
    seconds = finding.observed_s or finding.window_s
    return finding.wasted_gpu_share * Decimal(seconds) / Decimal(3600)


def counted_usd_per_day(finding: Finding) -> Decimal | None:
    """The finding's USD/day as it counts in totals: None when another finding owns the money (priced once)."""
    if finding.money_owner:
        return None
    return finding.usd_per_day


_CODE = re.compile(r"\s*\((?:field guide )?B\d{2}\)|,?\s*\bB\d{2}\b(?=[;,)])|\s*\(see \.\./shared/[^)]*\)")


#: A percent sign glued to its number ("10%"; not a URL's "%7B"): people's text writes "10 %" (style.md's examples,
#: `percent`), one style on every surface.
_GLUED_PERCENT = re.compile(r"(?<=\d)%(?![\w%])")


def no_codes(text: str) -> str:
    """`text` for people: without the field guide's internal codes ("(B16)", ", B15") that users do not have, and
    with percentages in the one style ("10 %", as `percent` writes them)."""
    return _GLUED_PERCENT.sub(" %", _CODE.sub("", text))


def reason_words(text: str) -> str:
    """A no-verdict reason as people read it: no internal codes (`no_codes`), and each data-quality problem id it
    names in words ("untrusted telemetry: frozen_exporter" → "untrusted telemetry: frozen exporter")."""
    return re.sub(r"\b[a-z]+(?:_[a-z]+)+\b", lambda m: PROBLEM_LABELS.get(m.group(0), m.group(0)), no_codes(text))


def setting_text(name: str, value: object) -> str:
    """A detector setting as people read it: ratios as percent, seconds as durations, MiB and W with units."""
    label = name.replace("_", " ")
    if isinstance(value, bool) or value is None:
        return f"{label}: {value}"
    if isinstance(value, float | int) and name.endswith("_ratio"):
        return f"{label.removesuffix(' ratio')}: {percent(float(value))}"
    if isinstance(value, int | float) and name.endswith("_s"):
        return f"{label.removesuffix(' s')}: {duration(int(value))}"
    for suffix, unit in (("_mib", "MiB"), ("_w", "W"), ("_pct", "%"), ("_percent", "%")):
        if name.endswith(suffix) and isinstance(value, int | float):
            return f"{label.removesuffix(suffix.replace('_', ' '))}: {value:g} {unit}"
    return f"{label}: {value}"


def duration(seconds: int) -> str:
    """Seconds as people say them: "7 d", "2 h", "90 min", "45 s"."""
    if seconds and seconds % 86400 == 0:
        return f"{seconds // 86400} d"
    if seconds and seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


#: Signals as people say them (others: `signal_name` derives a name; never PromQL).
SIGNAL_NAMES: dict[str, str] = {
    **{signal.value: signal.words for signal in Signal},  # the DCGM fields: one name, as the detectors' titles say
    "physical_gpus": "GPUs on the node", "requested_gpus": "GPUs requested by pods",
    "busy_unrequested_gpus": "busy GPUs no pod requested", "ownerReferences": "owner objects found",
    "memory_demand": "GPU memory needed", "pod_age_s": "pod age", "pod_pending_s": "time Pending",
    "container_finished_s": "time since a container finished", "notebook_last_activity_s": "time since the notebook's last activity",
    "vllm:kv_cache_usage_perc": "KV cache usage", "vllm:gpu_cache_usage_perc": "KV cache usage",
    "vllm:num_requests_running": "requests running", "vllm:num_requests_waiting": "requests waiting",
    "container_cpu_cfs_throttled_periods_total": "CPU throttled", "container_cpu_usage_seconds_total": "CPU cores used",
    "vllm:generation_tokens_total": "generated tokens", "vllm:prompt_tokens_total": "prompt tokens",
    "vllm:num_preemptions_total": "preemptions",
}
_RATE = re.compile(r"^rate\((?P<inner>.+?)(?:\[[^\]]*\])?\)$")


def signal_name(signal: str) -> str:
    """A signal as people say it ("SM activity", "KV cache usage", "CPU throttled"): a rate over a counter is the
    counter's name ("generated tokens"), a ratio of two rates the first one's; never PromQL."""
    if signal in SIGNAL_NAMES:
        return SIGNAL_NAMES[signal]
    m = _RATE.match(signal.strip())
    if m:
        return signal_name(m.group("inner").split("÷")[0].split("/")[0].strip())
    name = signal.replace("DCGM_FI_PROF_", "").replace("DCGM_FI_DEV_", "").split(":")[-1]
    for suffix in ("_total", "_perc", "_seconds"):
        name = name.removesuffix(suffix)
    return name.replace("_", " ").lower()


def gib(mib: float) -> str:
    """MiB as GiB for people: "8 GiB", "9.6 GiB", "65.3 GiB", "0.05 GiB" (one memory unit on every surface)."""
    g = mib / 1024
    text = f"{g:,.2f}" if 0 < abs(g) < 1 else f"{g:,.1f}"
    return f"{text.rstrip('0').rstrip('.') if '.' in text else text} GiB"


def _seconds_text(v: float) -> str:
    if v >= 86400:
        return f"{v / 86400:.1f} d"
    if v >= 3600:
        return f"{v / 3600:.1f} h"
    if v >= 60:
        return f"{v / 60:.0f} min"
    return f"{v:.0f} s"


def value_text(v: float | None, unit: str) -> str:
    """A reading in its unit for people: ratios as percent ("0.2 %"), seconds as a duration ("3.5 d"), "/s" rates,
    GPU memory (MiB) in GiB ("65.3 GiB"), W with thousands separators; "-" for None."""
    if v is None:
        return "-"
    if unit == "ratio":
        return percent(v)
    if unit == "percent":
        return f"{v:.1f} %" if 0 < abs(v) < 1 else f"{v:.0f} %"
    if unit == "s":
        return _seconds_text(v)
    if unit == "per_s":
        return f"{v:g}/s"
    if unit == "requests":
        return f"{v:g} request{'' if v == 1 else 's'}"
    if unit == "MiB":  # GPU memory in GiB for people, as the titles and the GPU models' sizes say it
        return gib(v)
    if unit == "W":
        return f"{v:,.0f} {unit}"
    if unit in ("count", "", "owners"):
        return gpus(Decimal(str(v)))
    return f"{v:g} {unit}"


_OP = re.compile(r"(≤|≥|<=|>=|<|>|=)")
_DIRECTION = {"<": "below {}", "≤": "at {} or below", "<=": "at {} or below", ">": "above {}", "≥": "at {} or above",
              ">=": "at {} or above", "=": "at {}"}
_STATS = {"avg": "avg", "p95": "p95", "max": "max", "min": "min", "highest 10-min avg": "max_avg_10m"}


def _compared(e: Evidence) -> tuple[str, str, str] | None:
    """(statistic label, statistic field, operator) the evidence's rule compares, or None without a rule."""
    if e.threshold is None or not e.comparison or e.comparison.startswith("context"):
        return None
    m = _OP.search(e.comparison)
    if m is None:
        return None
    op, stat = m.group(1), e.comparison[:m.start()].strip()
    if stat.startswith("every 10-min avg"):
        return ("highest 10-min avg", "max_avg_10m", op) if op in ("<", "≤", "<=") else ("lowest", "min", op)
    if stat in _STATS:
        return stat, _STATS[stat], op
    if stat == "coverage":
        return "coverage", "coverage", op
    return "", "avg", op  # a formula or no statistic: the reading itself


def rule_text(e: Evidence) -> str:
    """The evidence's rule and reading in one unit, the right way round: "SM activity: p95 0.8 %, flagged below
    5 %", "KV cache usage: highest 10-min avg 96 %, flagged at 90 % or above", "CPU throttled: 60 %, flagged at
    25 % or above"; "" when the evidence has no threshold (context only). The JSON keeps `comparison` as written."""
    compared = _compared(e)
    if compared is None:
        return ""
    label, field, op = compared
    name = signal_name(e.signal)
    threshold = e.threshold if e.threshold is not None else 0.0
    if field == "coverage":
        return f"{name}: telemetry covers {percent(e.coverage)} of the window, a verdict needs at least {percent(threshold)}"
    unit = e.unit
    if unit == "percent" and threshold <= 1 < (e.avg or 0):  # a percent reading against a 0–1 threshold
        threshold *= 100
    value = getattr(e, field)
    if value is None:
        label, value = ("avg", e.avg) if e.avg is not None else (label, None)
    reading = f"{label} {value_text(value, unit)}" if label else value_text(value, unit)
    return f"{name}: {reading}, flagged {_DIRECTION[op].format(value_text(threshold, unit))}"


def evidence_text(e: Evidence, *, coverage: bool = True) -> str:
    """One evidence line for people, every surface alike: the rule (`rule_text`) or the reading, the other
    statistics in the same unit, and how much of the window the telemetry covers ("SM activity: p95 0.8 %, flagged
    below 5 %; avg 0.2 %, highest 10-min avg 0.3 %; telemetry covers 100 % of the window")."""
    name = signal_name(e.signal)
    if e.unit == "count":
        return f"{name}: {value_text(e.avg, 'count')}"
    rule = rule_text(e)
    compared = _compared(e)
    shown = compared[1] if compared else ""
    stats = [("avg", "avg"), ("highest 10-min avg", "max_avg_10m") if e.max_avg_10m is not None else ("max", "max")]
    others = [f"{label} {value_text(getattr(e, f), e.unit)}" for label, f in stats
              if f != shown and getattr(e, f) is not None and not (f == "avg" and not shown and rule)]
    if rule:
        text = rule + (f"; {', '.join(others)}" if others else "")
    else:
        text = f"{name}: {', '.join(others) or 'no samples'}"
    if coverage and e.samples and e.unit in ("ratio", "percent", "MiB", "W") and shown != "coverage":
        text += f"; telemetry covers {percent(e.coverage)} of the window"
    return text


#: Kinds as a heading people read in a chat digest ("Idle GPUs"), one per waste kind; each holds the kind's
#: label word (`KIND_LABELS`), so the table, the ticket and the digest name a kind alike.
KIND_HEADINGS: dict[WasteKind, str] = {
    WasteKind.IDLE: "Idle GPUs",
    WasteKind.UNDERUSED: "Under-used GPUs",
    WasteKind.UNALLOCATED: "Unallocated node capacity",
    WasteKind.DATA_QUALITY: "Data quality: no verdict",
    WasteKind.POWER_ANOMALY: "Power: draw without work",
    WasteKind.LOW_MEMORY_BANDWIDTH: "Low memory bandwidth",
    WasteKind.STALLED: "Stalled jobs",
    WasteKind.WRONG_HARDWARE: "Wrong hw: oversized GPUs",
    WasteKind.CPU_BOUND: "CPU-bound GPUs",
    WasteKind.KV_CACHE_PRESSURE: "KV cache pressure",
    WasteKind.INFERENCE_IDLE: "Serving idle: unused inference servers",
    WasteKind.ORPHANED: "Orphaned pods",
    WasteKind.UNREQUESTED_USE: "Unrequested use: GPUs used without a request",
}

#: What to do about a kind, in one short sentence (a digest says it once per kind; each finding's own advice, with
#: its commands, is behind Details / `gpuwaste explain`: `gpuwaste.advice`). Never more than every row of the
#: advice table allows: no "remove the node" (a node with GPUs in use is never drained), no "its owner is gone".
KIND_ACTIONS: dict[WasteKind, str] = {
    WasteKind.IDLE: "Stop them, scale to zero, or share them.",
    WasteKind.UNDERUSED: "Batch more, or use a smaller GPU or MIG slice.",
    WasteKind.UNALLOCATED: "Schedule pending GPU work here, or let the autoscaler consolidate.",
    WasteKind.DATA_QUALITY: "Fix the exporter: the GPU's state is unknown.",
    WasteKind.POWER_ANOMALY: "Profile for busy-waits and memory-bound kernels.",
    WasteKind.LOW_MEMORY_BANDWIDTH: "A cheaper GPU or a MIG slice does this work.",
    WasteKind.STALLED: "Check logs, restart, set NCCL timeouts.",
    WasteKind.WRONG_HARDWARE: "Move to the smaller GPU named in Details.",
    WasteKind.CPU_BOUND: "Give it more CPU or data-loader workers.",
    WasteKind.KV_CACHE_PRESSURE: "Resize memory share, context or replicas.",
    WasteKind.INFERENCE_IDLE: "Scale to zero or consolidate models.",
    WasteKind.ORPHANED: "Delete the pod: nobody uses its GPUs.",
    WasteKind.UNREQUESTED_USE: "Request the GPU in the pod spec.",
}


def kind_action(kind: WasteKind | str) -> str | None:
    """What to do about a kind in one short sentence (None for an unknown kind)."""
    try:
        return KIND_ACTIONS.get(WasteKind(kind))
    except ValueError:
        return None


def kind_heading(kind: WasteKind | str) -> str:
    """A kind as a heading ("Idle GPUs", "Stalled jobs")."""
    try:
        return KIND_HEADINGS[WasteKind(kind)]
    except ValueError:
        return str(kind).replace("_", " ").capitalize()


#: Public price sources by the repository their URL names: (what people call it).
_PRICE_SOURCE_NAMES = {
    "aws/karpenter-provider-aws": "Karpenter's AWS on-demand price table",
    "kubernetes/autoscaler": "cluster-autoscaler's GCE price table",
    "skypilot-org/skypilot-catalog": "SkyPilot's Azure catalog",
}
_URL = re.compile(r"https?://[^\s)]+")
_REPO_PATH = re.compile(r"(?:\.\./)?shared/\S*|\S+/\S+\.(?:go|py|ya?ml|csv|json|md)\b(?:\s*@\s*[0-9a-f]{6,40})?")


def price_source(source: str, effective_date: str = "") -> tuple[str, str | None]:
    """(name, URL) of a price's public source, for people: "Karpenter's AWS on-demand price table, 2026-07-20" and
    `https://github.com/aws/karpenter-provider-aws` — never a file path inside a repository or a commit.

    A source without a URL (a configured rate card: `pricing.instance_types`) keeps its own words, without paths
    or internal codes.
    """
    url_match = _URL.search(source)
    url = url_match.group(0).rstrip(".,;") if url_match else None
    name = ""
    if url:
        repo = "/".join(url.split("/")[3:5]) if "github.com/" in url else ""
        name = _PRICE_SOURCE_NAMES.get(repo, "")
        if not name:
            name = f"{repo} price table" if repo else url.split("/")[2]
        if repo:
            url = f"https://github.com/{repo}"
    else:
        name = " ".join(_REPO_PATH.sub("", no_codes(source)).split()).removesuffix(" see").strip(" ,;:-")
        name = name or "configured rate card"
    dated = f"{name}, {effective_date}" if effective_date else name
    return dated, url


def details_lines(finding: Finding) -> list[str]:
    """What stands behind a finding's one line, for people (a chat's "Details"): evidence in people's units, the cost
    formula, the price's public source, caveats and the recommendation — no internal codes, no repository paths."""
    lines = []
    for e in finding.evidence[:6]:
        text = evidence_text(e)
        if e.note and not e.note.startswith("GPU_UTIL is percent"):
            text += f" ({no_codes(e.note)})"
        lines.append(text)
    lines.append(f"Cost: {people_formula(finding)}")
    c = finding.cost
    if c is not None and c.source:
        name, url = price_source(c.source, c.effective_date)
        lines.append(f"Price: {name}" + (f" ({url})" if url else ""))
    if c is not None:
        lines.extend(f"Caveat: {no_codes(w)}" for w in c.warnings)
    from gpuwaste.advice import advise  # advice builds on these helpers

    advice = advise(finding)
    lines.append(f"What to do: {advice.action}" + (f" {advice.caution}" if advice.caution else ""))
    lines.extend(f"$ {c.shell()}" for c in advice.commands)
    return lines


def short_node(name: str) -> tuple[str, str]:
    """(name without a cloud DNS suffix, the suffix removed or "")."""
    for suffix in NODE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name.removesuffix(suffix), suffix
    return name, ""


def offender_name(workload: str | None, namespace: str | None) -> str:
    """A daily-summary offender as the scan table names its subject: a node-level finding (no namespace; the
    stored workload is the node) reads `node ip-10-0-1-17` (cloud DNS suffix left out), a workload its name, and
    a finding with neither `-`."""
    if not workload:
        return "-"
    return f"node {short_node(workload)[0]}" if namespace is None else workload
