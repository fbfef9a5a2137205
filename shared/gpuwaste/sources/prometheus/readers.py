"""The Prometheus result readers.

The buckets of time-resolved metrics, fed one result item at a time while an answer is decoded, and the routing of a
combined answer to them.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpuwaste.models.telemetry import (
    READABLE_RANGE,
    Bucket,
    BucketGrid,
    stats_from_columns,
)
from gpuwaste.sources.metrics_plan import (
    MetricSpec,
    SeriesSummary,
    bucketed_stats,
)
from gpuwaste.sources.promql import (
    METRIC_LABEL,
    RULE_INTERVAL_S,
    STAT_LABEL,
)
from gpuwaste.sources.window import bucket_problem

if TYPE_CHECKING:
    from gpuwaste.sources.prometheus.source import PrometheusGpuMetricsSource


class _ItemReader:
    """Buckets of one time-resolved metric, fed one result item at a time while its answer is decoded.

    A `query_range` answer has one point per bucket end; recorded 5-minute buckets are added up into the
    scan's buckets (counts and sums add, max of maxima). The hot loop of a fleet-scale scan: every series
    shares the same timestamps, so each timestamp's bucket index is computed once; NaN/±Inf and
    out-of-range values are checked per bucket afterwards.
    """

    def __init__(self, source: PrometheusGpuMetricsSource, spec: MetricSpec, grid: BucketGrid, *, recorded: bool,
                 drop: Sequence[str] = ()) -> None:
        self.source = source
        self.drop = tuple(drop)
        self.spec = spec
        self.grid = grid
        self.recorded = recorded
        self.n = len(grid.ends)
        self.step_ms = grid.bucket_s * 1000
        self.start_ms = round(grid.eval_time.timestamp() * 1000) - self.n * self.step_ms
        self.index: dict[Any, int] = {}
        self.groups: dict[frozenset[tuple[str, str]], list[list[float]]] = {}
        self.suffix = len(f"{RULE_INTERVAL_S // 60}m")
        self.lock = threading.Lock()

    def _target(self, labels: dict[str, str], values: Any, stat: str | None) -> tuple[frozenset[tuple[str, str]], int, list[float]] | None:
        """A result series' key (its labels, consumed), statistic column and bucket row; None when the series is ignored."""
        name = labels.pop("__name__", "")
        stat = stat or labels.pop(STAT_LABEL, "") or name.rsplit(":", 1)[-1][: -self.suffix]
        col = _COLS.get(stat)
        if col is None or not isinstance(values, list):
            return None
        for label in self.drop:  # series differing only in labels nobody reads are added up here, as `sum/max without` would
            labels.pop(label, None)
        key = frozenset(labels.items())
        with self.lock:  # the three single-statistic answers of one field may be decoded at the same time
            acc = self.groups.get(key)
            if acc is None:
                keys = self.source._keys_cache
                if keys is not None:
                    key = keys.setdefault(key, key)
                n = self.n
                acc = self.groups[key] = [[0.0] * n, [0.0] * n, [-math.inf] * n]
                self.source._guard(self.spec, len(self.groups))
        return key, col, acc[col]

    def item(self, labels: dict[str, str], values: Any, stat: str | None = None) -> None:
        """One result series: its labels (consumed), its `[t, "v"]` points and, for an untagged answer, its statistic."""
        target = self._target(labels, values, stat)
        if target is None:
            return
        _key, col, row = target
        get = self.index.get
        # several series of one group (recorded buckets, dropped labels) add up: counts and sums add, max of maxima
        if col == 2:
            for t, v in values:
                k = get(t)
                if k is None:
                    k = self._slot(t)
                if k >= 0:
                    x = float(v)
                    if x > row[k] or x != x:
                        row[k] = x
        else:
            for t, v in values:
                k = get(t)
                if k is None:
                    k = self._slot(t)
                if k >= 0:
                    row[k] += float(v)

    def _slot(self, t: Any) -> int:
        """The bucket index of a point's timestamp (seconds), −1 outside the window; computed once per timestamp."""
        k = (round(float(t) * 1000) - self.start_ms - 1) // self.step_ms
        k = k if 0 <= k < self.n else -1
        self.index[t] = k
        return k

    def summaries(self) -> list[SeriesSummary]:
        """One summary per series, its bucket statistics checked (an unreadable bucket is emptied and counted)."""
        spec, grid = self.spec, self.grid
        out: list[SeriesSummary] = []
        lo, hi = READABLE_RANGE.get(spec.unit or "", (-math.inf, math.inf))
        shared_labels = self.source._shared_labels
        for key, (counts, totals, maxes) in self.groups.items():
            filled = False
            for c, t, m in zip(counts, totals, maxes, strict=True):
                if c > 0:
                    if not (lo <= m <= hi and t >= 0 and t - t == 0.0):  # NaN fails every comparison
                        break
                    filled = True
            else:  # every bucket readable: the common case, in one pass
                if filled:
                    stats = stats_from_columns(grid, counts, totals, maxes)
                    out.append(SeriesSummary(spec, shared_labels(key), stats.count, stats, None))
                continue
            out.extend(self._checked(key, counts, totals, maxes))
        return out

    def _checked(self, key: frozenset[tuple[str, str]], counts: list[float], totals: list[float], maxes: list[float]) -> list[SeriesSummary]:
        """The summary of a series with an unreadable bucket: that bucket is emptied and its samples counted."""
        spec, grid = self.spec, self.grid
        buckets: list[Bucket] = []
        unreadable = 0
        problem: str | None = None
        for e, c, t, m in zip(grid.ends, counts, totals, maxes, strict=True):
            why = bucket_problem(spec.unit, c, t, m) if c > 0 else None
            if c <= 0 or why is not None:
                if why is not None:
                    unreadable += int(c)
                    problem = problem or why
                buckets.append(Bucket(e, 0, 0.0, 0.0))
            else:
                buckets.append(Bucket(e, int(c), t, m))
        if not unreadable and not any(b[1] for b in buckets):
            return []
        stats = bucketed_stats(buckets, grid, unreadable=unreadable)
        return [SeriesSummary(spec, self.source._shared_labels(key), stats.count + unreadable, stats, ("", problem) if problem else None)]


_COLS = {"count": 0, "sum": 1, "max": 2}
_Key = frozenset[tuple[str, str]]


class _RecordedReader(_ItemReader):
    """The recorded 5-minute buckets of one field (rules plan): `_ItemReader`, and the counts the rules left unrecorded.

    Rules version 2 record a field's count only where it differs from the reference field's (`promql.COUNT_REFERENCE`,
    recorded in full; version 1 recorded every count). The rules run every 5 minutes, so each recorded sample of a
    series falls in its own 5-minute slot of the window: per series the slots holding a count and those holding a sum
    are kept as bit masks (and, for the reference field, its count per slot), and `resolve` adds the reference's count
    for each slot where a sum came without its count. A slot whose count cannot be told (no reference count there, or
    two samples in one slot) empties its bucket: no data, never idle.
    """

    def __init__(self, source: PrometheusGpuMetricsSource, spec: MetricSpec, grid: BucketGrid, *, reference: bool) -> None:
        super().__init__(source, spec, grid, recorded=True)
        self.reference = reference
        self.slot_ms = RULE_INTERVAL_S * 1000
        self.slots = grid.window_s // RULE_INTERVAL_S
        self.per_bucket = max(1, grid.bucket_s // RULE_INTERVAL_S)
        #: timestamp → its 5-minute slot of the window (−1 outside); bucket = slot // per_bucket (the buckets tile the window)
        self.slot_of: dict[Any, int] = {}
        #: key → [slots with a count, slots with a sum, slots seen twice in one series]
        self.masks: dict[_Key, list[int]] = {}
        #: reference field only: key → (the first count, {slot: count} where another count was recorded)
        self.counts: dict[_Key, tuple[float, dict[int, float]]] = {}

    def item(self, labels: dict[str, str], values: Any, stat: str | None = None) -> None:
        """One recorded series (see `_ItemReader.item`), its count or sum slots noted."""
        target = self._target(labels, values, stat)
        if target is None:
            return
        key, col, row = target
        get = self.slot_of.get
        per = self.per_bucket
        if col == 2:
            for t, v in values:
                j = get(t)
                if j is None:
                    j = self._slot_index(t)
                if j >= 0:
                    k = j // per
                    x = float(v)
                    if x > row[k] or x != x:
                        row[k] = x
            return
        mask = 0
        dup = 0
        keep = self.reference and col == 0
        first: float | None = None
        other: dict[int, float] = {}
        for t, v in values:
            j = get(t)
            if j is None:
                j = self._slot_index(t)
            if j < 0:
                continue
            bit = 1 << j
            if mask & bit:
                dup |= bit
            mask |= bit
            x = float(v)
            row[j // per] += x
            if keep:
                if first is None:
                    first = x
                elif x != first:
                    other[j] = x
        with self.lock:
            masks = self.masks.setdefault(key, [0, 0, 0])
            dup |= masks[col] & mask
            masks[col] |= mask
            masks[2] |= dup
            if keep and first is not None:
                self.counts[key] = (first, other)

    def _slot_index(self, t: Any) -> int:
        """The 5-minute slot of a recorded sample's timestamp (seconds) in the window, −1 outside; computed once per timestamp."""
        j = (round(float(t) * 1000) - self.start_ms - 1) // self.slot_ms
        j = j if 0 <= j < self.slots else -1
        self.slot_of[t] = j
        return j

    def resolve(self, reference: _RecordedReader | None) -> None:
        """Add the reference field's count where a sum came without its own count (call once every answer is in)."""
        if reference is self:
            return
        ref_groups = reference.groups if reference is not None else {}
        ref_masks = reference.masks if reference is not None else {}
        ref_counts = reference.counts if reference is not None else {}
        per = self.per_bucket
        for key, (have, summed, dup) in self.masks.items():
            need = summed & ~have
            if not need:
                continue
            counts = self.groups[key][0]
            ref_mask = ref_masks.get(key, (0, 0, 0))
            bad = need & (dup | ref_mask[2])
            if need == ref_mask[0] and not bad:  # the usual case: the reference counted every slot this field summed
                for k, c in enumerate(ref_groups[key][0]):
                    counts[k] += c
                continue
            first, other = ref_counts.get(key, (0.0, {}))
            unresolved: set[int] = set()
            while need:
                low = need & -need
                need ^= low
                j = low.bit_length() - 1
                if ref_mask[0] & low and not bad & low:
                    counts[j // per] += other.get(j, first)
                else:
                    unresolved.add(j // per)
            for k in unresolved:  # no count for part of this bucket's samples: the bucket holds no data
                counts[k] = 0.0


class _StatFeed:
    """Feeds one single-statistic answer (`PlannedQuery.stat`) into the field's shared `_ItemReader`."""

    def __init__(self, reader: _ItemReader, stat: str) -> None:
        self.reader = reader
        self.stat = stat

    def item(self, labels: dict[str, str], values: Any) -> None:
        """One result series (see `_ItemReader.item`)."""
        self.reader.item(labels, values, self.stat)


class _Router:
    """Hands each series of a query that reads several plan entries to the reader of its entry (`METRIC_LABEL`)."""

    def __init__(self, readers: dict[str, _ItemReader]) -> None:
        self.readers = readers

    def item(self, labels: dict[str, str], values: Any) -> None:
        """One result series; a series naming no entry of the query is ignored."""
        reader = self.readers.get(labels.pop(METRIC_LABEL, ""))
        if reader is not None:
            reader.item(labels, values)
