"""Service (pure): showback that adds up — every physical GPU-hour of a scan window charged once, to whoever held it.

`conserve(nodes)` is the arithmetic; `scan_ledger(ctx, book)` feeds it from a scan's join (`ScanContext`) and the price
book. For each physical GPU (its UUID; GPUs the node has but DCGM does not report get a placeholder name) over the
window of `H` hours:

    Σ holders' GPU-hours on it + its unsold slices + its unallocated GPU-hours = H       (and the same in USD × rate)

Rules (stated once, used everywhere):

* A holder (a pod the allocation resolvers charge: device plugin, MIG slice by profile, time-slicing / MPS replica,
  HAMi cores/memory, KAI / Run:ai fraction, DRA claim split between the pods sharing it, vGPU profile) holds
  `share × hours held in the window` GPU-hours. The share is placed on the physical GPUs its devices name, evenly,
  at most 1 GPU per physical GPU; a holding whose devices the telemetry cannot tell (or the part above 1 per GPU)
  is placed on the node's GPUs with time left — whole unheld GPUs first — and never beyond the node's GPU-hours.
* A physical GPU whose holders take more than `H` (conflicting data: two claims on one GPU) charges each holder
  pro rata, so no GPU is ever charged above 100 %; the scaling is named in `notes`.
* What is left of a GPU that some holder holds only a fraction of (< 1 GPU: a MIG slice, a replica, a HAMi/KAI
  share, a shared DRA claim, a vGPU) is that GPU's **unsold slices**; what is left of any other GPU is
  **unallocated**. Nothing is ever negative.
* USD = GPU-hours × the node's USD per GPU-hour (the price book's rate, as findings are priced). Cents: each GPU's
  cost is rounded to the cent once and apportioned to its lines by largest remainder, so printed lines add up to the
  printed GPU cost exactly (`Conservation` re-checks this independently).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal, localcontext
from typing import Any, Literal

from gpuwaste.join import Allocation, NodeInventory, ScanContext
from gpuwaste.models.cluster import PodPhase
from gpuwaste.models.findings import Finding, Subject, WasteKind
from gpuwaste.models.settings import DeliverySettings
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.pricing.prices import GpuHourRate
from gpuwaste.services.routing import route_for

CENT = Decimal("0.01")
ONE = Decimal(1)
ZERO = Decimal(0)
#: Decimal digits used inside the ledger (prices × GPU-hours stay exact far below the cent).
PRECISION = 60
_US = timedelta(microseconds=1)
#: Differences below this many GPU-hours are the rounding of the ledger's own arithmetic (never charged anywhere).
RESIDUE = Decimal("1e-40")

LineKind = Literal["holder", "unsold slices", "unallocated"]


@dataclass(frozen=True)
class Hold:
    """One holder's GPU-hours on one node.

    Attributes:
        key: the holder's identity in the output (e.g. (namespace, pod)); any hashable value.
        gpu_hours: share × hours held in the window (≥ 0).
        placement: physical GPU UUID → the share held on it (0–1 each; the rest of `gpu_hours` is unplaced).
        hours: hours held in the window (what each placed share is multiplied by).
        mechanism: the allocation kind ("device plugin", "MIG", "time-slicing", "DRA", "HAMi", "KAI", "vGPU", …).
    """

    key: object
    gpu_hours: Decimal
    placement: dict[str, Decimal] = field(default_factory=dict)
    hours: Decimal = ZERO
    mechanism: str = ""


@dataclass(frozen=True)
class NodeGpus:
    """One node's physical GPUs over the window and the holds on them.

    Attributes:
        node: node name. uuids: its physical GPUs (DCGM UUIDs, then placeholders for GPUs it has but DCGM misses).
        hours: window hours each GPU exists (H). usd_per_gpu_hour: the node's rate (None: unpriced).
    """

    node: str
    uuids: tuple[str, ...]
    hours: Decimal
    usd_per_gpu_hour: Decimal | None
    holds: tuple[Hold, ...] = ()


@dataclass(frozen=True)
class LedgerLine:
    """One line of the ledger: GPU-hours of one physical GPU charged to one holder, or its unsold / unallocated part.

    `usd` is exact (unrounded); `cents` is the apportioned amount in whole cents (None when unpriced).
    """

    node: str
    gpu: str
    kind: LineKind
    key: object
    gpu_hours: Decimal
    usd: Decimal | None
    cents: int | None
    mechanism: str = ""


@dataclass(frozen=True)
class GpuCost:
    """One physical GPU over the window: its GPU-hours, its cost (exact and in cents)."""

    node: str
    gpu: str
    gpu_hours: Decimal
    usd: Decimal | None
    cents: int | None


@dataclass(frozen=True)
class Conservation:
    """The conservation check of a ledger.

    Per physical GPU, Σ lines = the GPU (GPU-hours exactly; cents exactly), nothing negative, no GPU charged above
    100 %. `problems` names each violation (empty when it holds).
    """

    gpus: int
    gpu_hours: Decimal
    usd: Decimal
    cents: int
    holder_cents: int
    unsold_cents: int
    unallocated_cents: int
    holder_gpu_hours: Decimal
    unsold_gpu_hours: Decimal
    unallocated_gpu_hours: Decimal
    problems: tuple[str, ...] = ()
    unpriced_gpus: int = 0

    @property
    def holds(self) -> bool:
        """True when every physical GPU-hour is charged exactly once."""
        return not self.problems

    def text(self) -> str:
        """The check in one line: "conservation ✓ 24 GPUs · $1,234.56 = holders $900.00 + unsold slices $34.56 + …"."""
        mark = "holds" if self.holds else f"FAILS ({len(self.problems)} problems)"
        return (
            f"share conservation {mark}: {self.gpus} physical GPUs, {_hours(self.gpu_hours)} GPU-h, "
            f"${_cents(self.cents)} = holders ${_cents(self.holder_cents)} "
            f"+ unsold slices ${_cents(self.unsold_cents)} "
            f"+ unallocated ${_cents(self.unallocated_cents)} (to the cent; no GPU above 100 %, nothing negative)"
            + (f"; {self.unpriced_gpus} GPUs unpriced (GPU-hours only)" if self.unpriced_gpus else "")
        )


@dataclass(frozen=True)
class Ledger:
    """Every line of a window, the physical GPUs, the check, and notes (pro-rata scaling, unplaceable hours)."""

    lines: tuple[LedgerLine, ...]
    gpus: tuple[GpuCost, ...]
    conservation: Conservation
    notes: tuple[str, ...] = ()


def _hours(v: Decimal) -> str:
    return f"{v.quantize(Decimal('0.01'), rounding=ROUND_HALF_UP):,}"


def _cents(c: int) -> str:
    return f"{Decimal(c) / 100:,.2f}"


def conserve(nodes: Iterable[NodeGpus]) -> Ledger:
    """The ledger of `nodes`: each physical GPU's hours charged to its holders, its unsold slices and unallocated part.

    Raises:
        ValueError: a hold with negative GPU-hours or a placement share outside 0–1 (bad input, never clamped silently).
    """
    lines: list[LedgerLine] = []
    gpus: list[GpuCost] = []
    notes: list[str] = []
    with localcontext() as dec:
        dec.prec = PRECISION
        for n in nodes:
            node_lines, node_gpus, node_notes = _node(n)
            lines.extend(node_lines)
            gpus.extend(node_gpus)
            notes.extend(node_notes)
        check = check_conservation(lines, gpus)
    return Ledger(tuple(lines), tuple(gpus), check, tuple(notes))


def _node(n: NodeGpus) -> tuple[list[LedgerLine], list[GpuCost], list[str]]:
    H = n.hours
    notes: list[str] = []
    used: dict[str, list[tuple[Hold, Decimal]]] = {u: [] for u in n.uuids}
    fractional: set[str] = set()
    unplaced: list[tuple[Hold, Decimal]] = []
    for h in n.holds:
        if h.gpu_hours < 0:
            raise ValueError(f"hold {h.key!r} on {n.node}: negative GPU-hours {h.gpu_hours}")
        placed = ZERO
        for uuid, share in h.placement.items():
            if not ZERO <= share <= ONE:
                raise ValueError(f"hold {h.key!r} on {n.node}/{uuid}: share {share} outside 0–1")
            if uuid not in used or share == 0:
                continue
            amount = min(share * h.hours, h.gpu_hours - placed)
            if amount <= 0:
                continue
            used[uuid].append((h, amount))
            placed += amount
            if share < ONE:
                fractional.add(uuid)
        if h.gpu_hours - placed > RESIDUE:  # below: Decimal rounding of share × hours, not GPU-hours
            unplaced.append((h, h.gpu_hours - placed))
    # no GPU above 100 %: a GPU's holders share its H pro rata when they claim more
    for uuid, takes in used.items():
        total = sum((a for _, a in takes), ZERO)
        if total > H:
            notes.append(f"{n.node} GPU {uuid}: holders claim {_hours(total)} GPU-h of {_hours(H)}; charged pro rata")
            used[uuid] = _scale(takes, H)
    # unplaced holdings: from the node's GPUs with time left, whole unheld GPUs first
    left = {u: H - sum((a for _, a in used[u]), ZERO) for u in n.uuids}
    order = sorted(n.uuids, key=lambda u: (u in fractional, n.uuids.index(u)))
    for h, amount in unplaced:
        for uuid in order:
            if amount <= 0:
                break
            take = min(amount, left[uuid])
            if take > 0:
                used[uuid].append((h, take))
                left[uuid] -= take
                amount -= take
        if amount > 0:
            notes.append(f"{n.node}: {_hours(amount)} GPU-h of {h.key!r} exceed the node's GPU-hours; not charged")
    lines: list[LedgerLine] = []
    gpus: list[GpuCost] = []
    rate = n.usd_per_gpu_hour
    for uuid in n.uuids:
        gpu_lines = [
            LedgerLine(n.node, uuid, "holder", h.key, a, None if rate is None else a * rate, None, h.mechanism)
            for h, a in used[uuid]
        ]
        rest = H - sum((ln.gpu_hours for ln in gpu_lines), ZERO)
        if rest > 0:
            kind: LineKind = "unsold slices" if uuid in fractional else "unallocated"
            gpu_lines.append(LedgerLine(n.node, uuid, kind, None, rest, None if rate is None else rest * rate, None))
        cost = None if rate is None else H * rate
        cents = None if cost is None else int((cost / CENT).quantize(ONE, rounding=ROUND_HALF_UP))
        if cents is not None:
            gpu_lines = _apportion(gpu_lines, cents)
        lines.extend(gpu_lines)
        gpus.append(GpuCost(n.node, uuid, H, cost, cents))
    return lines, gpus, notes


def _scale(takes: list[tuple[Hold, Decimal]], cap: Decimal) -> list[tuple[Hold, Decimal]]:
    """`takes` scaled to add up to `cap` exactly (the last take gets the remainder)."""
    total = sum((a for _, a in takes), ZERO)
    out = [(h, a * cap / total) for h, a in takes[:-1]]
    out.append((takes[-1][0], cap - sum((a for _, a in out), ZERO)))
    return out


def _apportion(lines: list[LedgerLine], cents: int) -> list[LedgerLine]:
    """Whole cents per line adding up to `cents` (largest remainder; ties to the earlier line)."""
    exact = [(ln.usd or ZERO) / CENT for ln in lines]
    floors = [int(x.to_integral_value(rounding=ROUND_DOWN)) for x in exact]
    short = cents - sum(floors)
    order = sorted(range(len(lines)), key=lambda i: (-(exact[i] - floors[i]), i))
    for i in order[: max(0, short)]:
        floors[i] += 1
    return [
        LedgerLine(ln.node, ln.gpu, ln.kind, ln.key, ln.gpu_hours, ln.usd, c, ln.mechanism)
        for ln, c in zip(lines, floors, strict=True)
    ]


def check_conservation(lines: Sequence[LedgerLine], gpus: Sequence[GpuCost]) -> Conservation:
    """Re-check a ledger from its lines alone.

    Per GPU Σ GPU-hours = the GPU's, Σ cents = its cents, Σ exact USD = its cost (to 1e-20 USD), no negative line,
    holders ≤ 100 % of the GPU.
    """
    problems: list[str] = []
    by_gpu: dict[tuple[str, str], list[LedgerLine]] = {}
    for ln in lines:
        by_gpu.setdefault((ln.node, ln.gpu), []).append(ln)
        if ln.gpu_hours < 0 or (ln.cents is not None and ln.cents < 0) or (ln.usd is not None and ln.usd < 0):
            problems.append(f"{ln.node}/{ln.gpu}: negative {ln.kind} line {ln.key!r}")
    tolerance = Decimal("1e-20")
    for g in gpus:
        mine = by_gpu.get((g.node, g.gpu), [])
        hours = sum((ln.gpu_hours for ln in mine), ZERO)
        held = sum((ln.gpu_hours for ln in mine if ln.kind == "holder"), ZERO)
        if abs(hours - g.gpu_hours) > tolerance:
            problems.append(f"{g.node}/{g.gpu}: lines {hours} GPU-h ≠ the GPU's {g.gpu_hours}")
        if held > g.gpu_hours + tolerance:
            problems.append(f"{g.node}/{g.gpu}: holders charged {held} GPU-h of {g.gpu_hours} (above 100 %)")
        if g.usd is not None:
            usd = sum((ln.usd or ZERO for ln in mine), ZERO)
            if abs(usd - g.usd) > tolerance:
                problems.append(f"{g.node}/{g.gpu}: lines ${usd} ≠ the GPU's ${g.usd}")
            if sum(ln.cents or 0 for ln in mine) != g.cents:
                problems.append(f"{g.node}/{g.gpu}: lines' cents ≠ the GPU's {g.cents}")
    extra = set(by_gpu) - {(g.node, g.gpu) for g in gpus}
    problems += [f"{n}/{u}: lines for a GPU the ledger does not have" for n, u in sorted(extra)]

    def cents_of(kind: str) -> int:
        return sum(ln.cents or 0 for ln in lines if ln.kind == kind)

    def hours_of(kind: str) -> Decimal:
        return sum((ln.gpu_hours for ln in lines if ln.kind == kind), ZERO)

    return Conservation(
        gpus=len(gpus),
        gpu_hours=sum((g.gpu_hours for g in gpus), ZERO),
        usd=sum((g.usd or ZERO for g in gpus), ZERO),
        cents=sum(g.cents or 0 for g in gpus),
        holder_cents=cents_of("holder"),
        unsold_cents=cents_of("unsold slices"),
        unallocated_cents=cents_of("unallocated"),
        holder_gpu_hours=hours_of("holder"),
        unsold_gpu_hours=hours_of("unsold slices"),
        unallocated_gpu_hours=hours_of("unallocated"),
        problems=tuple(problems),
        unpriced_gpus=sum(1 for g in gpus if g.cents is None),
    )


# -- from a scan ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HolderInfo:
    """Who a ledger key is: the finding subject the waste of the same pod is priced on, and its activity."""

    subject: Subject
    mechanism: str
    gpu_hours: Decimal
    #: mean activity ratio 0–1 over the holding (SM_ACTIVE, GR_ENGINE_ACTIVE or GPU_UTIL ÷ 100); None: no telemetry
    activity: float | None
    #: True when some 10-minute average reaches `ACTIVE_FLOOR`; None when no telemetry covers the holder
    active: bool | None
    #: the holding span clipped to the window (what per-day splits use)
    held_from: datetime | None = None
    held_until: datetime | None = None


@dataclass(frozen=True)
class ScanLedger:
    """The ledger of one scan with what surfaces need to group it (holders' subjects, node subjects, models)."""

    ledger: Ledger
    cluster: str
    window_start: datetime
    window_end: datetime
    holders: dict[object, HolderInfo]
    node_subjects: dict[str, Subject]
    gpu_models: dict[tuple[str, str], str]
    #: Pending pods no node took that ask for GPUs (`unmet_requests`)
    unmet: tuple[UnmetRequest, ...] = ()
    #: node → where its rate comes from (the price book's basis: list price, rate card, "your bill (CUR 2.0, …)")
    price_sources: tuple[tuple[str, str], ...] = ()


def _rate_of(subject: Subject, book: PriceBook | None) -> GpuHourRate | None:
    if book is None:
        return None
    rate = book.gpu_hour_rate(
        instance_type=subject.instance_type,
        capacity_type=subject.capacity_type,
        gpu_model=subject.gpu_model,
        physical_gpus=subject.physical_gpus_on_node,
        region=subject.region,
        accelerator=subject.accelerator,
    )
    return rate if isinstance(rate, GpuHourRate) else None


def _seconds_hours(a: datetime, b: datetime) -> Decimal:
    return Decimal((b - a) // _US) / Decimal(3_600_000_000)


def holder_key(a: Allocation) -> tuple[str, str, str]:  # noqa: D401
    """The ledger key of a holding: (namespace, pod, pod uid) — a name recreated in the window is another holder."""
    return (a.pod.namespace, a.pod.name, a.pod.uid or "")


def scan_ledger(ctx: ScanContext, book: PriceBook | None) -> ScanLedger:
    """The ledger of a scan's window from its join.

    Physical GPUs per node (`NodeInventory.capacity_gpus`, DCGM UUIDs first), holders' shares over their holding
    spans, node rates from `book` (as findings are priced; None: GPU-hours only).
    """
    with localcontext() as dec:
        dec.prec = PRECISION
        return _scan_ledger(ctx, book)


def _scan_ledger(ctx: ScanContext, book: PriceBook | None) -> ScanLedger:
    start, end = ctx.window_start, ctx.eval_time
    H = _seconds_hours(start, end)
    nodes: list[NodeGpus] = []
    holders: dict[object, HolderInfo] = {}
    node_subjects: dict[str, Subject] = {}
    models: dict[tuple[str, str], str] = {}
    sources: list[tuple[str, str]] = []
    for name, inv in sorted(ctx.nodes.items()):
        uuids = _uuids(inv)
        if not uuids:
            continue
        ns = ctx.node_subject(inv, list(inv.devices), Decimal(len(uuids)))
        if ns.physical_gpus_on_node is None:
            ns = ns.model_copy(update={"physical_gpus_on_node": len(uuids)})
        node_subjects[name] = ns
        for d in inv.devices:
            models.setdefault((name, d.device.uuid), d.model_name or ns.gpu_model or "unknown")
        for u in uuids:
            models.setdefault((name, u), ns.gpu_model or "unknown")
        holds = []
        for a in inv.allocations:
            lo, hi = ctx.held_span(a)
            hours = _seconds_hours(lo, hi)
            key = a.pod.identity
            holds.append(Hold(key, a.held_share * hours, _placement(a), hours, a.mechanism))
            act = ctx.activity(a.devices, a.pod) if a.devices else None
            holders[key] = HolderInfo(
                ctx.subject_for(a),
                a.mechanism,
                a.held_share * hours,
                None if act is None else max(0.0, min(1.0, act.avg)),
                None if act is None else _active(act.max_avg_10m, act.avg),
                lo,
                hi,
            )
        rate = _rate_of(ns, book)
        if rate is not None:
            sources.append((name, rate.source or "price book"))
        nodes.append(NodeGpus(name, uuids, H, None if rate is None else rate.usd_per_gpu_hour, tuple(holds)))
    return ScanLedger(
        conserve(nodes),
        ctx.cluster.cluster,
        start,
        end,
        holders,
        node_subjects,
        models,
        tuple(unmet_requests(ctx)),
        tuple(sources),
    )


#: A holder is "active" when some 10-minute average of its activity signal reaches this ratio
#: (1 %: above DCGM's idle noise).
ACTIVE_FLOOR = 0.01


def _active(max_avg_10m: float | None, avg: float) -> bool:
    return (max_avg_10m if max_avg_10m is not None else avg) >= ACTIVE_FLOOR


def _uuids(inv: NodeInventory) -> tuple[str, ...]:
    seen = sorted(inv.physical_uuids)
    total = max(len(seen), inv.capacity_gpus())
    return (*seen, *(f"{inv.name}/unreported-{i}" for i in range(total - len(seen))))


def _placement(a: Allocation) -> dict[str, Decimal]:
    """A holding's share per physical GPU its devices name: evenly, at most 1 GPU each."""
    uuids = list(dict.fromkeys(d.device.uuid for d in (*a.devices, *a.lost_devices)))
    if not uuids or a.held_share <= 0:
        return {}
    each = min(ONE, a.held_share / len(uuids))
    return dict.fromkeys(uuids, each)


# -- the funnel and showback groups ---------------------------------------------------------------------------


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


@dataclass(frozen=True)
class UnmetRequest:
    """A Pending pod no node took that asks for GPUs: resource, count, and how long it has waited (s)."""

    namespace: str
    pod: str
    resources: dict[str, int]
    waited_s: int | None


def unmet_requests(ctx: ScanContext) -> list[UnmetRequest]:
    """Pending, unscheduled pods that request GPUs (longest wait first); waited from creation to the evaluation time."""
    out = []
    for p in ctx.cluster.pods:
        if p.phase is PodPhase.PENDING and not p.node_name and p.gpu_requests:
            waited = None if p.created_at is None else max(0, int((ctx.eval_time - p.created_at).total_seconds()))
            out.append(UnmetRequest(p.namespace, p.name, dict(p.gpu_requests), waited))
    return sorted(out, key=lambda u: (-(u.waited_s or 0), u.namespace, u.pod))


def unmet_by_resource(unmet: Sequence[UnmetRequest]) -> dict[str, dict[str, float | int | None]]:
    """Resource → {"pods", "requested", "longest_wait_s", "mean_wait_s"}."""
    out: dict[str, dict[str, float | int | None]] = {}
    for u in unmet:
        for r, c in u.resources.items():
            row = out.setdefault(r, {"pods": 0, "requested": 0, "longest_wait_s": None, "waits": []})  # type: ignore[dict-item]
            row["pods"] = int(row["pods"] or 0) + 1
            row["requested"] = int(row["requested"] or 0) + c
            if u.waited_s is not None:
                row["waits"].append(u.waited_s)  # type: ignore[union-attr]
    for row in out.values():
        waits: list[int] = row.pop("waits")  # type: ignore[assignment]
        row["longest_wait_s"] = max(waits) if waits else None
        row["mean_wait_s"] = round(sum(waits) / len(waits), 1) if waits else None
    return dict(sorted(out.items()))


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
    hours = Decimal((sl.window_end - sl.window_start) // _US) / Decimal(3_600_000_000)
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
    `unmet_wait_s` (resource → pods / longest wait s) and `window_cost_usd` (holders / unsold_slices / unallocated →
    USD, from the apportioned cents).
    """
    models = funnel_figures(sl, "gpu_model", delivery)
    teams = funnel_figures(sl, "team", delivery)
    by_resource = unmet_by_resource(sl.unmet)
    c = sl.ledger.conservation
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
    }


__all__ = [
    "health_figures",
    "ShowbackRow",
    "showback",
    "FUNNEL_RULE",
    "NOT_HELD",
    "Conservation",
    "conservation_figures",
    "funnel_figures",
    "group_key",
    "subject_team",
    "FunnelRow",
    "GpuCost",
    "Hold",
    "HolderInfo",
    "Ledger",
    "LedgerLine",
    "NodeGpus",
    "ScanLedger",
    "UnmetRequest",
    "check_conservation",
    "conserve",
    "funnel",
    "holder_key",
    "scan_ledger",
    "unmet_by_resource",
    "unmet_requests",
    "waste_by_holder",
]
