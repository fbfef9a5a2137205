"""Reading an exposition.

`parse_exposition` (a whole file) and `stream_exposition` (chunks), format sniffing and decoding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from gpuwaste.models.collector import PAUSED_COLLECTOR

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
from gpuwaste.sources.exposition.parser import _Parser
from gpuwaste.sources.exposition.series import (
    _OM_SNIFF_CHARS,
    _UNIT_LINE,
    ExpositionFormat,
    ParsedExposition,
    RecordedSeries,
)


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
