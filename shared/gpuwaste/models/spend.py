"""Models: the allocation ledger as it travels from a scan to the lifecycle store, the summary and showback (issue 24).

A scan's share ledger (`services.showback`) charges every physical GPU-hour of its window once. Its completion carries
what the store keeps of it (`ScanCompleted.allocation`): the fleet funnel (total → allocated → active → effective
GPU-hours, unobserved, and the GPU requests no node took) and the allocated GPU-hours and cost per team and per
namespace. Each dimension holds at most `MAX_SPEND_GROUPS` groups, costliest first; the rest is folded into one
"(other)" group (stated, never dropped), and the lines nobody holds ("(unsold slices)", "(unallocated)") are always
kept apart, so every dimension adds up to the ledger's total to the cent. The lifecycle adds it to the store per
cluster and UTC hour (`FindingStore.record_allocation`, counted once per scan shard), and the summary and
`gpuwaste showback --since` read the hours of a period back (`spend_of`).

**Overlapping windows.** Scans every 10 minutes over a 1-hour window see each GPU-hour six times. A cluster's hour
therefore charges Σ its scans' figures × min(1, 3600 s ÷ Σ the scans' windows): hourly scans over 1-hour windows
count as they are, more frequent scans count as their mean, and scans whose windows cover less than the hour count
as they are (the hour is then only partly observed: `SpendOfPeriod.observed_hours` says how much). Cents are scaled
per hour and apportioned by largest remainder, so the groups still add up to the hour's total to the cent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal

from pydantic import Field

from gpuwaste.models.base import Frozen

#: Most groups one dimension (team, namespace) keeps besides "(other)" and the unheld lines: bounds a stored item.
MAX_SPEND_GROUPS = 50
#: Longest group name kept (a Kubernetes namespace is at most 63 characters; a team name is the config's words).
MAX_GROUP_NAME = 128
#: The group the groups past `MAX_SPEND_GROUPS` are folded into.
OTHER = "(other)"
#: The groups of GPU-hours nobody holds (the ledger's unsold slices of shared GPUs and unallocated GPUs).
UNHELD = ("(unsold slices)", "(unallocated)")
HOUR_S = 3600
_Q = Decimal("0.000000001")
ZERO = Decimal(0)


class SpendGroup(Frozen):
    """One group's allocated GPU-hours and cost (the share ledger's apportioned cents) over a scan window or a period.

    Attributes:
        name: the team / namespace (or "(other)", "(unsold slices)", "(unallocated)").
        gpu_hours: GPU-hours the ledger charged to the group. cents: their cost in whole US cents (0 when unpriced).
        effective_gpu_hours: allocated GPU-hours × the holders' mean activity (`services.showback.FUNNEL_RULE`).
        unpriced_gpu_hours: of `gpu_hours`, those on GPUs the price book has no rate for (not in `cents`).
    """

    name: str = Field(min_length=1, max_length=MAX_GROUP_NAME)
    gpu_hours: Decimal = Field(ge=0)
    cents: int = Field(ge=0)
    effective_gpu_hours: Decimal = Field(ZERO, ge=0)
    unpriced_gpu_hours: Decimal = Field(ZERO, ge=0)

    @property
    def usd(self) -> Decimal:
        """The cost in USD (cents ÷ 100, exact)."""
        return Decimal(self.cents) / 100


class FunnelFigures(Frozen):
    """The fleet funnel of a scan window or a period, in GPU-hours, and the GPU requests no node took.

    Attributes:
        total_gpu_hours / allocated / active / effective / unobserved: `services.showback.FUNNEL_RULE`.
        unmet_pods / unmet_gpus: Pending pods no node took that ask for GPUs, and the GPUs they ask for (over a period:
            the most seen by one scan). unmet_longest_wait_s: the longest such wait.
    """

    total_gpu_hours: Decimal = Field(ZERO, ge=0)
    allocated_gpu_hours: Decimal = Field(ZERO, ge=0)
    active_gpu_hours: Decimal = Field(ZERO, ge=0)
    effective_gpu_hours: Decimal = Field(ZERO, ge=0)
    unobserved_gpu_hours: Decimal = Field(ZERO, ge=0)
    unmet_pods: int = Field(0, ge=0)
    unmet_gpus: int = Field(0, ge=0)
    unmet_longest_wait_s: int = Field(0, ge=0)

    def plus(self, other: FunnelFigures, factor: Decimal = Decimal(1)) -> FunnelFigures:
        """GPU-hours added (`other`'s × `factor`); unmet requests: the larger of the two."""
        return FunnelFigures(
            total_gpu_hours=self.total_gpu_hours + _q(other.total_gpu_hours * factor),
            allocated_gpu_hours=self.allocated_gpu_hours + _q(other.allocated_gpu_hours * factor),
            active_gpu_hours=self.active_gpu_hours + _q(other.active_gpu_hours * factor),
            effective_gpu_hours=self.effective_gpu_hours + _q(other.effective_gpu_hours * factor),
            unobserved_gpu_hours=self.unobserved_gpu_hours + _q(other.unobserved_gpu_hours * factor),
            unmet_pods=max(self.unmet_pods, other.unmet_pods),
            unmet_gpus=max(self.unmet_gpus, other.unmet_gpus),
            unmet_longest_wait_s=max(self.unmet_longest_wait_s, other.unmet_longest_wait_s),
        )


class ScanAllocation(Frozen):
    """What a scan shard's completion carries of its share ledger (or, summed, what one store hour holds).

    Attributes:
        window_s: the scan's window (s). funnel: its funnel. by_team / by_namespace: allocated GPU-hours and cost per
            group (`fold`: at most `MAX_SPEND_GROUPS` + "(other)" + the unheld lines; costliest first).
    """

    window_s: int = Field(ge=0)
    funnel: FunnelFigures = FunnelFigures()
    by_team: tuple[SpendGroup, ...] = Field((), max_length=MAX_SPEND_GROUPS + 1 + len(UNHELD))
    by_namespace: tuple[SpendGroup, ...] = Field((), max_length=MAX_SPEND_GROUPS + 1 + len(UNHELD))

    @property
    def cents(self) -> int:
        """The ledger's cost in cents (every dimension adds up to it)."""
        return sum(g.cents for g in self.by_team)


class AllocationTally(Frozen):
    """What the store holds for one cluster and UTC hour: the sums over the scan shards recorded in it.

    Attributes:
        cluster / hour: the cluster and the hour's start (UTC) of the scans' scheduled times.
        scans: scans recorded (a scan split over shards counts once, on shard 0). window_s: Σ their windows (shard 0).
        allocation: the figures summed (groups folded again to `MAX_SPEND_GROUPS` per dimension).
    """

    cluster: str
    hour: datetime
    scans: int = Field(ge=0)
    window_s: int = Field(ge=0)
    allocation: ScanAllocation

    @property
    def factor(self) -> Decimal:
        """What the hour's figures count for: min(1, 3600 s ÷ Σ the scans' windows) (module docstring)."""
        if self.window_s <= HOUR_S:
            return Decimal(1)
        return Decimal(HOUR_S) / Decimal(self.window_s)


class SpendOfPeriod(Frozen):
    """The allocation ledger of a period from the store: funnel per cluster, spend per team and namespace.

    Attributes:
        funnel: cluster → its funnel over the period (GPU-hours); `fleet` sums them.
        by_team / by_namespace: every cluster's groups added (re-folded to `MAX_SPEND_GROUPS`), costliest first.
        hours: cluster-hours with a recorded scan. observed_hours: Σ per cluster-hour of min(1, Σ windows ÷ 3600 s).
        scans: scans recorded in the period's hours.
    """

    funnel: tuple[tuple[str, FunnelFigures], ...] = ()
    by_team: tuple[SpendGroup, ...] = ()
    by_namespace: tuple[SpendGroup, ...] = ()
    hours: int = 0
    observed_hours: Decimal = ZERO
    scans: int = 0

    @property
    def fleet(self) -> FunnelFigures:
        """Every cluster's funnel added (unmet requests: the largest cluster's)."""
        out = FunnelFigures()
        for _, f in self.funnel:
            out = out.plus(f)
        return out

    @property
    def cents(self) -> int:
        """The period's allocated cost in cents (holders, unsold slices and unallocated GPUs)."""
        return sum(g.cents for g in self.by_team)

    def per_day(self, cents: int) -> Decimal:
        """USD/day at the rate of `cents` over this period's observed hours (a cluster's mean).

        cents ÷ 100 × 24 ÷ (observed cluster-hours ÷ clusters); 0 when nothing was observed.
        """
        if not self.funnel or not self.observed_hours:
            return ZERO
        return Decimal(cents) / 100 * 24 * len(self.funnel) / self.observed_hours

    @property
    def empty(self) -> bool:
        """True when the store holds no allocation ledger for the period."""
        return self.hours == 0


def _q(v: Decimal) -> Decimal:
    return v.quantize(_Q, rounding=ROUND_HALF_UP)


def fold(groups: Iterable[SpendGroup], limit: int = MAX_SPEND_GROUPS) -> tuple[SpendGroup, ...]:
    """Pure: `groups` added per name, at most `limit` of them kept.

    The `limit` costliest (cents, then GPU-hours, then name) are kept, the rest added into "(other)"; the unheld
    lines are kept apart, last. Costliest first.
    """
    sums: dict[str, list[Decimal | int]] = {}
    for g in groups:
        got = sums.setdefault(g.name, [ZERO, 0, ZERO, ZERO])
        got[0] += g.gpu_hours
        got[1] += g.cents
        got[2] += g.effective_gpu_hours
        got[3] += g.unpriced_gpu_hours
    made = [SpendGroup(name=n, gpu_hours=Decimal(v[0]), cents=int(v[1]), effective_gpu_hours=Decimal(v[2]),
                       unpriced_gpu_hours=Decimal(v[3])) for n, v in sums.items()]
    held = sorted((g for g in made if g.name not in UNHELD and g.name != OTHER),
                  key=lambda g: (-g.cents, -g.gpu_hours, g.name))
    other = [g for g in made if g.name == OTHER] + held[limit:]
    kept = held[:limit]
    if other:
        kept.append(SpendGroup(name=OTHER, gpu_hours=sum((g.gpu_hours for g in other), ZERO),
                               cents=sum(g.cents for g in other),
                               effective_gpu_hours=sum((g.effective_gpu_hours for g in other), ZERO),
                               unpriced_gpu_hours=sum((g.unpriced_gpu_hours for g in other), ZERO)))
    return (*kept, *(g for name in UNHELD for g in made if g.name == name))


def add_allocation(total: ScanAllocation | None, more: ScanAllocation, *, counts_window: bool) -> ScanAllocation:
    """Pure: `more` (one scan shard) added to an hour's sums (`counts_window`: shard 0 adds its window)."""
    if total is None:
        return more if counts_window else more.model_copy(update={"window_s": 0})
    return ScanAllocation(
        window_s=total.window_s + (more.window_s if counts_window else 0),
        funnel=total.funnel.plus(more.funnel),
        by_team=fold((*total.by_team, *more.by_team)),
        by_namespace=fold((*total.by_namespace, *more.by_namespace)),
    )


def scaled(groups: Sequence[SpendGroup], factor: Decimal) -> list[SpendGroup]:
    """Pure: the groups × `factor` (≤ 1).

    GPU-hours exactly (to 1e-9); cents rounded once for their total and apportioned by largest remainder (ties to the
    earlier group), so they still add up.
    """
    if factor == 1:
        return list(groups)
    exact = [Decimal(g.cents) * factor for g in groups]
    total = int(sum(exact, ZERO).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    floors = [int(x.to_integral_value(rounding=ROUND_DOWN)) for x in exact]
    order = sorted(range(len(groups)), key=lambda i: (-(exact[i] - floors[i]), i))
    for i in order[: max(0, total - sum(floors))]:
        floors[i] += 1
    return [g.model_copy(update={"gpu_hours": _q(g.gpu_hours * factor), "cents": c,
                                 "effective_gpu_hours": _q(g.effective_gpu_hours * factor),
                                 "unpriced_gpu_hours": _q(g.unpriced_gpu_hours * factor)})
            for g, c in zip(groups, floors, strict=True)]


def spend_of(tallies: Iterable[AllocationTally], *, limit: int = MAX_SPEND_GROUPS) -> SpendOfPeriod:
    """Pure: the period's allocation ledger from the store's hourly tallies (each hour × its factor)."""
    funnels: dict[str, FunnelFigures] = {}
    teams: list[SpendGroup] = []
    namespaces: list[SpendGroup] = []
    hours = scans = 0
    observed = ZERO
    for t in tallies:
        f = t.factor
        hours += 1
        scans += t.scans
        observed += min(Decimal(1), Decimal(t.window_s) / HOUR_S)
        funnels[t.cluster] = funnels.get(t.cluster, FunnelFigures()).plus(t.allocation.funnel, f)
        teams += scaled(t.allocation.by_team, f)
        namespaces += scaled(t.allocation.by_namespace, f)
    return SpendOfPeriod(funnel=tuple(sorted(funnels.items())), by_team=fold(teams, limit),
                         by_namespace=fold(namespaces, limit), hours=hours, observed_hours=_q(observed), scans=scans)


__all__ = [
    "MAX_GROUP_NAME",
    "MAX_SPEND_GROUPS",
    "OTHER",
    "UNHELD",
    "AllocationTally",
    "FunnelFigures",
    "ScanAllocation",
    "SpendGroup",
    "SpendOfPeriod",
    "add_allocation",
    "fold",
    "scaled",
    "spend_of",
]
