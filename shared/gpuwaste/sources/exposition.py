"""Adapter helper: Prometheus text / OpenMetrics exposition ↔ recorded series.

Reads recordings of dcgm-exporter, kube-state-metrics and vLLM ``/metrics`` output, in either

* the Prometheus text exposition format (optional timestamps are **integer milliseconds**), or
* OpenMetrics (optional timestamps are **float seconds**; the last line must be ``# EOF``),

into :class:`RecordedSeries` (parallel lists of millisecond timestamps and float values, one object per
distinct metric name + label set), and writes series back out in either format. The OpenMetrics writer
produces exactly what ``promtool tsdb create-blocks-from openmetrics`` accepts.

The parser is strict about structure and forgiving about values, as a scraper must be:

* structurally broken lines (bad metric or label name, unterminated label value, ``{`` without ``}``,
  missing value, bad timestamp, data after ``# EOF``) raise :class:`~gpuwaste.errors.InputFormatError`
  naming the source and the 1-based line;
* values that cannot be used are skipped with a :class:`ParseWarning` instead of failing the whole
  recording: non-numeric values (``DCGM_FI_DEV_NAME{...} Tesla T4``), DCGM blank sentinels
  (``9223372036854775794``), ``NaN``/``±Inf``, duplicate and out-of-order samples, and label values that
  are not valid UTF-8 (decoded with ``errors="replace"``).

Speed: the common path uses ``str.find``/``str.split`` and a per-line cache keyed by the raw series text
(``name{labels}``), so a label set is parsed once per series, not once per sample; a character-level
scanner runs only for label values with backslash escapes and for error diagnosis.

This module is pure standard library and imports nothing from other adapters.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TextIO

from gpuwaste.errors import InputFormatError
from gpuwaste.models.collector import PAUSED_COLLECTOR

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

__all__ = [
    "DCGM_FP64_BLANK",
    "DCGM_INT32_BLANK",
    "DCGM_INT64_BLANK",
    "ExpositionFormat",
    "ParseWarning",
    "ParsedExposition",
    "RecordedSeries",
    "SeriesKey",
    "WarningKind",
    "parse_exposition",
    "series_key",
    "sniff_format",
    "stream_exposition",
    "write_openmetrics",
    "write_text_exposition",
]

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]
"""(metric name, label pairs sorted by label name): the identity of one time series."""

ExpositionFormat = Literal["text", "openmetrics"]

WarningKind = Literal[
    "skipped_non_numeric",
    "skipped_sentinel",
    "non_finite",
    "duplicate_sample",
    "out_of_order",
    "invalid_utf8",
    "no_timestamp",
]

# DCGM "blank" values (dcgm_structs.h, `DCGM_BLANK_VALUES`): DCGM writes these, or a small offset above
# them (NOT_FOUND = +1, NOT_SUPPORTED = +2, NOT_PERMISSIONED = +3, ...), when a field has no real value;
# DCGM's own `DCGM_*_IS_BLANK(val)` macros test `val >= <BLANK>`. Old dcgm-exporter versions printed them
# verbatim (README sample `DCGM_FI_DEV_MEMORY_TEMP{...} 9223372036854775794` = INT64_BLANK + 2).
DCGM_INT32_BLANK = 0x7FFFFFF0
"""2147483632: DCGM int32 blank; the int32 range [2147483632, 2147483647] is all blank."""
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
"""9223372036854775792: DCGM int64 blank; integer values at or above it are blank."""
DCGM_FP64_BLANK = 140737488355328.0
"""2**47: DCGM double blank; floating-point values at or above it are blank."""
_DCGM_INT32_MAX = 0x7FFFFFFF

# A timestamp below this many ms is before 1973-03-03, so it is almost certainly in seconds; above this
# many seconds it is after year 5138, so it is almost certainly in milliseconds.
_UNIT_GUARD = 10**11

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
#: `# TYPE "<quoted UTF-8 name>" <type>` (Prometheus 3.x).
_QUOTED_TYPE = re.compile(r'# TYPE "((?:[^"\\]|\\.)*)"[ \t]+(\S+)')
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# A whole label set without escapes: `{` name = "value" (, name = "value")* [,] `}` with blanks anywhere.
_PLAIN_LABEL_SET = re.compile(
    r'\{[ \t]*((?:[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"[^"\\]*"[ \t]*,[ \t]*)*'
    r'(?:[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"[^"\\]*"[ \t]*)?)\}'
)
_PLAIN_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"([^"\\]*)"')
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")
_SURROGATE = re.compile("[\udc80-\udcff]")
_UNIT_LINE = re.compile(r"^# UNIT ", re.MULTILINE)
_OM_SNIFF_CHARS = 65536

_TEXT_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})


@dataclass(slots=True)
class RecordedSeries:
    """One time series: a metric name, its labels and its samples.

    Attributes:
        name: metric name, e.g. ``DCGM_FI_DEV_GPU_UTIL`` or ``vllm:kv_cache_usage_perc``.
        labels: label name → value, exactly as exposed (empty values are kept, e.g. ``pod=""``).
        timestamps_ms: sample times in Unix **milliseconds**, strictly increasing after parsing.
        values: sample values, parallel to ``timestamps_ms``; always finite after parsing.
    """

    name: str
    labels: dict[str, str]
    timestamps_ms: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    @property
    def key(self) -> SeriesKey:
        """The series identity: (name, label pairs sorted by label name)."""
        return series_key(self.name, self.labels)


@dataclass(frozen=True, slots=True)
class ParseWarning:
    """Something in the input that was skipped or repaired instead of failing the parse.

    Attributes:
        line: 1-based line number in the input.
        message: human-readable description.
        kind: one of ``skipped_non_numeric``, ``skipped_sentinel``, ``non_finite``, ``duplicate_sample``,
            ``out_of_order``, ``invalid_utf8``, ``no_timestamp``.
    """

    line: int
    message: str
    kind: str


@dataclass(slots=True)
class ParsedExposition:
    """The result of :func:`parse_exposition`.

    Attributes:
        series: every series with at least one kept sample, in order of first appearance.
        format: the format the input was parsed as (declared or auto-detected).
        types: metric family name → type from ``# TYPE`` lines (``gauge``, ``counter``, ``untyped``, ...).
        warnings: what was skipped or repaired, in input order (``no_timestamp`` is reported once, at the
            first such line, with the count).
    """

    series: dict[SeriesKey, RecordedSeries]
    format: ExpositionFormat
    types: dict[str, str] = field(default_factory=dict)
    warnings: list[ParseWarning] = field(default_factory=list)


def series_key(name: str, labels: Mapping[str, str]) -> SeriesKey:
    """Build the identity of a series.

    Args:
        name: metric name.
        labels: label name → value.

    Returns:
        ``(name, tuple(sorted(labels.items())))``.
    """
    return (name, tuple(sorted(labels.items())))


# --------------------------------------------------------------------------------------------------
# parsing
# --------------------------------------------------------------------------------------------------


def parse_exposition(
    data: bytes | str,
    *,
    fmt: Literal["auto", "text", "openmetrics"] = "auto",
    source: str = "<input>",
    default_timestamp_ms: int | None = None,
    metric_filter: Callable[[str], bool] | None = None,
) -> ParsedExposition:
    """Parse a Prometheus text or OpenMetrics exposition into recorded series.

    Args:
        data: the whole recording. Bytes are decoded as UTF-8; bytes that are not valid UTF-8 are
            tolerated only inside label values (replaced by U+FFFD, warned).
        fmt: ``"text"`` (timestamps in integer ms), ``"openmetrics"`` (timestamps in float seconds,
            ``# EOF`` last), or ``"auto"``: OpenMetrics if a ``# EOF`` line exists or a ``# UNIT`` line
            appears in the first 64 KiB, else text.
        source: name used in error messages (file name, URL).
        default_timestamp_ms: Unix ms given to samples without a timestamp (a live scrape); when None,
            such a sample is an error.
        metric_filter: keep only metric names for which this returns True; other lines are skipped
            before their labels are parsed (so their label syntax is not validated).

    Returns:
        The series with their kept samples, the format used, ``# TYPE`` declarations and warnings.

    Raises:
        InputFormatError: a structurally broken line (bad metric or label name, unterminated label
            value, ``{`` without ``}``, missing value, bad timestamp, invalid escape, duplicate label
            name, invalid UTF-8 outside label values), a timestamp in the wrong unit for the format
            (ms in OpenMetrics, seconds in text), a sample without timestamp and no
            ``default_timestamp_ms``, data after ``# EOF``, or OpenMetrics input without ``# EOF``.
    """
    text, has_bad_utf8 = _decode(data, source)
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")

    openmetrics, unit_line = _detect_format(text, lines, fmt)
    result = ParsedExposition(series={}, format="openmetrics" if openmetrics else "text")
    parser = _Parser(
        lines,
        openmetrics=openmetrics,
        source=source,
        default_timestamp_ms=default_timestamp_ms,
        metric_filter=metric_filter,
        check_utf8=has_bad_utf8,
        result=result,
        sniffed_unit_line=unit_line if fmt == "auto" else None,
    )
    # The parse allocates millions of small acyclic objects; the cyclic collector would rescan the growing
    # heap over and over (measured: half the time on a scrape of unique series), so pause it meanwhile.
    with PAUSED_COLLECTOR:
        parser.run()
    return result


def stream_exposition(
    stream: Iterable[bytes],
    *,
    fmt: Literal["text", "openmetrics"],
    source: str = "<input>",
    default_timestamp_ms: int | None = None,
    metric_filter: Callable[[str], bool] | None = None,
    on_sample: Callable[[RecordedSeries, int, float, int], None],
    on_unreadable: Callable[[RecordedSeries, int | None, int, str], None] | None = None,
) -> ParsedExposition:
    """Parse an exposition line by line from a binary stream, handing every sample to `on_sample`.

    Same rules and errors as :func:`parse_exposition`, in bounded memory: no sample is kept. The result's
    series hold only their first and last timestamps (``timestamps_ms``, one or two items; ``values``
    empty), which is what a time range or an "undated" check needs.

    Args:
        stream: the recording, opened in binary mode (e.g. ``gzip.open(path)``).
        fmt: the format; it must be known beforehand (see :func:`sniff_format`).
        on_sample: called as ``on_sample(series, timestamp_ms, value, line)`` for every kept sample.
        on_unreadable: called as ``on_unreadable(series, timestamp_ms or None, line, reason)`` for each
            sample whose value was skipped (non-numeric, NaN/±Inf, DCGM blank).

    Raises:
        InputFormatError: as :func:`parse_exposition`.
    """
    result = ParsedExposition(series={}, format=fmt)
    parser = _Parser(
        [],
        openmetrics=fmt == "openmetrics",
        source=source,
        default_timestamp_ms=default_timestamp_ms,
        metric_filter=metric_filter,
        check_utf8=False,
        result=result,
        sniffed_unit_line=None,
        on_sample=on_sample,
        on_unreadable=on_unreadable,
        streaming=True,
    )
    parser.lines = _stream_lines(stream, parser)
    with PAUSED_COLLECTOR:
        parser.run()
    return result


def _stream_lines(stream: Iterable[bytes], parser: _Parser) -> Iterator[str]:
    """Decoded lines of a binary stream (no line ending); a line that is not valid UTF-8 is repaired or refused as in the parser."""
    first = True
    for lineno, whole in enumerate(stream, 1):
        raw = whole
        if raw.endswith(b"\n"):
            raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line = raw.decode("utf-8", "surrogateescape")
            stripped = line.strip(" \t")
            if stripped.startswith("#"):
                raise parser.error(lineno, "invalid UTF-8 in a comment line") from None
            line = parser.repair_bad_utf8(stripped, lineno)
        if first:
            first = False
            if line.startswith("\ufeff"):
                line = line[1:]
        yield line


def sniff_format(head: bytes, tail: bytes) -> ExpositionFormat:
    """OpenMetrics when the last non-empty line is ``# EOF`` or a ``# UNIT`` line appears in `head`, else text."""
    last = tail.rstrip(b"\r\n").rsplit(b"\n", 1)[-1].strip()
    if last == b"# EOF" or b"\n# UNIT " in b"\n" + head:
        return "openmetrics"
    return "text"


def _decode(data: bytes | str, source: str) -> tuple[str, bool]:
    """Decode the input; invalid UTF-8 bytes become lone surrogates (checked per line later)."""
    if isinstance(data, str):
        text, bad = data, False
    else:
        try:
            text, bad = data.decode("utf-8"), False
        except UnicodeDecodeError:
            text, bad = data.decode("utf-8", "surrogateescape"), True
    if text.startswith("\ufeff"):
        text = text[1:]
    return text, bad


def _detect_format(text: str, lines: list[str], fmt: str) -> tuple[bool, int | None]:
    """Return (is_openmetrics, 1-based line of a sniffed ``# UNIT`` or None)."""
    if fmt == "text":
        return False, None
    if fmt == "openmetrics":
        return True, None
    if fmt != "auto":
        raise ValueError(f"fmt must be 'auto', 'text' or 'openmetrics', not {fmt!r}")
    # `# EOF` is normally the last non-empty line; the containment test is a C-speed list scan otherwise.
    tail = len(lines) - 1
    while tail > 0 and not lines[tail]:
        tail -= 1
    if lines and (lines[tail] == "# EOF" or "# EOF" in lines):
        return True, None
    match = _UNIT_LINE.search(text, 0, _OM_SNIFF_CHARS)
    if match is not None:
        return True, text.count("\n", 0, match.start()) + 1
    return False, None


_FILTERED_OUT = RecordedSeries("", {})
"""Cache marker for series text whose metric name the caller's filter rejected."""


class _Parser:
    """One parse run; holds the state the per-line loop needs as attributes bound to locals in run()."""

    def __init__(
        self,
        lines: Iterable[str],
        *,
        openmetrics: bool,
        source: str,
        default_timestamp_ms: int | None,
        metric_filter: Callable[[str], bool] | None,
        check_utf8: bool,
        result: ParsedExposition,
        sniffed_unit_line: int | None,
        on_sample: Callable[[RecordedSeries, int, float, int], None] | None = None,
        on_unreadable: Callable[[RecordedSeries, int | None, int, str], None] | None = None,
        streaming: bool = False,
    ) -> None:
        self.on_sample = on_sample
        self.on_unreadable = on_unreadable
        self.streaming = streaming
        self.last_nonempty = 0
        self.lines = lines
        self.openmetrics = openmetrics
        self.source = source
        self.default_timestamp_ms = default_timestamp_ms
        self.metric_filter = metric_filter
        self.check_utf8 = check_utf8
        self.result = result
        self.sniffed_unit_line = sniffed_unit_line
        # raw series text ("name{labels}" or "name") → series, or _FILTERED_OUT
        self.cache: dict[str, RecordedSeries] = {}
        # series identity → series; two spellings of one series (label order, blanks) share one object
        self.by_key: dict[SeriesKey, RecordedSeries] = {}
        self.no_timestamp_first_line = 0
        self.no_timestamp_count = 0

    def error(self, lineno: int, message: str) -> InputFormatError:
        return InputFormatError(message, source=self.source, line=lineno)

    def warn(self, lineno: int, message: str, kind: str) -> None:
        self.result.warnings.append(ParseWarning(lineno, message, kind))

    def run(self) -> None:
        lines = self.lines
        openmetrics = self.openmetrics
        cache = self.cache
        cache_get = cache.get
        types = self.result.types
        default_ts = self.default_timestamp_ms
        check_utf8 = self.check_utf8
        surrogate_search = _SURROGATE.search
        filtered_out = _FILTERED_OUT
        guard = _UNIT_GUARD
        eof_seen = False
        sink = self.on_sample
        bad_sink = self.on_unreadable

        lineno = 0
        numbered = enumerate(lines, 1)
        for lineno, raw_line in numbered:
            line = raw_line
            if not line:
                continue
            self.last_nonempty = lineno
            first = line[0]
            if first == " " or first == "\t":
                line = line.strip(" \t")
                if not line:
                    continue
                first = line[0]
            if check_utf8 and surrogate_search(line) is not None:
                if first == "#":
                    raise self.error(lineno, "invalid UTF-8 in a comment line")
                line = self.repair_bad_utf8(line, lineno)
            if first == "#":
                if line.startswith("# TYPE "):
                    quoted = _QUOTED_TYPE.match(line) if line.startswith('# TYPE "') else None
                    if quoted is not None:  # a UTF-8 metric name (Prometheus 3.x): `# TYPE "my.metric" gauge`
                        types[_unescape(quoted.group(1))] = quoted.group(2)
                    else:
                        parts = line.split(None, 3)
                        if len(parts) == 4:  # "#", "TYPE", name, type
                            types[parts[2]] = parts[3].strip()
                elif openmetrics and line == "# EOF":
                    eof_seen = True
                    if self.streaming:
                        for extra, _ in numbered:  # a file's final newline yields no further line
                            raise self.error(extra, "unexpected data after # EOF (OpenMetrics allows only a final newline)")
                        break
                    trailing = self.lines[lineno:]  # type: ignore[index]
                    if trailing and trailing != [""]:
                        raise self.error(
                            lineno + 1, "unexpected data after # EOF (OpenMetrics allows only a final newline)"
                        )
                    break
                continue

            # ---- series part: "name" or "name{labels}" ----
            brace = line.find("{")
            if brace == -1:
                parts = line.split()
                key = parts[0]
                entry = cache_get(key)
                if entry is None:
                    entry = cache[key] = self.new_series(key, None, lineno)
                if entry is filtered_out:
                    continue
                rest = parts[1:]
            else:
                close = line.rfind("}") + 1
                entry = cache_get(line[:close])
                if entry is None:
                    entry, end = self.parse_series_part(line, lineno)
                    if end == close:
                        cache[line[:close]] = entry
                    if entry is filtered_out:
                        continue
                    rest = line[end:].split()
                elif entry is filtered_out:
                    continue
                else:
                    rest = line[close:].split()
            series = entry

            # ---- value and timestamp ----
            n_rest = len(rest)
            if n_rest == 2:
                value_text, ts_text = rest
            elif n_rest == 1:
                value_text, ts_text = rest[0], None
            elif n_rest == 0:
                raise self.error(lineno, f"missing value for metric {series.name!r}")
            elif openmetrics and rest[1] == "#":  # value + exemplar
                value_text, ts_text = rest[0], None
            elif openmetrics and rest[2] == "#":  # value + timestamp + exemplar
                value_text, ts_text = rest[0], rest[1]
            else:
                value_text, ts_text = rest[0], rest[1]
                if _float_or_none(value_text) is not None:
                    raise self.error(lineno, f"unexpected text after the timestamp: {' '.join(rest[2:])!r}")

            try:
                value = float(value_text)
            except ValueError:
                value = None
            if value is None or "_" in value_text:
                self.warn(
                    lineno,
                    f"skipped non-numeric value {' '.join(rest)!r} of metric {series.name!r}",
                    "skipped_non_numeric",
                )
                if bad_sink is not None:
                    bad_sink(series, self.lenient_timestamp(ts_text), lineno, f"non-numeric value {value_text[:40]!r}")
                continue

            if ts_text is None:
                if default_ts is None:
                    raise self.error(lineno, "sample has no timestamp and no default_timestamp_ms was given")
                ts = default_ts
                if not self.no_timestamp_count:
                    self.no_timestamp_first_line = lineno
                self.no_timestamp_count += 1
            elif openmetrics:
                ts = self.openmetrics_timestamp(ts_text, lineno)
            else:
                try:
                    ts = int(ts_text)
                except ValueError:
                    raise self.error(
                        lineno, f"invalid timestamp {ts_text!r}: the text format needs integer milliseconds"
                    ) from None
                if ts < guard:
                    raise self.error(
                        lineno,
                        f"timestamp {ts_text} looks like seconds, not milliseconds: this looks like an "
                        "OpenMetrics file (timestamps in seconds); pass --format openmetrics",
                    )

            if value - value != 0.0:  # NaN or ±Inf (finite x - x is exactly 0.0)
                self.warn(lineno, f"skipped non-finite value {value_text} of metric {series.name!r}", "non_finite")
                if bad_sink is not None:
                    bad_sink(series, ts, lineno, f"non-finite value {value_text}")
                continue
            if value >= DCGM_INT32_BLANK and _is_dcgm_blank(value_text, value) and is_dcgm_name(series.name):
                self.warn(
                    lineno,
                    f"skipped DCGM blank sentinel {value_text} of metric {series.name!r}",
                    "skipped_sentinel",
                )
                if bad_sink is not None:
                    bad_sink(series, ts, lineno, f"DCGM blank sentinel {value_text} (no value)")
                continue

            timestamps = series.timestamps_ms
            if timestamps and ts <= timestamps[-1]:
                if ts == timestamps[-1]:
                    self.warn(
                        lineno,
                        f"duplicate sample at {ts} ms for {series.name!r}: kept the first",
                        "duplicate_sample",
                    )
                else:
                    self.warn(
                        lineno,
                        f"out-of-order sample at {ts} ms for {series.name!r} (previous {timestamps[-1]} ms): dropped",
                        "out_of_order",
                    )
                continue
            if sink is None:
                timestamps.append(ts)
                series.values.append(value)
            else:  # streaming: the series keeps its first and last timestamp only, the sample goes to the sink
                if len(timestamps) < 2:
                    timestamps.append(ts)
                else:
                    timestamps[1] = ts
                sink(series, ts, value, lineno)

        self.finish(lineno, eof_seen)

    def lenient_timestamp(self, ts_text: str | None) -> int | None:
        """The timestamp of a sample whose value is unreadable (None when it has none or it is malformed)."""
        if ts_text is None:
            return self.default_timestamp_ms
        try:
            return int(float(ts_text) * 1000) if self.openmetrics else int(ts_text)
        except ValueError:
            return None

    def finish(self, last_lineno: int, eof_seen: bool) -> None:
        if self.openmetrics and not eof_seen:
            where = self.last_nonempty or last_lineno
            if not self.streaming:
                where = last_lineno
                while where > 1 and not self.lines[where - 1]:  # type: ignore[index]
                    where -= 1
            hint = ""
            if self.sniffed_unit_line is not None:
                hint = (
                    f" (auto-detected as OpenMetrics from the # UNIT at line {self.sniffed_unit_line};"
                    " pass --format text if it is the Prometheus text format)"
                )
            raise self.error(max(where, 1), f"data does not end with # EOF{hint}")
        if self.no_timestamp_count:
            self.result.warnings.append(
                ParseWarning(
                    self.no_timestamp_first_line,
                    f"{self.no_timestamp_count} sample(s) had no timestamp; "
                    f"used default_timestamp_ms={self.default_timestamp_ms}",
                    "no_timestamp",
                )
            )
            self.result.warnings.sort(key=lambda warning: warning.line)
        self.result.series.update((key, one) for key, one in self.by_key.items() if one.timestamps_ms)

    def openmetrics_timestamp(self, ts_text: str, lineno: int) -> int:
        try:
            seconds = float(ts_text)
        except ValueError:
            raise self.error(lineno, f"invalid timestamp {ts_text!r}: OpenMetrics needs seconds") from None
        if seconds - seconds != 0.0 or "_" in ts_text:
            raise self.error(lineno, f"invalid timestamp {ts_text!r}: OpenMetrics needs seconds")
        if seconds > _UNIT_GUARD:
            raise self.error(
                lineno,
                f"timestamp {ts_text} looks like milliseconds, not seconds: this looks like a Prometheus text "
                "file (timestamps in ms); pass --format text",
            )
        return int(seconds * 1000)  # as Prometheus' OpenMetrics parser (`int64(ts * 1000)`), which promtool backfills with

    def new_series(self, name: str, pairs: list[tuple[str, str]] | None, lineno: int, *, quoted: bool = False) -> RecordedSeries:
        """Validate a metric name (any non-empty text when it was quoted), apply the filter, and return the (possibly
        shared) series object."""
        if (not name) if quoted else _METRIC_NAME.fullmatch(name) is None:
            raise self.error(lineno, f"invalid metric name {name!r}")
        if self.metric_filter is not None and not self.metric_filter(name):
            return _FILTERED_OUT
        labels = dict(pairs) if pairs else {}
        if pairs and len(labels) != len(pairs):
            names = [label for label, _ in pairs]
            dup = next(label for label in names if names.count(label) > 1)
            raise self.error(lineno, f"duplicate label name {dup!r} in metric {name!r}")
        key = series_key(name, labels)
        series = self.by_key.get(key)
        if series is None:
            series = self.by_key[key] = RecordedSeries(name, labels)
        return series

    def parse_series_part(self, line: str, lineno: int) -> tuple[RecordedSeries, int]:
        """Parse ``name[ ]{labels}``, ``{"name", labels}`` (a quoted UTF-8 name, Prometheus 3.x) or a bare name at the
        start of a line; return (series, end index)."""
        if line[0] == "{":
            pairs, end, quoted = self.scan_label_set(line, 0, lineno, name_first=True)
            if quoted is None:
                raise self.error(lineno, f"no metric name in {_excerpt(line)!r}")
            if self.metric_filter is not None and not self.metric_filter(quoted):
                return _FILTERED_OUT, end
            return self.new_series(quoted, pairs, lineno, quoted=True), end
        match = _METRIC_NAME.match(line)
        if match is None:
            raise self.error(lineno, f"invalid metric name at the start of {_excerpt(line)!r}")
        name = match.group()
        pos = match.end()
        length = len(line)
        while pos < length and line[pos] in " \t":
            pos += 1
        if pos >= length or line[pos] != "{":
            if pos == match.end() and pos < length:
                raise self.error(lineno, f"invalid metric name {line[: line.find('{')].split()[0]!r}")
            # A bare name; the `{` belongs to a value or an exemplar.
            return self.new_series(name, None, lineno), match.end()
        if self.metric_filter is not None and not self.metric_filter(name):
            return _FILTERED_OUT, line.rfind("}") + 1  # its labels are never parsed
        plain = _PLAIN_LABEL_SET.match(line, pos)
        if plain is not None:
            pairs = _PLAIN_LABEL_PAIR.findall(plain.group(1))
            end = plain.end()
        else:
            pairs, end, _ = self.scan_label_set(line, pos, lineno)
        return self.new_series(name, pairs, lineno), end

    def scan_label_set(self, line: str, pos: int, lineno: int, *, name_first: bool = False) -> tuple[list[tuple[str, str]], int, str | None]:
        """Careful scanner for label sets with escapes; pinpoints what is wrong in a broken one.

        Label names may be quoted (`"k.b"="v"`, Prometheus 3.x UTF-8 names); with `name_first`, a first quoted string
        not followed by `=` is the metric name (`{"my.metric", a="b"}`). Returns (pairs, end, that metric name or None).
        """
        length = len(line)
        pairs: list[tuple[str, str]] = []
        metric: str | None = None
        pos += 1  # past "{"
        unclosed = "'{' without matching '}' (truncated line?)"
        while True:
            while pos < length and line[pos] in " \t":
                pos += 1
            if pos >= length:
                raise self.error(lineno, unclosed)
            if line[pos] == "}":
                return pairs, pos + 1, metric
            if line[pos] == '"':
                label, pos = self.scan_label_value(line, pos + 1, "(quoted name)", lineno)
                while pos < length and line[pos] in " \t":
                    pos += 1
                if pos < length and line[pos] != "=" and name_first and not pairs and metric is None:
                    metric = label  # the quoted metric name
                    if line[pos] == ",":
                        pos += 1
                    elif line[pos] != "}":
                        raise self.error(lineno, f"expected ',' or '}}' after the metric name {label!r} at column {pos + 1}")
                    continue
            else:
                match = _LABEL_NAME.match(line, pos)
                if match is None:
                    raise self.error(lineno, f"invalid label name at column {pos + 1}: {_excerpt(line[pos:])!r}")
                label = match.group()
                pos = match.end()
            while pos < length and line[pos] in " \t":
                pos += 1
            if pos >= length:
                raise self.error(lineno, unclosed)
            if line[pos] != "=":
                raise self.error(lineno, f"expected '=' after label name {label!r} at column {pos + 1}")
            pos += 1
            while pos < length and line[pos] in " \t":
                pos += 1
            if pos >= length:
                raise self.error(lineno, unclosed)
            if line[pos] != '"':
                raise self.error(lineno, f"expected '\"' to open the value of label {label!r} at column {pos + 1}")
            value, pos = self.scan_label_value(line, pos + 1, label, lineno)
            pairs.append((label, value))
            while pos < length and line[pos] in " \t":
                pos += 1
            if pos >= length:
                raise self.error(lineno, unclosed)
            if line[pos] == ",":
                pos += 1
            elif line[pos] != "}":
                raise self.error(lineno, f"expected ',' or '}}' after the value of label {label!r} at column {pos + 1}")

    def scan_label_value(self, line: str, pos: int, label: str, lineno: int) -> tuple[str, int]:
        """Scan a quoted label value starting after its opening quote; return (unescaped value, end)."""
        pieces: list[str] = []
        while True:
            quote = line.find('"', pos)
            backslash = line.find("\\", pos)
            if quote == -1:
                raise self.error(lineno, f"unterminated label value for label {label!r}")
            if backslash == -1 or quote < backslash:
                pieces.append(line[pos:quote])
                return "".join(pieces), quote + 1
            pieces.append(line[pos:backslash])
            escaped = line[backslash + 1 : backslash + 2]
            if escaped == "\\":
                pieces.append("\\")
            elif escaped == '"':
                pieces.append('"')
            elif escaped == "n":
                pieces.append("\n")
            elif not escaped:
                raise self.error(lineno, f"unterminated label value for label {label!r}")
            else:  # an unknown escape is kept as written, as Prometheus and prometheus_client keep it
                pieces.append("\\" + escaped)
            pos = backslash + 2

    def repair_bad_utf8(self, line: str, lineno: int) -> str:
        """Return a sample line whose invalid UTF-8 label-value bytes are replaced by U+FFFD (warned).

        Raises:
            InputFormatError: invalid UTF-8 anywhere else on the line.
        """
        outside = "invalid UTF-8 outside label values"
        match = _METRIC_NAME.match(line)
        brace = line.find("{")
        if match is None or brace == -1 or line[match.end() : brace].strip(" \t"):
            raise self.error(lineno, outside)
        pairs, end, _ = self.scan_label_set(line, brace, lineno)
        if surrogate_in(line[end:]):
            raise self.error(lineno, outside)
        repaired = {label: _replace_bad_utf8(value) for label, value in pairs}
        bad = [label for label, value in pairs if surrogate_in(value)]
        self.warn(
            lineno,
            f"value(s) of label(s) {', '.join(bad)} of metric {match.group()!r} are not valid UTF-8; "
            "decoded with errors='replace'",
            "invalid_utf8",
        )
        return match.group() + _format_labels(repaired) + line[end:]


def surrogate_in(text: str) -> bool:
    """True when ``text`` holds a byte that was not valid UTF-8 (decoded as a lone surrogate)."""
    return _SURROGATE.search(text) is not None


def _replace_bad_utf8(value: str) -> str:
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def is_dcgm_name(name: str) -> bool:
    """True for a dcgm-exporter metric name (`DCGM_FI_*`, `DCGM_EXP_*`, the 1.x and lower-cased `dcgm_*`): only DCGM
    fields have blank sentinels. The same large value on another exporter's series (a kube-state-metrics quantity, a
    process metric) is a real value, kept as Prometheus keeps it."""
    return name.startswith(("DCGM_", "dcgm_"))


def _unescape(text: str) -> str:
    """A quoted name's text without its escapes (`\\`, `\"`, `\n`; any other escape kept as written)."""
    return re.sub(r'\\(.)', lambda m: {"\\": "\\", '"': '"', "n": "\n"}.get(m.group(1), m.group(0)), text)


def _is_dcgm_blank(text: str, value: float) -> bool:
    """True when a value is a DCGM blank sentinel.

    dcgm-exporter prints INT64 fields with ``%d`` and DOUBLE fields with ``%f``, so integer text is
    checked against the int32/int64 blank ranges (exactly, as Python ints) and decimal text against the
    double blank (2**47 and above). Integer text between the two integer ranges (e.g. a large energy
    counter in mJ) is a real value.
    """
    if _INTEGER_TEXT.fullmatch(text) is not None:
        number = int(text)
        return DCGM_INT32_BLANK <= number <= _DCGM_INT32_MAX or number >= DCGM_INT64_BLANK
    return value >= DCGM_FP64_BLANK


def _excerpt(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


# --------------------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------------------


def write_openmetrics(
    series: Iterable[RecordedSeries],
    out: TextIO,
    *,
    types: Mapping[str, str] | None = None,
) -> None:
    """Write series as OpenMetrics, in the shape ``promtool tsdb create-blocks-from openmetrics`` accepts.

    Each metric family gets one ``# TYPE`` line and is written contiguously (families in order of first
    appearance); each series' samples are written in timestamp order; timestamps are Unix **seconds**
    (``ms / 1000`` with up to 3 decimals, e.g. ``1704067215`` or ``1704067215.5``); ``# EOF`` is the
    very last line, followed by one newline and no blank line.

    Args:
        series: the series to write.
        out: a text stream.
        types: metric name → type; ``gauge`` and ``counter`` are kept, anything else (or a name not in
            the mapping) is written as ``unknown``, because histogram/summary families would need their
            full ``_bucket``/``_sum``/``_count`` structure to be valid OpenMetrics. OpenMetrics names a
            counter's samples ``<family>_total``: a counter whose series name ends in ``_total`` is
            declared as family ``<name minus _total>``; one whose name does not (DCGM's
            ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``) is written as ``unknown`` so that the series keeps
            its exact name once ingested (Prometheus' rate/increase work on either type).

    Raises:
        ValueError: a series with an invalid metric or label name, or with timestamps and values of
            different lengths.
    """
    for name, members in _families(series).items():
        family_type = (types or {}).get(name)
        om_type = family_type if family_type in ("gauge", "counter") else "unknown"
        family = name
        if om_type == "counter":
            if name.endswith("_total"):
                family = name.removesuffix("_total")
            else:
                om_type = "unknown"
        out.write(f"# TYPE {family} {om_type}\n")
        for one in members:
            prefix = name + _format_labels(one.labels) + " "
            out.writelines(
                f"{prefix}{_format_value(value)} {_format_seconds(ts)}\n" for ts, value in _ordered_samples(one)
            )
    out.write("# EOF\n")


def write_text_exposition(
    series: Iterable[RecordedSeries],
    out: TextIO,
    *,
    types: Mapping[str, str] | None = None,
) -> None:
    """Write series in the Prometheus text exposition format with integer-millisecond timestamps.

    Each metric family gets one ``# TYPE`` line (when its type is known: ``counter``, ``gauge``,
    ``histogram``, ``summary`` or ``untyped``; OpenMetrics ``unknown`` becomes ``untyped``) and is written
    contiguously; samples are in timestamp order.

    Args:
        series: the series to write.
        out: a text stream.
        types: metric name → type.

    Raises:
        ValueError: a series with an invalid metric or label name, or with timestamps and values of
            different lengths.
    """
    for name, members in _families(series).items():
        family_type = (types or {}).get(name)
        if family_type == "unknown":
            family_type = "untyped"
        if family_type in _TEXT_TYPES:
            out.write(f"# TYPE {name} {family_type}\n")
        for one in members:
            prefix = name + _format_labels(one.labels) + " "
            out.writelines(f"{prefix}{_format_value(value)} {ts}\n" for ts, value in _ordered_samples(one))


def _families(series: Iterable[RecordedSeries]) -> dict[str, list[RecordedSeries]]:
    families: dict[str, list[RecordedSeries]] = {}
    for one in series:
        if _METRIC_NAME.fullmatch(one.name) is None:
            raise ValueError(f"invalid metric name {one.name!r}")
        for label in one.labels:
            if _LABEL_NAME.fullmatch(label) is None:
                raise ValueError(f"invalid label name {label!r} in metric {one.name!r}")
        if len(one.timestamps_ms) != len(one.values):
            raise ValueError(
                f"series {one.name!r} has {len(one.timestamps_ms)} timestamps but {len(one.values)} values"
            )
        families.setdefault(one.name, []).append(one)
    return families


def _ordered_samples(one: RecordedSeries) -> Iterable[tuple[int, float]]:
    timestamps = one.timestamps_ms
    if all(earlier < later for earlier, later in zip(timestamps, timestamps[1:], strict=False)):
        return zip(timestamps, one.values, strict=True)
    return sorted(zip(timestamps, one.values, strict=True), key=lambda sample: sample[0])


def _format_labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    parts = []
    for label, value in labels.items():
        if "\\" in value or '"' in value or "\n" in value:
            value = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        parts.append(f'{label}="{value}"')
    return "{" + ",".join(parts) + "}"


def _format_value(value: float) -> str:
    """Shortest exact text for a value that the parser reads back as the same value.

    Integral values are written without ``.0`` (as dcgm-exporter writes INT64 fields) so the blank
    check reads them as integers; an integral value inside the DCGM int32 blank range is kept as
    ``repr`` (``2147483635.0``) because it came from a double field and is not blank.
    """
    if value - value != 0.0:
        if value != value:
            return "NaN"
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and -(2**63) < value < 2**63 and not (DCGM_INT32_BLANK <= value <= _DCGM_INT32_MAX):
        if value == 0 and math.copysign(1.0, value) < 0:
            return "-0.0"
        return str(int(value))
    return repr(value)


def _format_seconds(ms: int) -> str:
    if ms < 0:
        return "-" + _format_seconds(-ms)
    seconds, millis = divmod(ms, 1000)
    if not millis:
        return str(seconds)
    return f"{seconds}.{millis:03d}".rstrip("0")
