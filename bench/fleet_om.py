"""Benchmark helper: write a generated fleet's telemetry as OpenMetrics without holding it in memory.

`gpuwaste.sources.exposition.write_openmetrics` groups every series by family in memory first, which is
fine for a demo fleet and too heavy for 10,000 GPUs (tens of millions of samples). Here each series is
formatted as soon as the generator yields it and appended to one temporary file per metric family; the
families are then concatenated into the final file with one `# TYPE` line each and a closing `# EOF`,
so each family is one contiguous run, as promtool expects.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gpuwaste.sources.exposition import RecordedSeries
from gpuwaste.sources.exposition.writer import _format_labels, _format_value

COUNTERS = {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter", "vllm:generation_tokens_total": "counter"}


@dataclass
class WriteStats:
    """What was written: series, samples, bytes of the final file."""

    series: int = 0
    samples: int = 0
    bytes: int = 0


def _seconds(ms: int) -> str:
    whole, rest = divmod(ms, 1000)
    return str(whole) if not rest else f"{whole}.{rest:03d}".rstrip("0")


def write_openmetrics_streaming(series: Iterable[RecordedSeries], path: Path, *, types: dict[str, str] | None = None) -> WriteStats:
    """Write `series` to `path` as OpenMetrics, family by family, in bounded memory.

    Args:
        series: the series, in any family order; each series' samples must be in timestamp order.
        path: the output file (overwritten).
        types: metric name → "gauge" / "counter" (anything else is written as "unknown").

    Returns:
        The counts of what was written.
    """
    types = {**COUNTERS, **(types or {})}
    stats = WriteStats()
    tmp = Path(tempfile.mkdtemp(prefix="om-families-", dir=path.parent))
    handles: dict[str, IO[str]] = {}
    try:
        for one in series:
            out = handles.get(one.name)
            if out is None:
                out = handles[one.name] = (tmp / f"{len(handles):03d}.om").open("w", buffering=1 << 20)
            prefix = one.name + _format_labels(one.labels) + " "
            out.writelines(f"{prefix}{_format_value(v)} {_seconds(ts)}\n" for ts, v in zip(one.timestamps_ms, one.values, strict=True))
            stats.series += 1
            stats.samples += len(one.values)
        with path.open("w", buffering=1 << 20) as final:
            for name, out in handles.items():
                out.close()
                kind = types.get(name, "gauge")
                final.write(f"# TYPE {name} {kind if kind in ('gauge', 'counter') else 'unknown'}\n")
                final.flush()
                with Path(out.name).open("rb") as part:
                    shutil.copyfileobj(part, final.buffer, 1 << 22)
                final.flush()
            final.write("# EOF\n")
    finally:
        for out in handles.values():
            out.close()
        shutil.rmtree(tmp, ignore_errors=True)
    stats.bytes = path.stat().st_size
    return stats
