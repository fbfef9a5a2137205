"""Adapter: recordings (exposition/OpenMetrics telemetry + `kubectl get -o json` cluster state) → scan inputs.

A recording is what `gpuwaste record` writes and what the demo, the tests and bug reports use: a
directory holding `telemetry.om` (OpenMetrics, second timestamps) or `telemetry.prom` (text
exposition, millisecond timestamps), `cluster.json` (a `kubectl get pods,nodes -A -o json` List), and
an optional `recording.json` (cluster name, evaluation time, window). Single files work too.

A scan streams the file: each sample goes through a per-series accumulator (`sources.window`) and is
dropped, so memory follows the series count, not the sample count. Unreadable samples (non-numeric,
NaN/Inf, DCGM blanks, out of range for the unit) are counted with the file and line of the first one
(`TelemetryWindow.problems`); the sample spacing is inferred from the data.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from gpuwaste.errors import InputFormatError
from gpuwaste.files import open_regular, read_capped, recording_max_bytes
from gpuwaste.models.cluster import ClusterState
from gpuwaste.models.settings import ClusterReadSettings, TelemetryLabels
from gpuwaste.models.telemetry import MAX_WINDOW_S, MIN_WINDOW_S, BucketGrid, TelemetryWindow
from gpuwaste.sources.exposition import (
    ParsedExposition,
    RecordedSeries,
    sniff_format,
    stream_exposition,
)
from gpuwaste.sources.k8s_objects import cluster_state_from_objects
from gpuwaste.sources.limits import RecordingLimits, check_series, read_recording
from gpuwaste.sources.metrics_plan import (
    ALIAS_LABEL,
    MetricSpec,
    SeriesSummary,
    accumulator_for,
    alias_tag,
    assemble,
    spec_for,
    summary_from,
)
from gpuwaste.sources.prom_api_json import looks_like_api_json, parse_api_json
from gpuwaste.sources.window import RateAccumulator, WindowAccumulator

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


#: The DCGM field holding the last XID error of a GPU (read for presence and its value only).
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"


def _is_pod_metric(name: str) -> bool:
    return name.startswith(("vllm:", "tgi_", "nv_inference_", "container_cpu_", "kube_pod_", "kubernetes_io:container_accelerator_"))


def _wanted(name: str) -> bool:
    return name.startswith(("DCGM_", "dcgm_")) or _is_pod_metric(name)


def _telemetry_wanted(name: str) -> bool:
    """The series a telemetry scan reads: DCGM fields (plan or not: presence) and the plan's pod series — not the
    kube-state-metrics series, which the cluster-state source reads (keeping them would cost memory per series)."""
    return name.startswith(("DCGM_", "dcgm_")) or spec_for(name) is not None


def find_in(path: Path, names: tuple[str, ...]) -> Path | None:
    """The first of `names` inside directory `path`, or None."""
    for n in names:
        p = path / n
        if p.exists():
            return p
    return None


#: recording.json holds a few hundred bytes of metadata; anything beyond 1 MiB is not one.
META_MAX_BYTES = 1 << 20


def load_meta(path: Path) -> RecordingMeta:
    """Read `recording.json` from a recording directory (defaults when absent).

    Raises:
        InputFormatError: when the file is not valid JSON or does not match `RecordingMeta`.
    """
    p = path / META_NAME if path.is_dir() else path.parent / META_NAME
    if not p.exists():
        return RecordingMeta()
    try:
        return RecordingMeta.model_validate_json(read_capped(p, META_MAX_BYTES, what="recording metadata"))
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
        """The recording's index, read once in one streaming pass: every series with its first and last timestamps.

        No sample is kept (the series' `values` are empty): a time range, an "undated" check or a series count
        need none, and a 10,000-GPU recording stays in bounded memory. `telemetry()` reads the samples.

        Raises:
            InputFormatError: with the file and line number of the first malformed line.
        """
        if self._parsed is None:
            f = self.telemetry_file
            if self._progress:
                self._progress(f"reading {f}")
            limits = RecordingLimits.from_env()
            self.default_time = self._default_time(at)
            default_ms = int(self.default_time.timestamp() * 1000)
            if self._api_json():  # a saved /api/v1/query(_range) answer: JSON on one line, parsed in memory (size-limited)
                self._parsed = parse_api_json(read_recording(f, limits), source=str(f), metric_filter=_wanted)
            else:
                self._parsed = self._stream(_wanted, _ignore, None, default_ms, limits)
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

    def _open(self, *, sniff: bool = True) -> tuple[Any, Any, Literal["text", "openmetrics"]]:
        """(stream, raw file, format): the telemetry file opened for streaming (gunzipped when compressed); close both."""
        f = self.telemetry_file
        try:
            raw = open_regular(f, what="recording")  # closed by the caller; a FIFO or device is refused
            gz = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            stream: Any = gzip.open(raw) if gz else raw  # noqa: SIM115 - closed by the caller
            fmt = self.fmt
            if fmt == "auto" and f.name.endswith((".om", ".om.gz")):
                fmt = "openmetrics"
            if fmt == "auto" and sniff:
                head = stream.read(65536)
                if gz:
                    tail = head
                    for chunk in iter(lambda: stream.read(1 << 20), b""):
                        tail = chunk
                    stream.seek(0)
                else:
                    size = f.stat().st_size
                    raw.seek(max(0, size - 4096))
                    tail = raw.read()
                    raw.seek(0)
                fmt = sniff_format(head, tail[-4096:])
        except OSError as exc:
            raise InputFormatError(f"cannot read recording: {exc.strerror or exc}", source=str(f)) from exc
        except (EOFError, gzip.BadGzipFile) as exc:
            raise InputFormatError(f"corrupt gzip file: {exc}", source=str(f)) from exc
        return stream, raw, fmt  # type: ignore[return-value]

    def _api_json(self) -> bool:
        """True when the telemetry file is a saved Prometheus API answer (JSON) rather than an exposition."""
        if self.fmt != "auto":
            return False
        stream, raw, _fmt = self._open(sniff=False)
        try:
            return looks_like_api_json(stream.read(4096))
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise InputFormatError(f"cannot read recording: {exc}", source=str(self.telemetry_file)) from exc
        finally:
            stream.close()
            raw.close()

    def _stream(self, wanted: Any, on_sample: Any, on_unreadable: Any, default_ms: int, limits: RecordingLimits) -> ParsedExposition:
        """One streaming pass over the exposition, within the recording limits (size, NUL bytes, line length)."""
        f = self.telemetry_file
        stream, raw, fmt = self._open()
        try:
            return stream_exposition(_limited(stream, limits, str(f)), fmt=fmt, source=str(f), default_timestamp_ms=default_ms,
                                     metric_filter=wanted, on_sample=on_sample, on_unreadable=on_unreadable)
        except OSError as exc:
            raise InputFormatError(f"cannot read recording: {exc.strerror or exc}", source=str(f)) from exc
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise InputFormatError(f"corrupt gzip file: {exc}", source=str(f)) from exc
        finally:
            stream.close()
            raw.close()

    def telemetry(self, *, at: datetime, window: timedelta) -> TelemetryWindow:
        """Summarise the recorded series over `(at − window, at]`, time-resolved where the plan says, in one streaming pass.

        Raises:
            InputFormatError: a malformed telemetry file (file and line), a window outside 10 minutes – 7
                days, or a window that starts before the recording's first sample by more than a bucket.
        """
        window_s = int(window.total_seconds())
        if not MIN_WINDOW_S <= window_s <= MAX_WINDOW_S:
            raise InputFormatError(f"window {window_s} s: a scan window must be between 10 minutes and 7 days", source=str(self.path))
        grid = BucketGrid(at, window_s)
        eval_ms = round(at.timestamp() * 1000)
        window_ms = window_s * 1000
        accs: dict[int, tuple[MetricSpec | None, Any]] = {}
        seen: list[RecordedSeries] = []  # every series met, also one whose samples were all unreadable
        other_present: set[str] = set()

        def acc_for(series: RecordedSeries) -> tuple[MetricSpec | None, Any]:
            spec = spec_for(series.name)
            acc: Any = WindowAccumulator(eval_ms, window_ms, None) if spec is None else accumulator_for(spec, grid)
            entry = accs[id(series)] = (spec, acc)  # DCGM fields outside the plan: presence only
            seen.append(series)
            return entry

        def on_sample(series: RecordedSeries, ts: int, value: float, line: int) -> None:
            entry = accs.get(id(series)) or acc_for(series)
            entry[1].add(ts, value, line)

        def on_unreadable(series: RecordedSeries, ts: int | None, line: int, reason: str) -> None:
            entry = accs.get(id(series)) or acc_for(series)
            if not isinstance(entry[1], RateAccumulator):
                entry[1].add_unreadable(ts, line, reason)

        if self.default_time is None:
            self.default_time = self._default_time(at)
        default_ms = int(self.default_time.timestamp() * 1000)
        f = self.telemetry_file
        if self._progress:
            self._progress(f"reading {f}")
        limits = RecordingLimits.from_env()
        if self._api_json():
            parsed = self.parsed(at)
            for series in parsed.series.values():
                for ts, value in zip(series.timestamps_ms, series.values, strict=True):
                    on_sample(series, ts, value, 0)
        else:
            parsed = self._stream(_telemetry_wanted, on_sample, on_unreadable, default_ms, limits)
            check_series(len(parsed.series), limits, source=str(f))
        summaries: list[SeriesSummary] = []
        other_uuids: set[str] = set()  # GPUs on DCGM fields outside the plan (presence only)
        other_hosts: dict[str, str] = {}  # ... and the exporter's hostname label on their series
        xids: dict[str, int] = {}  # GPU UUID → last non-zero XID error code
        other_single = True
        for series in seen:
            entry = accs.get(id(series))
            if entry is None:
                continue
            spec, acc = entry
            if spec is None:
                if acc.samples() and series.name.startswith(("DCGM_", "dcgm_fi_")):
                    other_present.add(_canonical(series.name))
                    uuid = next((u for k in self.labels.uuid_labels if (u := series.labels.get(k))), None)
                    if uuid:
                        other_uuids.add(uuid)
                        if host := next((h for k in self.labels.hostname_labels if (h := series.labels.get(k))), ""):
                            other_hosts.setdefault(uuid, host)
                        code = acc.last if acc.last else acc.max
                        if _canonical(series.name) == XID_FIELD and code and math.isfinite(code) and code > 0:
                            xids[uuid] = int(code)
                    other_single = other_single and acc.samples() <= 1
                continue
            tag = alias_tag(spec, series.name)  # the field under another name: its own series, as the live plan reads it
            one = summary_from(spec, series.labels if tag is None else {**series.labels, ALIAS_LABEL: tag}, acc, str(f))
            if one is not None:
                summaries.append(one)
        self._check_span(parsed, at, grid)
        parts = assemble(summaries, self.labels, grid=grid)
        other_gpus = tuple(sorted(other_uuids - {g.device.uuid for g in parts.gpus}))
        return TelemetryWindow(
            cluster=self.cluster,
            eval_time=at,
            window_s=window_s,
            recent_s=min(grid.recent_s, window_s),
            scrape_interval_s=parts.spacing_s or self.scrape_interval_s,
            scrape_interval_inferred=parts.spacing_s is not None,
            gpus=parts.gpus,
            pods=parts.pods,
            metrics_present=parts.metrics_present | other_present,
            source=f"recording {self.telemetry_file}",
            single_instant=parts.single_instant or (not parts.gpus and bool(other_gpus) and other_single),
            bucket_s=grid.bucket_s,
            problems=parts.problems,
            plan="recording",
            other_gpus=other_gpus,
            other_gpu_hosts={u: other_hosts[u] for u in other_gpus if u in other_hosts},
            xid_errors=xids,
        )

    def _check_span(self, parsed: ParsedExposition, at: datetime, grid: BucketGrid) -> None:
        """Refuse a window the recording cannot fill: it holds less than half of it (a recording with `recording.json`).

        A window that is only partly held (a scan just after the recording started, a short field-guide
        input) is scanned: the missing time reads as partial coverage, never as idle (the CLI warns).
        """
        firsts = [s.timestamps_ms[0] for s in parsed.series.values() if len(s.timestamps_ms) > 1]
        if not firsts or self.meta.eval_time is None:
            return  # a bare file without recording.json is scanned as it is
        first = datetime.fromtimestamp(min(firsts) / 1000, tz=UTC)
        if self.meta.window_s is not None:  # what the recording says it holds counts too (series may start late)
            first = min(first, self.meta.eval_time.astimezone(UTC) - timedelta(seconds=self.meta.window_s))
        start = at - timedelta(seconds=grid.window_s)
        held = (at - first).total_seconds()
        if first > start and held < grid.window_s / 2:
            raise InputFormatError(
                f"the window starts {start:%Y-%m-%dT%H:%M:%SZ} but the recording begins at {first:%Y-%m-%dT%H:%M:%SZ}: it holds "
                f"{max(0, int(held)) // 60} min of the {grid.window_s // 60}-min window; scan a shorter window (--window "
                f"{max(10, int(held) // 60)}m) or a later time",
                source=str(self.telemetry_file),
            )


def _limited(stream: Any, limits: RecordingLimits, source: str) -> Iterator[bytes]:
    """The stream's lines, refusing what `sources.limits` refuses: more than the size limit, a NUL byte, an endless line.

    Raises:
        InputFormatError: naming the limit and how to raise it.
    """
    size = 0
    cap = limits.max_line_bytes + 2  # a line of the limit plus its newline (and a CR) fits; one byte more is refused
    lineno = 0
    while True:
        line = stream.readline(cap)  # never reads past the cap: a line without a newline is not read whole
        if not line:
            return
        lineno += 1
        size += len(line)
        if size > limits.max_bytes:
            raise InputFormatError(f"grows to more than {limits.max_bytes >> 20} MiB (the limit); if the recording is genuine, "
                                   "raise it with GPUWASTE_RECORDING_MAX_MB=<MiB>", source=source, line=lineno)
        if len(line) > limits.max_line_bytes + 1:
            raise InputFormatError(f"a line longer than {limits.max_line_bytes >> 10} KiB (the limit); if genuine, raise it with "
                                   "GPUWASTE_RECORDING_MAX_LINE_KB=<KiB>", source=source, line=lineno)
        if b"\x00" in line:
            raise InputFormatError("NUL byte: not a text exposition (a binary or corrupt file)", source=source, line=lineno)
        yield line


def _ignore(_series: RecordedSeries, _ts: int, _value: float, _line: int) -> None:
    """A sample sink that keeps nothing (the index pass)."""


class RecordingClusterSource:
    """Cluster-state port over a recorded `kubectl get pods,nodes -A -o json` List."""

    def __init__(self, path: Path, *, cluster: str | None = None, settings: ClusterReadSettings | None = None,
                 explicit: bool = False) -> None:
        """`explicit`: `path` was named as the cluster file (--cluster-json): it is read whatever its name, and a file
        that is not a kubectl List is refused with its reason instead of silently scanning without cluster state."""
        self.path = Path(path)
        self.cluster = cluster or load_meta(self.path).cluster
        self.settings = settings or ClusterReadSettings()
        self.explicit = explicit

    @property
    def cluster_file(self) -> Path | None:
        """The cluster JSON read, or None when the recording has none (telemetry-only scrape)."""
        if self.explicit:
            return self.path
        if self.path.is_dir():
            return find_in(self.path, CLUSTER_NAMES)
        if self.path.suffix != ".json":
            return None
        try:  # a saved Prometheus API answer is telemetry, not cluster state
            with open_regular(self.path, what="cluster JSON") as fh:
                head = fh.read(4096)
        except InputFormatError:
            return self.path  # refused with its reason by cluster_state
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
            doc = json.loads(read_capped(f, recording_max_bytes(), what="cluster JSON",
                                         hint="if it is genuine, raise it with GPUWASTE_RECORDING_MAX_MB=<MiB>"))
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
