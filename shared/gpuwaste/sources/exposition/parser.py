"""The exposition parser.

One parse run over the lines of a Prometheus text or OpenMetrics exposition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuwaste.errors import InputFormatError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
from gpuwaste.sources.exposition.series import (
    _LABEL_NAME,
    _METRIC_NAME,
    _PLAIN_LABEL_PAIR,
    _PLAIN_LABEL_SET,
    _QUOTED_TYPE,
    _SURROGATE,
    _UNIT_GUARD,
    DCGM_INT32_BLANK,
    ParsedExposition,
    ParseWarning,
    RecordedSeries,
    SeriesKey,
    _excerpt,
    _float_or_none,
    _is_dcgm_blank,
    _replace_bad_utf8,
    _unescape,
    is_dcgm_name,
    series_key,
    surrogate_in,
)
from gpuwaste.sources.exposition.writer import _format_labels

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
