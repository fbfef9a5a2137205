"""Service (pure): the share ledger of one scan from its join (`scan_ledger`), and the GPU requests no node took."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, localcontext

from gpuwaste.join import Allocation, NodeInventory, ScanContext
from gpuwaste.models.cluster import PodPhase
from gpuwaste.models.findings import Subject
from gpuwaste.pricing.catalog import PriceBook
from gpuwaste.pricing.prices import GpuHourRate
from gpuwaste.services.showback.conservation import MICROSECOND, ONE, PRECISION, Hold, Ledger, NodeGpus, conserve


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
    return Decimal((b - a) // MICROSECOND) / Decimal(3_600_000_000)


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
