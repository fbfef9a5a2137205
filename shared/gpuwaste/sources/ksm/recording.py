"""KSM from a recording.

The last sample of each recorded KSM series in the window, and `KsmRecordingSource` over the KSM series inside a
recording.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from gpuwaste.models.cluster import ClusterState
from gpuwaste.models.settings import ClusterReadSettings
from gpuwaste.sources.ksm.facts import KsmSample
from gpuwaste.sources.ksm.queries import object_labels
from gpuwaste.sources.ksm.state import cluster_state_from_ksm, family_note
from gpuwaste.sources.ksm.vocabulary import _KSM_SET, _STALE_FACTOR, POD_INFO, RESOURCE_METRICS


# -- recordings -------------------------------------------------------------------------------------------------
def is_ksm_metric(name: str) -> bool:
    """True for the KSM series this source reads."""
    return name in _KSM_SET


def samples_from_series(series: Iterable[Any], *, at: datetime, window: timedelta) -> list[KsmSample]:
    """The last sample of each recorded KSM series in `[at − window, at]` (`RecordedSeries`-like objects).

    A series whose last sample is older than the newest KSM sample by more than 1.5 of its own spacing was no
    longer exported: its `last_ms` says when it was last seen (a pod deleted mid-window).
    """
    at_ms = int(at.timestamp() * 1000)
    start_ms = at_ms - int(window.total_seconds() * 1000)
    picked: list[tuple[Any, int, float, int]] = []
    newest = None
    for s in series:
        if s.name not in _KSM_SET:
            continue
        ts = s.timestamps_ms
        j = _last_index_at_or_before(ts, at_ms)
        if j < 0 or ts[j] < start_ms:
            continue
        spacing = (ts[j] - ts[j - 1]) if j > 0 else 60_000
        picked.append((s, ts[j], s.values[j], spacing))
        newest = ts[j] if newest is None or ts[j] > newest else newest
    out = []
    for s, last, value, spacing in picked:
        gone = newest is not None and newest - last > _STALE_FACTOR * max(spacing, 1000)
        out.append(KsmSample(s.name, object_labels(s.labels)[0], value, last if gone else None))
    return out


def _last_index_at_or_before(ts: Sequence[int], at_ms: int) -> int:
    lo, hi = 0, len(ts)
    while lo < hi:
        mid = (lo + hi) // 2
        if ts[mid] <= at_ms:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


class KsmRecordingSource:
    """`ClusterStateSource` over the KSM series inside a recording (the same file or directory as the DCGM series).

    Args:
        path: a recording directory or a telemetry file.
        window: how far back pods are looked for (pods that finished or were deleted in the window are kept).
    """

    def __init__(self, path: Path, *, cluster: str | None = None, settings: ClusterReadSettings | None = None,
                 window: timedelta = timedelta(hours=1)) -> None:
        from gpuwaste.sources.recording import RecordingTelemetrySource  # noqa: PLC0415 - the telemetry file rules

        self._tel = RecordingTelemetrySource(path, cluster=cluster)
        self.path = Path(path)
        self.cluster = cluster or self._tel.cluster
        self.settings = settings or ClusterReadSettings()
        self.window = window
        self._series: list[Any] | None = None
        self._dated_ms: int | None = None  # the time given to samples without a timestamp when parsed (None: all dated)

    @property
    def cluster_file(self) -> Path:
        """The file the cluster state is read from (the telemetry file: the KSM series sit next to the DCGM ones)."""
        return self._tel.telemetry_file

    def series(self) -> list[Any]:
        """The KSM series of the telemetry file (parsed once).

        Raises:
            InputFormatError: the telemetry file is malformed.
        """
        if self._series is None:
            self._series = self._parse()
        return self._series

    def _parse(self, at: datetime | None = None) -> list[Any]:
        from gpuwaste.sources.exposition import parse_exposition  # noqa: PLC0415
        from gpuwaste.sources.limits import RecordingLimits, read_recording  # noqa: PLC0415
        from gpuwaste.sources.prom_api_json import looks_like_api_json, parse_api_json  # noqa: PLC0415

        f = self._tel.telemetry_file
        data = read_recording(f, RecordingLimits.from_env())  # the same size/NUL/line limits as the telemetry parse
        fmt = self._tel.fmt
        if fmt == "auto" and f.name.endswith((".om", ".om.gz")):
            fmt = "openmetrics"
        if fmt == "auto" and looks_like_api_json(data):  # a saved /api/v1/query(_range) answer
            return list(parse_api_json(data, source=str(f), metric_filter=is_ksm_metric).series.values())
        default_ms = int(self._tel._default_time(at).timestamp() * 1000)
        parsed = parse_exposition(data, fmt=fmt, source=str(f), default_timestamp_ms=default_ms, metric_filter=is_ksm_metric)
        self._dated_ms = default_ms if any(w.kind == "no_timestamp" for w in parsed.warnings) else None
        return list(parsed.series.values())

    def has_ksm(self) -> bool:
        """True when the recording holds KSM pod series (kube_pod_info or GPU request series)."""
        return any(s.name in (POD_INFO, *RESOURCE_METRICS) for s in self.series())

    def cluster_state(self, *, at: datetime) -> ClusterState:
        """The cluster as the recorded KSM series show it at `at` (history over `window`).

        Raises:
            InputFormatError: the telemetry file is malformed.
        """
        series = self.series()
        if self._dated_ms is not None and self._dated_ms != int(self._tel._default_time(at).timestamp() * 1000):
            # samples without a timestamp were dated before the evaluation time was known (the file's mtime): an undated
            # file is dated by `at` (--at), the KSM series as the DCGM ones (issue 21 §9)
            series = self._series = self._parse(at)
        samples = samples_from_series(series, at=at, window=self.window)
        exported = sum(1 for s in series if s.name in _KSM_SET and object_labels(s.labels)[1])
        return cluster_state_from_ksm(samples, cluster=self.cluster, observed_at=at, settings=self.settings,
                                      source=f"kube-state-metrics series in recording {self._tel.telemetry_file}{family_note(exported)}")
