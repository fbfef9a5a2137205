"""Service (pure): the share ledger's arithmetic (the rules: `services.showback`).

`conserve` charges each physical GPU-hour once; `check_conservation` re-checks a ledger from its lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal, localcontext
from typing import Literal

CENT = Decimal("0.01")
ONE = Decimal(1)
ZERO = Decimal(0)
#: Decimal digits used inside the ledger (prices × GPU-hours stay exact far below the cent).
PRECISION = 60
MICROSECOND = timedelta(microseconds=1)
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
