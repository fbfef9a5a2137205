"""Adapter (pure): Prometheus HTTP API answers saved as JSON — `/api/v1/query` (vector) and `/api/v1/query_range`
(matrix) — read as recorded series, so `curl …/api/v1/query_range?query=DCGM_FI_DEV_GPU_UTIL… > gpu.json` is
a recording `gpuwaste scan -r gpu.json` reads. A file may hold one answer or a JSON list of answers.

Answer format: https://prometheus.io/docs/prometheus/latest/querying/api/#expression-query-result-formats
(`{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {...}, "values": [[t, "v"], ...]}]}}`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from gpuwaste.errors import InputFormatError
from gpuwaste.sources.exposition import ParsedExposition, RecordedSeries, SeriesKey, series_key

API_DOC = "https://prometheus.io/docs/prometheus/latest/querying/api/"


def looks_like_api_json(data: bytes) -> bool:
    """True when the bytes start like a JSON answer of the Prometheus HTTP API (an object or a list of them)."""
    head = data[:4096].lstrip()
    return head[:1] in (b"{", b"[") and b'"resultType"' in data[:1_000_000] or (head[:1] == b"{" and b'"status"' in head[:200])


def _answers(doc: Any, source: str) -> list[dict[str, Any]]:
    answers = doc if isinstance(doc, list) else [doc]
    out = []
    for n, answer in enumerate(answers):
        where = f"answer {n + 1}" if isinstance(doc, list) else "the answer"
        if not isinstance(answer, dict) or "data" not in answer and "status" not in answer:
            raise InputFormatError(f"{where} is not a Prometheus API answer (no status/data; see {API_DOC})", source=source)
        if answer.get("status") == "error":
            raise InputFormatError(f"{where} is an error answer: {answer.get('errorType', '')}: {answer.get('error', '')}",
                                   source=source)
        data = answer.get("data")
        if not isinstance(data, dict) or data.get("resultType") not in ("vector", "matrix"):
            kind = data.get("resultType") if isinstance(data, dict) else None
            raise InputFormatError(f"{where} has resultType {kind!r}: save a vector (/api/v1/query) or a matrix "
                                   "(/api/v1/query_range) of raw series", source=source)
        out.append(data)
    return out


def _sample(pair: Any, source: str, name: str) -> tuple[int, float] | None:
    if not (isinstance(pair, list | tuple) and len(pair) == 2):
        raise InputFormatError(f"{name}: a sample must be [unix seconds, \"value\"], got {str(pair)[:60]}", source=source)
    try:
        ts = float(pair[0])
        value = float(pair[1])
    except (TypeError, ValueError) as exc:
        raise InputFormatError(f"{name}: unreadable sample {str(pair)[:60]}", source=source) from exc
    if not math.isfinite(value):
        return None
    return int(round(ts * 1000)), value


def parse_api_json(data: bytes, *, source: str = "<input>",
                   metric_filter: Callable[[str], bool] | None = None) -> ParsedExposition:
    """Series from Prometheus API answers (vector or matrix; one answer or a list).

    Raises:
        InputFormatError: not JSON, an error answer, a scalar/string result, a series without `__name__` (an
            expression's result, not raw series), or a malformed sample.
    """
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        line = getattr(exc, "lineno", None)
        raise InputFormatError(f"not JSON: {exc}", source=source, line=line) from exc
    series: dict[SeriesKey, RecordedSeries] = {}
    for answer in _answers(doc, source):
        for item in answer.get("result") or []:
            labels = dict(item.get("metric") or {})
            name = labels.pop("__name__", None)
            if not name:
                raise InputFormatError("a series has no __name__: save the raw series (e.g. query "
                                       "{__name__=~\"DCGM_.*\"}), not the result of an expression", source=source)
            if metric_filter is not None and not metric_filter(name):
                continue
            pairs = item.get("values") if answer["resultType"] == "matrix" else [item.get("value")]
            key = series_key(name, labels)
            rec = series.setdefault(key, RecordedSeries(name=name, labels=labels))
            for pair in pairs or []:
                sample = _sample(pair, source, name)
                if sample is not None:
                    rec.timestamps_ms.append(sample[0])
                    rec.values.append(sample[1])
    for rec in series.values():  # answers may overlap (several range queries): sorted, each time once
        merged = dict(zip(rec.timestamps_ms, rec.values, strict=True))
        rec.timestamps_ms[:] = sorted(merged)
        rec.values[:] = [merged[t] for t in rec.timestamps_ms]
    return ParsedExposition(series={k: v for k, v in series.items() if v.timestamps_ms}, format="text")


__all__ = ["looks_like_api_json", "parse_api_json"]
