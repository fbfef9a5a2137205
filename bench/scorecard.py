"""Benchmark: the detector scorecard — precision and recall per waste kind on the generated scenarios.

Usage: PYTHONPATH=shared:. .venv/bin/python bench/scorecard.py [REPETITIONS]
Prints the per-kind table (expected, found, false positives/negatives, precision, recall, USD/day) and the
look-alikes (bursty inference, checkpoint pause, short data-loading stall, healthy serving) that were
flagged (none should be). Exits 1 when any kind is under 0.95 precision or recall.
"""

from __future__ import annotations

import sys
import time

from gpuwaste.fleet.scorecard import format_table, run_scorecard

THRESHOLD = 0.95


def main(argv: list[str]) -> int:
    """Run the scorecard and print its table; non-zero exit below the threshold."""
    reps = int(argv[1]) if len(argv) > 1 else 5
    t0 = time.perf_counter()
    card = run_scorecard(reps)
    elapsed = time.perf_counter() - t0
    sys.stdout.write(f"scorecard: {reps} repetitions of every scenario, scanned in {elapsed:.2f} s\n")
    sys.stdout.write(format_table(card) + "\n")
    low = [s.kind for s in card.scores.values() if s.precision < THRESHOLD or s.recall < THRESHOLD]
    if low or card.lookalikes_flagged:
        sys.stdout.write(f"below {THRESHOLD}: {', '.join(low) or 'none'}; look-alikes flagged: {len(card.lookalikes_flagged)}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
