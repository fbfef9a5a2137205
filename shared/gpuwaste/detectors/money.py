"""Detectors: each GPU-hour priced once — when findings cover the same GPUs at the same time, one owns the money.

Pure. Findings about the same subject (a pod, or a node's capacity) whose episodes overlap in time price the
same GPU-hours: the one wasting the most GPU-hours (ties: the more specific verdict, `PRIORITY`) owns the
money; the others keep their evidence and advice but point to it (`Finding.money_owner`) with no wasted share
or GPU-hours of their own. Findings on one subject at different times (idle for an hour, then stalled) both
keep their money: those GPU-hours are different.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from gpuwaste.models.findings import Episode, Finding, WasteKind

#: Which verdict owns shared GPU-hours when two waste the same amount (lower first): the most specific diagnosis.
PRIORITY: dict[WasteKind, int] = {
    WasteKind.STALLED: 0,
    WasteKind.ORPHANED: 1,
    WasteKind.IDLE: 2,
    WasteKind.INFERENCE_IDLE: 3,
    WasteKind.POWER_ANOMALY: 4,
    WasteKind.CPU_BOUND: 5,
    WasteKind.UNDERUSED: 6,
    WasteKind.LOW_MEMORY_BANDWIDTH: 7,
    WasteKind.WRONG_HARDWARE: 8,
    WasteKind.KV_CACHE_PRESSURE: 9,
    WasteKind.UNALLOCATED: 10,
}


def _subject(f: Finding) -> tuple[str, str | None, str | None, str | None]:
    s = f.subject
    return (s.cluster, s.namespace, s.pod, None if s.pod else s.node)


def _carries_money(f: Finding) -> bool:
    return f.kind.is_waste and (f.wasted_gpu_share > 0 or f.kind is WasteKind.WRONG_HARDWARE)


def _overlap(a: tuple[Episode, ...], b: tuple[Episode, ...]) -> bool:
    """True when two findings' episodes share time (no episodes: the whole window, which overlaps everything)."""
    if not a or not b:
        return True
    return any(x.start < y.end and y.start < x.end for x in a for y in b)


def assign_money_owners(findings: Sequence[Finding]) -> list[Finding]:
    """The findings with `money_owner` set (and their own money zeroed) where they overlap a finding that owns it."""
    groups: dict[tuple[str, str | None, str | None, str | None], list[int]] = {}
    for i, f in enumerate(findings):
        if _carries_money(f):
            groups.setdefault(_subject(f), []).append(i)
    out = list(findings)
    for idx in groups.values():
        if len(idx) < 2:
            continue
        ranked = sorted(idx, key=lambda i: (-findings[i].wasted_gpu_hours, PRIORITY.get(findings[i].kind, 99), findings[i].kind.value))
        owners: list[Finding] = []
        for i in ranked:
            f = findings[i]
            owner = next((o for o in owners if _overlap(o.episodes, f.episodes)), None)
            if owner is None:
                owners.append(f)
                continue
            out[i] = point_to(f, owner)
    return out


def point_to(f: Finding, owner: Finding) -> Finding:
    """`f` without money of its own, pointing to the finding that prices the same GPU-hours."""
    details = {**f.details, "money_owner_kind": owner.kind.value,
               "wasted_share_before_dedup": float(f.wasted_gpu_share), "wasted_gpu_hours_before_dedup": float(f.wasted_gpu_hours)}
    episodes = tuple(e.model_copy(update={"wasted_gpu_hours": Decimal(0)}) for e in f.episodes)
    return f.model_copy(update={"money_owner": owner.fingerprint, "wasted_gpu_share": Decimal(0), "wasted_gpu_hours": Decimal(0),
                                "episodes": episodes, "details": details})


__all__ = ["PRIORITY", "assign_money_owners", "point_to"]
