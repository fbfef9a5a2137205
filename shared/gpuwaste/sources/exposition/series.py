"""The exposition data model.

`RecordedSeries`, parse warnings and results, series keys, DCGM blank values, and the value and name helpers the
parser and writers share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping


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
