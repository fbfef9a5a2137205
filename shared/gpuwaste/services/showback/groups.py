"""Service (pure): the funnel, the showback groups and the `/metrics` figures of a scan's ledger."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from gpuwaste.models.findings import Finding, Subject, WasteKind
from gpuwaste.models.settings import DeliverySettings
from gpuwaste.services.routing import route_for
from gpuwaste.services.showback.conservation import CENT, MICROSECOND, ZERO, Conservation, LedgerLine
from gpuwaste.services.showback.holdings import HolderInfo, ScanLedger, unmet_by_resource


@dataclass
class FunnelRow:
    """Total → allocated → active → effective, in GPU-hours and in GPUs (GPU-hours ÷ window hours)."""

    total_gpu_hours: Decimal = ZERO
    allocated_gpu_hours: Decimal = ZERO
    active_gpu_hours: Decimal = ZERO
    effective_gpu_hours: Decimal = ZERO
    unobserved_gpu_hours: Decimal = ZERO

    def as_dict(self, hours: Decimal) -> dict[str, float]:
        """The row as JSON numbers: GPU-hours and the GPUs they are over the window (4 decimals)."""
        out: dict[str, float] = {}
        for name in ("total", "allocated", "active", "effective", "unobserved"):
            v: Decimal = getattr(self, f"{name}_gpu_hours")
            out[f"{name}_gpu_hours"] = float(v.quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP))
            out[f"{name}_gpus"] = (
                float((v / hours).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)) if hours else 0.0
            )
        return out


#: The funnel's rules in words (printed with it; docs/showback.md says the same).
FUNNEL_RULE = (
    "total: physical GPUs × window hours; allocated: GPU-hours charged to holders (the ledger); active: allocated "
    "GPU-hours of holders whose activity signal reaches 1 % in some 10-minute average of the window; "
    "effective: allocated GPU-hours × "
    "the mean activity ratio (SM_ACTIVE, else GR_ENGINE_ACTIVE, else GPU_UTIL ÷ 100); unobserved: allocated "
    "GPU-hours with no activity telemetry (never counted idle)"
)


def funnel(sl: ScanLedger, by: Callable[[LedgerLine, HolderInfo | None], str]) -> dict[str, FunnelRow]:
    """The funnel grouped by `by(line, holder)` (cluster, GPU model, team, …); total counts unsold/unallocated too."""
    out: dict[str, FunnelRow] = {}
    for ln in sl.ledger.lines:
        info = sl.holders.get(ln.key) if ln.kind == "holder" else None
        row = out.setdefault(by(ln, info), FunnelRow())
        row.total_gpu_hours += ln.gpu_hours
        if ln.kind != "holder":
            continue
        row.allocated_gpu_hours += ln.gpu_hours
        if info is None or info.active is None or info.activity is None:
            row.unobserved_gpu_hours += ln.gpu_hours
            continue
        if info.active:
            row.active_gpu_hours += ln.gpu_hours
        row.effective_gpu_hours += ln.gpu_hours * Decimal(str(round(info.activity, 6)))
    return out


def waste_by_holder(findings: Iterable[Finding]) -> dict[tuple[str, str], tuple[Decimal, Decimal]]:
    """(namespace, pod) → (wasted GPU-hours, wasted USD in the window).

    From the scan's priced waste findings — the same money the findings carry (a finding whose GPU-hours another
    owns adds nothing).
    """
    out: dict[tuple[str, str], tuple[Decimal, Decimal]] = {}
    for f in findings:
        s = f.subject
        if not f.kind.is_waste or f.money_owner or s.namespace is None or s.pod is None:
            continue
        usd = f.cost.usd_in_window if f.cost is not None and f.cost.usd_in_window is not None else ZERO
        h, u = out.get((s.namespace, s.pod), (ZERO, ZERO))
        out[(s.namespace, s.pod)] = (h + f.wasted_gpu_hours, u + usd)
    return out


def subject_team(subject: Subject, delivery: DeliverySettings | None = None) -> str:
    """A holder's team as routing sees it, else its namespace.

    Routing: workload/namespace annotations and labels, the team and namespace maps; else the namespace — the same
    team the waste findings of the same pod are reported under.
    """
    probe = Finding(
        kind=WasteKind.IDLE,
        detector="showback",
        subject=subject,
        title="",
        recommendation="",
        observed_at=datetime(2000, 1, 1, tzinfo=UTC),
        window_s=0,
    )
    return route_for(probe, delivery or DeliverySettings()).team or subject.namespace or "no owner"


#: The showback group of waste findings whose GPU-hours no ledger line holds (a pod the join did not place).
UNMATCHED = "(waste outside the ledger)"

#: What a non-holder line is grouped under in the team / namespace / label views.
NOT_HELD = {"unsold slices": "(unsold slices)", "unallocated": "(unallocated)"}


def group_key(
    sl: ScanLedger, by: str, delivery: DeliverySettings | None = None
) -> Callable[[LedgerLine, HolderInfo | None], str]:
    """The grouping of the funnel/showback.

    One of "cluster", "gpu_model", "node", "team", "namespace", "mechanism", or "label:KEY" (the holder's
    workload label, else its namespace label; "(none)" when absent). Lines nobody holds are "(unsold slices)" /
    "(unallocated)" in the holder views.

    Raises:
        ValueError: an unknown grouping.
    """
    teams: dict[object, str] = {}

    def holder_view(ln: LedgerLine, info: HolderInfo | None, pick: Callable[[HolderInfo], str]) -> str:
        if ln.kind != "holder" or info is None:
            return NOT_HELD.get(ln.kind, "(unknown holder)")
        return pick(info)

    if by == "cluster":
        return lambda _ln, _i: sl.cluster
    if by == "gpu_model":
        return lambda ln, _i: sl.gpu_models.get((ln.node, ln.gpu), "unknown")
    if by == "node":
        return lambda ln, _i: ln.node
    if by == "mechanism":
        return lambda ln, i: holder_view(ln, i, lambda h: h.mechanism)
    if by == "namespace":
        return lambda ln, i: holder_view(ln, i, lambda h: h.subject.namespace or "(none)")
    if by == "team":

        def team(ln: LedgerLine, i: HolderInfo | None) -> str:
            if ln.kind == "holder" and i is not None and ln.key not in teams:
                teams[ln.key] = subject_team(i.subject, delivery)
            return holder_view(ln, i, lambda _h: teams[ln.key])

        return team
    if by.startswith("label:") and by[6:]:
        key = by[6:]
        return lambda ln, i: holder_view(
            ln, i, lambda h: h.subject.labels.get(key) or h.subject.namespace_labels.get(key) or "(none)"
        )
    raise ValueError(f"cannot group by {by!r}: use cluster, gpu_model, node, team, namespace, mechanism or label:KEY")


def funnel_figures(sl: ScanLedger, by: str, delivery: DeliverySettings | None = None) -> dict[str, dict[str, float]]:
    """`funnel` grouped by `by` (see `group_key`) as JSON numbers (GPU-hours and GPUs over the window)."""
    hours = Decimal((sl.window_end - sl.window_start) // MICROSECOND) / Decimal(3_600_000_000)
    rows = funnel(sl, group_key(sl, by, delivery))
    return {k: rows[k].as_dict(hours) for k in sorted(rows)}


def conservation_figures(c: Conservation) -> dict[str, object]:
    """The check as JSON.

    Holds, GPUs, GPU-hours and USD per line kind (the cents ledger: each GPU's cost rounded to the cent once),
    `usd_exact` (the unrounded cost, what FOCUS rows add up to), problems.
    """
    return {
        "holds": c.holds,
        "physical_gpus": c.gpus,
        "unpriced_gpus": c.unpriced_gpus,
        "gpu_hours": float(c.gpu_hours.quantize(Decimal("0.0001"))),
        "holder_gpu_hours": float(c.holder_gpu_hours.quantize(Decimal("0.0001"))),
        "unsold_slices_gpu_hours": float(c.unsold_gpu_hours.quantize(Decimal("0.0001"))),
        "unallocated_gpu_hours": float(c.unallocated_gpu_hours.quantize(Decimal("0.0001"))),
        "usd": c.cents / 100,
        "usd_exact": float(c.usd.quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)),
        "holders_usd": c.holder_cents / 100,
        "unsold_slices_usd": c.unsold_cents / 100,
        "unallocated_usd": c.unallocated_cents / 100,
        "problems": list(c.problems),
        "text": c.text(),
    }


@dataclass
class ShowbackRow:
    """One group of the showback.

    GPU-hours and USD allocated (charged by the ledger), wasted (the scan's priced waste findings of the same pods:
    the money ledger's numbers), used (allocated − wasted), effective (allocated × mean activity) and efficiency
    (used ÷ allocated GPU-hours).
    """

    group: str
    allocated_gpu_hours: Decimal = ZERO
    allocated_cents: int = 0
    wasted_gpu_hours: Decimal = ZERO
    wasted_usd: Decimal = ZERO
    effective_gpu_hours: Decimal = ZERO
    holders: int = 0
    unpriced_gpu_hours: Decimal = ZERO

    @property
    def used_gpu_hours(self) -> Decimal:
        """Allocated GPU-hours no waste finding claims (never negative)."""
        return max(ZERO, self.allocated_gpu_hours - self.wasted_gpu_hours)

    @property
    def efficiency(self) -> float | None:
        """Used ÷ allocated GPU-hours (0–1); None when nothing is allocated."""
        if not self.allocated_gpu_hours:
            return None
        return float(self.used_gpu_hours / self.allocated_gpu_hours)

    def as_dict(self) -> dict[str, object]:
        """JSON/CSV numbers: GPU-hours to 4 decimals, USD to the cent, efficiency 0–1 to 4 decimals."""
        q = Decimal("0.0001")
        eff = self.efficiency
        return {
            "group": self.group,
            "holders": self.holders,
            "allocated_gpu_hours": float(self.allocated_gpu_hours.quantize(q, rounding=ROUND_HALF_UP)),
            "allocated_usd": self.allocated_cents / 100,
            "used_gpu_hours": float(self.used_gpu_hours.quantize(q, rounding=ROUND_HALF_UP)),
            "wasted_gpu_hours": float(self.wasted_gpu_hours.quantize(q, rounding=ROUND_HALF_UP)),
            "wasted_usd": float(self.wasted_usd.quantize(CENT, rounding=ROUND_HALF_UP)),
            "effective_gpu_hours": float(self.effective_gpu_hours.quantize(q, rounding=ROUND_HALF_UP)),
            "efficiency": None if eff is None else round(eff, 4),
            "unpriced_gpu_hours": float(self.unpriced_gpu_hours.quantize(q, rounding=ROUND_HALF_UP)),
        }


def showback(
    sl: ScanLedger, findings: Sequence[Finding], by: str, delivery: DeliverySettings | None = None
) -> list[ShowbackRow]:
    """The showback of one scan window grouped by `by` (`group_key`: team, namespace, label:KEY, cluster, gpu_model, …).

    Allocated: the ledger's lines (cents apportioned per GPU, so the groups add up to the GPUs' cost to the cent).
    Wasted: the scan's waste findings — a pod's findings to the pod's group (USD = the finding's `usd_in_window`, the
    same money the store's ledger records), a node's findings (free capacity) split between that node's unsold-slice
    and unallocated lines by their GPU-hours. Rows are sorted by allocated USD, then name; the groups of GPUs nobody
    holds ("(unsold slices)", "(unallocated)") come last.
    """
    key = group_key(sl, by, delivery)
    rows: dict[str, ShowbackRow] = {}
    seen: dict[str, set[object]] = {}
    pod_lines: dict[tuple[str, str], list[LedgerLine]] = {}
    free_lines: dict[str, list[LedgerLine]] = {}
    for ln in sl.ledger.lines:
        info = sl.holders.get(ln.key) if ln.kind == "holder" else None
        g = key(ln, info)
        row = rows.setdefault(g, ShowbackRow(g))
        row.allocated_gpu_hours += ln.gpu_hours
        row.allocated_cents += ln.cents or 0
        if ln.cents is None:
            row.unpriced_gpu_hours += ln.gpu_hours
        if ln.kind == "holder":
            if ln.key not in seen.setdefault(g, set()):
                seen[g].add(ln.key)
                row.holders += 1
            if info is not None and info.activity is not None:
                row.effective_gpu_hours += ln.gpu_hours * Decimal(str(round(info.activity, 6)))
            ns_pod = (info.subject.namespace or "", info.subject.pod or "") if info is not None else ("", "")
            pod_lines.setdefault(ns_pod, []).append(ln)
        else:
            free_lines.setdefault(ln.node, []).append(ln)
    for f in findings:
        s = f.subject
        if not f.kind.is_waste or f.money_owner:
            continue
        usd = f.cost.usd_in_window if f.cost is not None and f.cost.usd_in_window is not None else ZERO
        if s.pod:
            targets = pod_lines.get((s.namespace or "", s.pod), [])
        else:
            targets = free_lines.get(s.node or "", [])
        total = sum((ln.gpu_hours for ln in targets), ZERO)
        if not targets or not total:  # waste of GPU-hours the ledger does not hold (never dropped silently)
            row = rows.setdefault(UNMATCHED, ShowbackRow(UNMATCHED))
            row.wasted_gpu_hours += f.wasted_gpu_hours
            row.wasted_usd += usd
            continue
        for ln in targets:
            part = ln.gpu_hours / total
            g = key(ln, sl.holders.get(ln.key) if ln.kind == "holder" else None)
            rows[g].wasted_gpu_hours += f.wasted_gpu_hours * part
            rows[g].wasted_usd += usd * part
    not_held = {*NOT_HELD.values(), UNMATCHED}
    return sorted(rows.values(), key=lambda r: (r.group in not_held, -r.allocated_cents, r.group))


HEALTH_STAGES = ("total", "allocated", "active", "effective", "unobserved")


def health_figures(sl: ScanLedger, delivery: DeliverySettings | None = None) -> dict[str, dict[str, Any]]:
    """What `/metrics` exposes of a scan's ledger, as `ScanHealth` fields.

    `funnel_gpus` (GPU model → stage → GPUs), `team_gpus` (team → stage → GPUs; holders only), `unmet_gpu_requests` /
    `unmet_wait_s` (resource → pods / longest wait s), `window_cost_usd` (holders / unsold_slices / unallocated →
    USD, from the apportioned cents) and `team_spend_usd_per_day` (team → its allocated USD over the window at a
    day's rate: cents ÷ 100 × 24 ÷ window hours; what a spend budget is compared with).
    """
    models = funnel_figures(sl, "gpu_model", delivery)
    teams = funnel_figures(sl, "team", delivery)
    by_resource = unmet_by_resource(sl.unmet)
    c = sl.ledger.conservation
    hours = Decimal((sl.window_end - sl.window_start) // MICROSECOND) / Decimal(3_600_000_000)
    spend = {r.group: float((Decimal(r.allocated_cents) / 100 * 24 / hours).quantize(CENT, rounding=ROUND_HALF_UP))
             for r in showback(sl, (), "team", delivery) if r.group not in NOT_HELD.values() and hours}
    return {
        "funnel_gpus": {m: {s: row[f"{s}_gpus"] for s in HEALTH_STAGES} for m, row in models.items()},
        "team_gpus": {
            t: {s: row[f"{s}_gpus"] for s in HEALTH_STAGES if s != "total"}
            for t, row in teams.items()
            if t not in NOT_HELD.values()
        },
        "unmet_gpu_requests": {r: int(v["pods"] or 0) for r, v in by_resource.items()},
        "unmet_wait_s": {r: float(v["longest_wait_s"] or 0) for r, v in by_resource.items()},
        "window_cost_usd": {
            "holders": c.holder_cents / 100,
            "unsold_slices": c.unsold_cents / 100,
            "unallocated": c.unallocated_cents / 100,
        },
        "team_spend_usd_per_day": spend,
    }
