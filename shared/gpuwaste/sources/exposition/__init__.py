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

The package, by concern: `series` (the data model and shared value helpers), `reading` (the entry points, format
sniffing and decoding), `parser` (one parse run) and `writer` (OpenMetrics and text output). The names other modules
use are re-exported here.
"""

from gpuwaste.sources.exposition.reading import parse_exposition, sniff_format, stream_exposition
from gpuwaste.sources.exposition.series import (
    DCGM_FP64_BLANK,
    DCGM_INT32_BLANK,
    DCGM_INT64_BLANK,
    ExpositionFormat,
    ParsedExposition,
    ParseWarning,
    RecordedSeries,
    SeriesKey,
    WarningKind,
    series_key,
)
from gpuwaste.sources.exposition.writer import write_openmetrics, write_text_exposition

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
