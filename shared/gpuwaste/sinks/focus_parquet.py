"""Adapter: FOCUS rows as a Parquet file (the optional extra `gpuwaste[parquet]`, pyarrow).

The columns come in order from the caller (`services.focus.COLUMNS`) with their kinds: money and quantities as
`decimal128(38, 10)` (the rows are exact to 1e-10, never floats), the period columns as UTC timestamps
(milliseconds, as Parquet stores them), `Tags` as a JSON object in a string (FOCUS's key-value format), everything
else as strings; null stays null. pyarrow is imported when a file is written, so the command line and the Lambda
layer never need it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from gpuwaste.errors import ConfigError

#: what to install when pyarrow is missing
INSTALL_HINT = "pip install 'gpuwaste[parquet]' (pyarrow)"


def _pyarrow() -> tuple[Any, Any]:
    """(pyarrow, pyarrow.parquet).

    Raises:
        ConfigError: pyarrow is not installed (names the extra to install).
    """
    try:
        import pyarrow as pa  # type: ignore[import-not-found, unused-ignore]
        import pyarrow.parquet as pq  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise ConfigError(f"Parquet output needs pyarrow: {INSTALL_HINT}") from exc
    return pa, pq


def _time(v: object) -> datetime | None:
    if v is None or v == "":
        return None
    if isinstance(v, datetime):
        return v
    return datetime.fromisoformat(str(v).replace("Z", "+00:00"))


def _text(v: object) -> str | None:
    if v is None:
        return None
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True, separators=(",", ":"))
    if isinstance(v, Decimal):
        return f"{v:f}"
    return str(v)


def _decimal(v: object) -> Decimal | None:
    return None if v is None or v == "" else Decimal(str(v))


def focus_parquet(rows: Sequence[dict[str, object]], columns: Sequence[str], *, decimals: Collection[str],
                  timestamps: Collection[str]) -> bytes:
    """The rows as one Parquet file (bytes), columns in order.

    Args:
        rows: FOCUS rows (column → value: Decimal, str, dict for Tags, or None).
        columns: the columns, in order.
        decimals: the columns written as decimal128(38, 10).
        timestamps: the columns written as UTC timestamps (ISO 8601 text in the rows).

    Raises:
        ConfigError: pyarrow is not installed.
    """
    pa, pq = _pyarrow()
    fields, data = [], {}
    convert: Callable[[object], object]
    for c in columns:
        if c in decimals:
            kind, convert = pa.decimal128(38, 10), _decimal
        elif c in timestamps:
            kind, convert = pa.timestamp("ms", tz="UTC"), _time
        else:
            kind, convert = pa.string(), _text
        fields.append(pa.field(c, kind, nullable=True))
        data[c] = [convert(r.get(c)) for r in rows]
    table = pa.Table.from_pydict(data, schema=pa.schema(fields))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


__all__ = ["INSTALL_HINT", "focus_parquet"]
