"""Writing series.

OpenMetrics (what `promtool tsdb create-blocks-from openmetrics` accepts) and the Prometheus text format.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
from gpuwaste.sources.exposition.series import (
    _DCGM_INT32_MAX,
    _LABEL_NAME,
    _METRIC_NAME,
    _TEXT_TYPES,
    DCGM_INT32_BLANK,
    RecordedSeries,
)


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
