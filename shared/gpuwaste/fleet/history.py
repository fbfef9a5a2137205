"""The demo's past: 30 days of lifecycle records before the demo scan (generated, deterministic), so the daily
summary of `gpuwaste demo` shows a trend, resolutions and realised savings instead of one day of "new".

The records are past findings of the demo teams' workloads (their own fingerprints, so the demo scan's findings
are still new): each ran for some days and was resolved. None is open at the demo's scan: the demo fleet no
longer has these workloads, and a real fleet would have resolved them after `resolve_after_missed_scans` scans,
so the summary's "Open now" is the demo scan's findings, as the scan's total says. A few ran until recently
(resolved about a day before the demo). Amounts come from the demo's price points; the same seed gives the same
history.
"""

from __future__ import annotations

import hashlib
import random
from datetime import datetime, timedelta
from decimal import Decimal

from gpuwaste.models.lifecycle import FindingRecord, FindingState

#: (team, namespace, workload, kind, USD/day) of the past findings; amounts are the demo's price points.
PAST: tuple[tuple[str, str, str, str, str], ...] = (
    ("research", "research", "llm-finetune-v1", "idle_allocation", "263.52"),
    ("research", "research", "eval-sweep-nightly", "idle_allocation", "131.76"),
    ("research", "research", "notebook-bob", "idle_allocation", "19.32"),
    ("research", "research", "pretrain-7b", "stalled", "65.88"),
    ("ml-serving", "inference", "llama-8b-vllm", "inference_idle", "165.12"),
    ("ml-serving", "inference", "whisper-large", "underused_allocation", "48.96"),
    ("ml-serving", "inference", "reranker-v2", "idle_allocation", "82.56"),
    ("search-infra", "search", "embedder-backfill", "idle_allocation", "65.88"),
    ("search-infra", "search", "feature-etl-hourly", "low_memory_bandwidth", "44.40"),
    ("search-infra", "search", "nightly-embed-v0", "orphaned", "34.03"),
    ("vision", "vision", "detector-train-v3", "underused_allocation", "40.22"),
    ("vision", "vision", "labeler-gpu", "cpu_bound", "45.37"),
    ("vision", "vision", "segmenter-eval", "idle_allocation", "23.47"),
)


def demo_history(*, end: datetime, cluster: str = "demo", days: int = 30, seed: int = 7) -> list[FindingRecord]:
    """Lifecycle records of the `days` before `end`, all resolved before `end` (with their savings): most after a
    few days, three ran until the day before `end` (last seen 26 h before it, resolved an hour later)."""
    rng = random.Random(seed)
    records = []
    for n, (team, ns, workload, kind, usd) in enumerate(PAST):
        per_day = Decimal(usd)
        start = end - timedelta(days=rng.randint(3, days - 1), hours=rng.randint(0, 23))
        recent = n % 5 == 1
        if recent:
            last = end - timedelta(hours=26)
        else:
            run = timedelta(days=rng.randint(1, 6), hours=rng.randint(0, 23))
            last = min(start + run, end - timedelta(hours=13))
        resolved_at = last + timedelta(hours=1)
        span_days = Decimal(int((last - start).total_seconds())) / Decimal(86400)
        fingerprint = hashlib.sha256(f"history\x1f{cluster}\x1f{ns}\x1f{workload}\x1f{kind}".encode()).hexdigest()
        records.append(FindingRecord(
            fingerprint=fingerprint, cluster=cluster, namespace=ns, workload=workload, kind=kind, detector=kind,
            state=FindingState.RESOLVED, first_seen=start, last_seen=last,
            usd_per_day=per_day, peak_usd_per_day=per_day, alerted_usd_per_day=per_day,
            cumulative_usd=(per_day * span_days).quantize(Decimal("0.01")), resolved_at=resolved_at,
            saved_usd_per_day=per_day, team=team, activity_at=resolved_at,
            last_scan_id=f"history-{n}",
        ))
    return records


__all__ = ["PAST", "demo_history"]
