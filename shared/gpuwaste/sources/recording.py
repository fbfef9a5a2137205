"""Adapter: recordings (exposition/OpenMetrics telemetry + `kubectl get -o json` cluster state) → scan inputs.

A recording is what `gpuwaste record` writes and what the demo, the tests and bug reports use: a
directory holding `telemetry.om` (OpenMetrics, second timestamps) or `telemetry.prom` (text
exposition, millisecond timestamps), `cluster.json` (a `kubectl get pods,nodes -A -o json` List), and
an optional `recording.json` (cluster name, evaluation time, window). Single files work too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from gpuwaste.errors import InputFormatError
from gpuwaste.models.cluster import ClusterState
from gpuwaste.models.telemetry import TelemetryWindow
from gpuwaste.sources.dcgm import TelemetryLabels
from gpuwaste.sources.exposition import ParsedExposition, parse_exposition
from gpuwaste.sources.k8s_objects import ClusterReadSettings, cluster_state_from_objects
from gpuwaste.sources.limits import RecordingLimits, check_series, read_recording
from gpuwaste.sources.metrics_plan import SeriesSummary, assemble, spec_for, summarise_samples
from gpuwaste.sources.prom_api_json import looks_like_api_json, parse_api_json
from gpuwaste.sources.window import window_stats

TELEMETRY_NAMES = ("telemetry.om", "telemetry.om.gz", "telemetry.prom", "telemetry.prom.gz", "telemetry.txt", "metrics.prom", "metrics.om",
                   "telemetry.json", "telemetry.json.gz")
CLUSTER_NAMES = ("cluster.json",)
META_NAME = "recording.json"


class RecordingMeta(BaseModel):
    """`recording.json`: what a recording holds.

    Attributes:
        eval_time: end of the recorded window (UTC); scans default to it.
        window_s: the recorded window length (seconds).
        scrape_interval_s: seconds between samples.
    """

    cluster: str = "recording"
    eval_time: datetime | None = None
    window_s: int | None = Field(None, gt=0)
    scrape_interval_s: float = Field(30.0, gt=0)
    format: Literal["auto", "text", "openmetrics"] = "auto"
    generator: dict[str, Any] = Field(default_factory=dict)


def _is_pod_metric(name: str) -> bool:
    return name.startswith(("vllm:", "tgi_", "nv_inference_", "container_cpu_", "kube_pod_"))


def _wanted(name: str) -> bool:
    return name.startswith(("DCGM_", "dcgm_")) or _is_pod_metric(name)


def find_in(path: Path, names: tuple[str, ...]) -> Path | None:
    """The first of `names` inside directory `path`, or None."""
    for n in names:
        p = path / n
        if p.exists():
            return p
    return None


def load_meta(path: Path) -> RecordingMeta:
    """Read `recording.json` from a recording directory (defaults when absent).

    Raises:
        InputFormatError: when the file is not valid JSON or does not match `RecordingMeta`.
    """
    p = path / META_NAME if path.is_dir() else path.parent / META_NAME
    if not p.exists():
        return RecordingMeta()
    try:
        return RecordingMeta.model_validate_json(p.read_bytes())
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors(include_url=False)
        )
        raise InputFormatError(f"invalid recording metadata: {problems}", source=str(p)) from exc
    except OSError as exc:
        raise InputFormatError(f"cannot read recording metadata: {exc.strerror}", source=str(p)) from exc


def _canonical(name: str) -> str:
    """Map 1.x-compatibility and lower-cased metric names to DCGM field names."""
    if name.startswith("dcgm_fi_"):
        return name.upper()
    return name


class RecordingTelemetrySource:
    """Telemetry port over a recorded exposition file.

    Args:
        path: a recording directory or a telemetry file.
        fmt: "auto" detects OpenMetrics by its `# EOF` line; "text" means millisecond timestamps.
        default_time: timestamp given to samples without one (a bare /metrics scrape). When None:
            the metadata `eval_time`, else the scan's evaluation time when `telemetry(at=…)` is the
            first read, else the file's modification time (whole seconds).
    """

    def __init__(
        self,
        path: Path,
        *,
        cluster: str | None = None,
        fmt: Literal["auto", "text", "openmetrics"] | None = None,
        labels: TelemetryLabels | None = None,
        scrape_interval_s: float | None = None,
        default_time: datetime | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.meta = load_meta(self.path)
        self.cluster = cluster or self.meta.cluster
        self.fmt = fmt if fmt not in (None, "auto") else self.meta.format
        self.labels = labels or TelemetryLabels()
        self.scrape_interval_s = scrape_interval_s or self.meta.scrape_interval_s
        self.default_time = default_time
        self._progress = progress
        self._parsed: ParsedExposition | None = None

    @property
    def telemetry_file(self) -> Path:
        """The exposition file read.

        Raises:
            InputFormatError: when a directory holds no telemetry file.
        """
        if self.path.is_dir():
            found = find_in(self.path, TELEMETRY_NAMES)
            if found is None:
                raise InputFormatError(f"no telemetry file ({', '.join(TELEMETRY_NAMES)}) in the recording", source=str(self.path))
            return found
        return self.path

    def _default_time(self, at: datetime | None = None) -> datetime:
        """The time given to samples without a timestamp (see the class docstring)."""
        if self.default_time is not None:
            return self.default_time
        if self.meta.eval_time is not None:
            return self.meta.eval_time.astimezone(UTC)
        if at is not None:
            return at
        try:
            mtime = int(self.telemetry_file.stat().st_mtime)
        except OSError:
            mtime = 0
        return datetime.fromtimestamp(mtime, tz=UTC)

    def parsed(self, at: datetime | None = None) -> ParsedExposition:
        """The parsed exposition (parsed once).

        Raises:
            InputFormatError: with the file and line number of the first malformed line.
        """
        if self._parsed is None:
            f = self.telemetry_file
            if self._progress:
                self._progress(f"reading {f}")
            limits = RecordingLimits.from_env()
            data = read_recording(f, limits)  # size, NUL-byte and line-length limits, gunzipped
            self.default_time = self._default_time(at)
            default_ms = int(self.default_time.timestamp() * 1000)
            fmt = self.fmt
            if fmt == "auto" and f.name.endswith((".om", ".om.gz")):
                fmt = "openmetrics"  # the extension says so: a missing `# EOF` is then reported as truncation
            if fmt == "auto" and looks_like_api_json(data):  # a saved /api/v1/query(_range) answer
                self._parsed = parse_api_json(data, source=str(f), metric_filter=_wanted)
            else:
                self._parsed = parse_exposition(data, fmt=fmt, source=str(f), default_timestamp_ms=default_ms,
                                                metric_filter=_wanted)
            check_series(len(self._parsed.series), limits, source=str(f))
        return self._parsed

    def end_time(self) -> datetime:
        """The recording's evaluation time: metadata `eval_time`, else its newest sample."""
        if self.meta.eval_time is not None:
            return self.meta.eval_time.astimezone(UTC)
        newest = max((s.timestamps_ms[-1] for s in self.parsed().series.values() if s.timestamps_ms), default=None)
        if newest is None:
            if self.default_time is not None:
                return self.default_time
            raise InputFormatError("the recording holds no DCGM samples", source=str(self.telemetry_file))
        return datetime.fromtimestamp(newest / 1000, tz=UTC)

    def time_range(self) -> tuple[datetime, datetime] | None:
        """(oldest, newest) sample time over every series read, or None when the recording holds no samples.

        Raises:
            InputFormatError: when the telemetry file is malformed.
        """
        stamps = [(s.timestamps_ms[0], s.timestamps_ms[-1]) for s in self.parsed().series.values() if s.timestamps_ms]
        if not stamps:
            return None
        first = min(a for a, _ in stamps)
        last = max(b for _, b in stamps)
        return datetime.fromtimestamp(first / 1000, tz=UTC), datetime.fromtimestamp(last / 1000, tz=UTC)

    def undated(self) -> bool:
        """True for a bare scrape: no sample carries a timestamp (each got the default time) and no metadata dates it.

        Raises:
            InputFormatError: when the telemetry file is malformed.
        """
        parsed = self.parsed()
        if self.meta.eval_time is not None or not any(w.kind == "no_timestamp" for w in parsed.warnings):
            return False
        default_ms = int(self._default_time().timestamp() * 1000)
        return all(ts == default_ms for s in parsed.series.values() for ts in s.timestamps_ms)

    def dcgm_series(self) -> int:
        """How many DCGM series (any DCGM_* / dcgm_fi_* metric) the telemetry file holds.

        Raises:
            InputFormatError: when the telemetry file is malformed.
        """
        return sum(1 for s in self.parsed().series.values() if s.name.startswith(("DCGM_", "dcgm_")))

    def telemetry(self, *, at: datetime, window: timedelta) -> TelemetryWindow:
        """Summarise the recorded series over `[at − window, at]`."""
        parsed = self.parsed(at)
        eval_ms = int(at.timestamp() * 1000)
        window_ms = int(window.total_seconds() * 1000)
        recent_ms = min(600_000, window_ms)
        summaries: list[SeriesSummary] = []
        other_present: set[str] = set()
        for s in parsed.series.values():
            spec = spec_for(s.name)
            if spec is None:
                # DCGM fields outside the plan: reported as present (honest inventory), not summarised
                if s.name.startswith(("DCGM_", "dcgm_fi_")) and window_stats(
                    s.timestamps_ms, s.values, eval_ms=eval_ms, window_ms=window_ms, recent_ms=recent_ms
                ) is not None:
                    other_present.add(_canonical(s.name))
                continue
            one = summarise_samples(spec, s.labels, s.timestamps_ms, s.values, eval_ms=eval_ms, window_ms=window_ms, recent_ms=recent_ms)
            if one is not None:
                summaries.append(one)
        parts = assemble(summaries, self.labels)
        return TelemetryWindow(
            cluster=self.cluster,
            eval_time=at,
            window_s=int(window.total_seconds()),
            recent_s=recent_ms // 1000,
            scrape_interval_s=self.scrape_interval_s,
            gpus=parts.gpus,
            pods=parts.pods,
            metrics_present=parts.metrics_present | other_present,
            source=f"recording {self.telemetry_file}",
            single_instant=parts.single_instant,
        )


class RecordingClusterSource:
    """Cluster-state port over a recorded `kubectl get pods,nodes -A -o json` List."""

    def __init__(self, path: Path, *, cluster: str | None = None, settings: ClusterReadSettings | None = None) -> None:
        self.path = Path(path)
        self.cluster = cluster or load_meta(self.path).cluster
        self.settings = settings or ClusterReadSettings()

    @property
    def cluster_file(self) -> Path | None:
        """The cluster JSON read, or None when the recording has none (telemetry-only scrape)."""
        if self.path.is_dir():
            return find_in(self.path, CLUSTER_NAMES)
        if self.path.suffix != ".json":
            return None
        try:  # a saved Prometheus API answer is telemetry, not cluster state
            with self.path.open("rb") as fh:
                head = fh.read(4096)
        except OSError:
            return self.path
        return None if looks_like_api_json(head) else self.path

    def cluster_state(self, *, at: datetime) -> ClusterState:
        """Parse the List (an empty cluster when the recording holds only telemetry).

        Raises:
            InputFormatError: when the JSON is invalid or its objects are malformed.
        """
        f = self.cluster_file
        if f is None:
            return ClusterState(cluster=self.cluster, observed_at=at, source="none (telemetry only)")
        try:
            doc = json.loads(f.read_bytes())
        except json.JSONDecodeError as exc:
            raise InputFormatError(f"invalid JSON: {exc.msg}", source=str(f), line=exc.lineno) from exc
        except UnicodeDecodeError as exc:
            raise InputFormatError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", source=str(f)) from exc
        except RecursionError as exc:
            raise InputFormatError("JSON nested too deeply", source=str(f)) from exc
        except OSError as exc:
            raise InputFormatError(f"cannot read: {exc.strerror}", source=str(f)) from exc
        if isinstance(doc, dict) and isinstance(doc.get("items"), list):
            items = doc["items"]
        elif isinstance(doc, list):
            items = doc
        elif isinstance(doc, dict) and doc.get("kind") in ("Pod", "Node"):
            items = [doc]
        else:
            raise InputFormatError("expected a Kubernetes List (kubectl get pods,nodes -A -o json)", source=str(f))
        try:
            return cluster_state_from_objects(items, cluster=self.cluster, observed_at=at, settings=self.settings, source=f"recording {f}")
        except InputFormatError as exc:
            raise InputFormatError(str(exc), source=str(f)) from exc
