"""Service (pure): what a scan's completion carries of its share ledger for the store (`models.spend`)."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from gpuwaste.models.settings import DeliverySettings
from gpuwaste.models.spend import MAX_GROUP_NAME, MAX_SPEND_GROUPS, FunnelFigures, ScanAllocation, SpendGroup, fold
from gpuwaste.services.showback.groups import FunnelRow, ShowbackRow, funnel, showback
from gpuwaste.services.showback.holdings import ScanLedger

_Q = Decimal("0.000000001")


def _q(v: Decimal) -> Decimal:
    return v.quantize(_Q, rounding=ROUND_HALF_UP)


def _name(text: str) -> str:
    return text if len(text) <= MAX_GROUP_NAME else text[: MAX_GROUP_NAME - 1] + "…"


def _groups(rows: list[ShowbackRow], limit: int) -> tuple[SpendGroup, ...]:
    return fold((SpendGroup(name=_name(r.group), gpu_hours=_q(r.allocated_gpu_hours), cents=r.allocated_cents,
                            effective_gpu_hours=_q(r.effective_gpu_hours), unpriced_gpu_hours=_q(r.unpriced_gpu_hours))
                 for r in rows), limit)


def scan_allocation(sl: ScanLedger, delivery: DeliverySettings | None = None, *,
                    limit: int = MAX_SPEND_GROUPS) -> ScanAllocation:
    """The allocation ledger of one scan (shard) as its completion carries it.

    The window's funnel (every line of the ledger), the GPU requests no node took, and the allocated GPU-hours and
    cents per team (routing, as the waste findings of the same pods) and per namespace, folded to `limit` groups
    each (`models.spend.fold`). GPU-hours to 1e-9.
    """
    row = funnel(sl, lambda _ln, _info: "all").get("all", FunnelRow())
    waits = [u.waited_s for u in sl.unmet if u.waited_s is not None]
    figures = FunnelFigures(
        total_gpu_hours=_q(row.total_gpu_hours), allocated_gpu_hours=_q(row.allocated_gpu_hours),
        active_gpu_hours=_q(row.active_gpu_hours), effective_gpu_hours=_q(row.effective_gpu_hours),
        unobserved_gpu_hours=_q(row.unobserved_gpu_hours), unmet_pods=len(sl.unmet),
        unmet_gpus=sum(sum(u.resources.values()) for u in sl.unmet), unmet_longest_wait_s=max(waits, default=0),
    )
    return ScanAllocation(
        window_s=int((sl.window_end - sl.window_start).total_seconds()),
        funnel=figures,
        by_team=_groups(showback(sl, (), "team", delivery), limit),
        by_namespace=_groups(showback(sl, (), "namespace", delivery), limit),
    )


__all__ = ["scan_allocation"]
