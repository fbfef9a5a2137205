"""Adapter helper: raw samples read from Prometheus in range-selector chunks, gathered into recorded series.

`gpuwaste record` reads the DCGM series (`sources.prometheus`) and the kube-state-metrics series (`sources.ksm`)
the same way: instant queries of `selector[step]` at consecutive chunk ends, each answer a matrix of raw samples.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from gpuwaste.sources.exposition import RecordedSeries

SeriesSamples = dict[tuple[str, tuple[tuple[str, str], ...]], dict[int, float]]


def chunk_ends(at: datetime, range_s: int, chunk_s: int) -> list[tuple[datetime, int]]:
    """(end, seconds) of the chunks that tile `(at − range_s, at]` backwards, each at most `chunk_s` long."""
    ends: list[tuple[datetime, int]] = []
    remaining, end = int(range_s), at
    while remaining > 0:
        step = min(chunk_s, remaining)
        ends.append((end, step))
        end -= timedelta(seconds=step)
        remaining -= step
    return ends


def add_matrix(series: SeriesSamples, result: list[dict[str, Any]], *, default_name: str = "") -> None:
    """Fold one matrix answer into `series` (ms timestamp → value; a sample returned twice is kept once)."""
    for item in result:
        labels = dict(item.get("metric", {}))
        name = labels.pop("__name__", default_name)
        samples = series.setdefault((name, tuple(sorted(labels.items()))), {})
        for ts, value in item.get("values", []):
            samples[round(float(ts) * 1000)] = float(value)


def recorded(series: SeriesSamples) -> list[RecordedSeries]:
    """The gathered samples as recorded series, time-ordered, sorted by name and labels."""
    out = []
    for (name, pairs), samples in series.items():
        ordered = sorted(samples.items())
        out.append(RecordedSeries(name, dict(pairs), [t for t, _ in ordered], [v for _, v in ordered]))
    out.sort(key=lambda s: (s.name, tuple(sorted(s.labels.items()))))
    return out
