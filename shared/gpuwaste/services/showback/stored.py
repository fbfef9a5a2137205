"""Service (pure): showback over any period from the store's allocation ledger (issue 24 §2), not one scan window.

The allocated GPU-hours and cost per team or namespace are the stored scans' share ledgers (`models.spend.spend_of`:
each cluster-hour once, to the cent), so a period's showback equals the scan-time showback of its hours; the waste
beside them is the money ledger's (`services.summary.waste_in`, the number the daily summary adds up), grouped by
the record's team (routing) or namespace. Efficiency here is effective ÷ allocated GPU-hours (the funnel's rule):
the stored ledger keeps no per-pod waste GPU-hours.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from gpuwaste.models.lifecycle import FindingRecord
from gpuwaste.models.spend import FunnelFigures, SpendOfPeriod
from gpuwaste.services.summary import waste_in

#: What the stored ledger is grouped by (a scan keeps these two; other groupings need a scan window).
STORED_GROUPINGS = ("team", "namespace")
_Q4 = Decimal("0.0001")


def _num(v: Decimal) -> float:
    return float(v.quantize(_Q4, rounding=ROUND_HALF_UP))


def _usd(v: Decimal) -> float:
    return float(v.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def funnel_doc(f: FunnelFigures, hours: Decimal) -> dict[str, float | int]:
    """A funnel as JSON numbers: GPU-hours to 4 decimals, and GPUs (GPU-hours ÷ `hours` observed), unmet requests."""
    out: dict[str, float | int] = {}
    for stage in ("total", "allocated", "active", "effective", "unobserved"):
        v: Decimal = getattr(f, f"{stage}_gpu_hours")
        out[f"{stage}_gpu_hours"] = _num(v)
        out[f"{stage}_gpus"] = _num(v / hours) if hours else 0.0
    out.update(unmet_pods=f.unmet_pods, unmet_gpus=f.unmet_gpus, unmet_longest_wait_s=f.unmet_longest_wait_s)
    return out


def stored_showback(spend: SpendOfPeriod, records: Iterable[FindingRecord], *, since: datetime, until: datetime,
                    by: str, team_of: Callable[[FindingRecord], str]) -> list[dict[str, object]]:
    """Rows of the period's showback grouped by `by` ("team" or "namespace"), costliest first, unheld lines last.

    Each row: group, allocated GPU-hours and USD (the stored ledger), effective GPU-hours and efficiency (effective ÷
    allocated), unpriced GPU-hours, and wasted USD in the period (the money ledger; a group with waste but no stored
    allocation gets a row of its own).

    Raises:
        ValueError: `by` is not a stored grouping.
    """
    if by not in STORED_GROUPINGS:
        raise ValueError(f"the stored ledger is grouped by {' or '.join(STORED_GROUPINGS)} only, not {by!r}")
    groups = spend.by_team if by == "team" else spend.by_namespace
    wasted: dict[str, Decimal] = {}
    for r in records:
        usd = waste_in(r, since, until)
        if usd:
            name = team_of(r) if by == "team" else (r.namespace or "(node)")
            wasted[name] = wasted.get(name, Decimal(0)) + usd
    rows: list[dict[str, object]] = []
    for g in groups:
        eff = None if not g.gpu_hours else round(float(g.effective_gpu_hours / g.gpu_hours), 4)
        rows.append({"group": g.name, "allocated_gpu_hours": _num(g.gpu_hours), "allocated_usd": g.cents / 100,
                     "effective_gpu_hours": _num(g.effective_gpu_hours), "efficiency": eff,
                     "unpriced_gpu_hours": _num(g.unpriced_gpu_hours),
                     "wasted_usd": _usd(wasted.pop(g.name, Decimal(0)))})
    for name, usd in sorted(wasted.items(), key=lambda kv: (-kv[1], kv[0])):
        rows.append({"group": name, "allocated_gpu_hours": 0.0, "allocated_usd": 0.0, "effective_gpu_hours": 0.0,
                     "efficiency": None, "unpriced_gpu_hours": 0.0,
                     "wasted_usd": _usd(usd)})
    return rows


def stored_document(spend: SpendOfPeriod, rows: dict[str, list[dict[str, object]]], *, since: datetime,
                    until: datetime) -> dict[str, object]:
    """`showback --since … -o json`'s document over the store.

    `{"source": "store", "period", "hours", "observed_hours", "scans", "allocated_usd", "funnel": {cluster: …,
    "fleet": …}, "groups": {by: rows}}`.
    """
    per_cluster = spend.observed_hours / len(spend.funnel) if spend.funnel else Decimal(0)
    return {
        "source": "store",
        "period": {"start": since.isoformat(), "end": until.isoformat()},
        "hours": spend.hours,
        "observed_hours": float(spend.observed_hours),
        "scans": spend.scans,
        "allocated_usd": spend.cents / 100,
        "funnel": {**{c: funnel_doc(f, per_cluster) for c, f in spend.funnel},
                   "fleet": funnel_doc(spend.fleet, per_cluster)},
        "groups": rows,
    }


__all__ = ["STORED_GROUPINGS", "funnel_doc", "stored_document", "stored_showback"]
