"""Benchmark helper: the one sizing table of the scan function — Lambda memory and timeout per scan shard size.

Derived from measurements, used by the template (`ScanGpuWasteFunction` is the row of `SHARD_GPUS`; checked by
`tests/unit/test_sizing.py`), by docs/deploy.md (the table there is `markdown_table()`, checked too) and by the
projection (`bench/projection.py` sizes the scan with `scan_size`).

The model: a scan's peak memory and CPU grow linearly with the GPUs it scans, from the two sizes `make bench` measures
(`MEASURED`, raw plan, the heavier one: bench/RESULTS.md of 2026-12-01, 2 cores). Lambda gives CPU in proportion to
memory (one vCPU at 1,769 MB), so the scan's wall on Lambda is at least its CPU × 1,769 ÷ memory. Memory is 2× the
peak (the kube-state-metrics cluster-state path and answer buffers are not in the measurement), in 256 MB steps, at
least 512 MB; the timeout is 20× the expected Lambda wall, in whole minutes, at least 5 minutes, at most Lambda's 15.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: GPUs scanned → (peak RSS MB, scan wall s, scan CPU s) measured by `make bench` (raw plan, bench/RESULTS.md 2026-12-01).
MEASURED: dict[int, tuple[float, float, float]] = {1_000: (136.0, 0.80, 0.65), 10_004: (433.0, 8.40, 6.35)}
#: The shard size the template is sized for; `scan_shards` = ceil(cluster GPUs ÷ this) (docs/deploy.md).
SHARD_GPUS = 10_000
ROWS = (1_000, 2_500, 5_000, 10_000, 20_000)
LAMBDA_FULL_VCPU_MB = 1_769
LAMBDA_MAX_MB = 10_240
LAMBDA_MAX_TIMEOUT_S = 900


@dataclass(frozen=True)
class ScanSize:
    """One row: a shard of `gpus` GPUs — its modelled peak (MB), CPU (s) and Lambda wall (s), and the Lambda size."""

    gpus: int
    peak_mb: float
    cpu_s: float
    lambda_wall_s: float
    memory_mb: int
    timeout_s: int


def _line(gpus: float, index: int) -> float:
    (g0, a), (g1, b) = ((g, v[index]) for g, v in sorted(MEASURED.items()))
    return a + (b - a) * (gpus - g0) / (g1 - g0)


def scan_size(gpus: int) -> ScanSize:
    """The row for a shard of `gpus` GPUs (see the module docstring for the rules).

    Raises:
        ValueError: `gpus` < 1, or a shard so large that no Lambda size holds it (use more shards).
    """
    if gpus < 1:
        raise ValueError(f"{gpus} GPUs: a shard holds at least one")
    peak = max(_line(gpus, 0), MEASURED[min(MEASURED)][0] * 0.5)
    cpu = max(_line(gpus, 2), 0.05)
    wall = max(_line(gpus, 1), 0.05)
    memory = max(512, math.ceil(peak * 2 / 256) * 256)
    if memory > LAMBDA_MAX_MB:
        raise ValueError(f"{gpus} GPUs in one shard need {memory} MB, over Lambda's {LAMBDA_MAX_MB}: use more shards")
    lambda_wall = max(wall, cpu * max(1.0, LAMBDA_FULL_VCPU_MB / memory))
    timeout = min(LAMBDA_MAX_TIMEOUT_S, max(300, math.ceil(lambda_wall * 20 / 60) * 60))
    return ScanSize(gpus, round(peak, 1), round(cpu, 2), round(lambda_wall, 1), memory, timeout)


def shards_for(cluster_gpus: int, shard_gpus: int = SHARD_GPUS) -> int:
    """`scan_shards` for a cluster of `cluster_gpus` GPUs: one shard per `shard_gpus` (at least 1)."""
    return max(1, math.ceil(cluster_gpus / shard_gpus))


def markdown_table() -> str:
    """The sizing table as docs/deploy.md prints it (one line per row of `ROWS`)."""
    lines = ["| GPUs per shard | modelled peak MB | modelled CPU s | expected Lambda wall s | MemorySize (MB) | Timeout (s) |",
             "|---:|---:|---:|---:|---:|---:|"]
    for g in ROWS:
        r = scan_size(g)
        mark = " (template)" if g == SHARD_GPUS else ""
        lines.append(f"| {g:,}{mark} | {r.peak_mb:,.0f} | {r.cpu_s:.1f} | {r.lambda_wall_s:.1f} | {r.memory_mb:,} | {r.timeout_s} |")
    return "\n".join(lines)


def scale_out(cluster_gpus: int, *, clusters: int = 1, shard_gpus: int = SHARD_GPUS, per_endpoint: int = 0, wave_s: int = 60,
              max_concurrency: int = 10, queries_per_scan: int = 15, query_concurrency: int = 4) -> dict[str, object]:
    """A tick of `clusters` clusters of `cluster_gpus` GPUs each on one shared Prometheus, sharded by the table and
    paced (`services.dispatch.pace`: waves of `per_endpoint` scans `wave_s` apart; the event source's
    `max_concurrency`): the shard count and size, each shard's Lambda size and expected wall, how long until the last
    shard has run, and the most scans and queries in flight at the Prometheus (15 queries per scan on the
    recording-rules plan, 4 at a time: `prometheus.concurrency`)."""
    shards = shards_for(cluster_gpus, shard_gpus)
    row = scan_size(math.ceil(cluster_gpus / shards))
    scans = clusters * shards
    budget = min(per_endpoint or scans, max_concurrency, scans)
    waves = math.ceil(scans / budget)
    step = max(wave_s, row.lambda_wall_s) if per_endpoint else row.lambda_wall_s
    return {
        "cluster_gpus": cluster_gpus, "clusters": clusters, "shards_per_cluster": shards, "gpus_per_shard": row.gpus,
        "shard_memory_mb": row.memory_mb, "shard_timeout_s": row.timeout_s, "shard_wall_s": row.lambda_wall_s,
        "scans_per_tick": scans, "scans_in_flight_max": budget, "waves": waves,
        "tick_done_s": round((waves - 1) * step + row.lambda_wall_s, 1),
        "queries_in_flight_max": budget * min(query_concurrency, queries_per_scan),
        "queries_per_tick": scans * queries_per_scan,
        "lambda_gb_s_per_tick": round(scans * row.lambda_wall_s * row.memory_mb / 1024, 1),
    }


def projection_text() -> str:
    """Issue 23 item 7(c): 100,000 GPUs in one cluster, and 50 clusters on one shared Prometheus with the budget."""
    cases = [("100,000 GPUs, one cluster", scale_out(100_000)),
             ("50 clusters × 2,000 GPUs, one Prometheus, no budget and no concurrency cap", scale_out(2_000, clusters=50, max_concurrency=50)),
             ("50 clusters × 2,000 GPUs, one Prometheus, 5 scans per endpoint, 60 s waves",
              scale_out(2_000, clusters=50, per_endpoint=5, wave_s=60)),
             ("50 clusters × 10,000 GPUs, one Prometheus, 5 scans per endpoint, 60 s waves",
              scale_out(10_000, clusters=50, per_endpoint=5, wave_s=60))]
    lines = ["| case | shards × GPUs | shard MB / timeout s / wall s | scans in flight (max) | waves | tick done s | "
             "queries in flight (max) | Lambda GB-s per tick |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for name, c in cases:
        lines.append(f"| {name} | {c['shards_per_cluster']} × {c['gpus_per_shard']:,} | {c['shard_memory_mb']:,} / {c['shard_timeout_s']} / "
                     f"{c['shard_wall_s']} | {c['scans_in_flight_max']} | {c['waves']} | {c['tick_done_s']} | {c['queries_in_flight_max']} | "
                     f"{c['lambda_gb_s_per_tick']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
    print()
    print(projection_text())
