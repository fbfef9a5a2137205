"""The scan window cut into buckets: `Bucket` (one signal's samples in one bucket) and `BucketGrid`.

The bucket width follows the window (`bucket_seconds`); the buckets tile the window from its start.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple


class Bucket(NamedTuple):
    """Statistics of one signal's samples inside one bucket of the window, in the signal's exported unit.

    Buckets tile the window backwards from the evaluation time: bucket k covers
    `(eval_time - window + k*bucket_s, eval_time - window + (k+1)*bucket_s]` (left-open, right-closed,
    as a PromQL range `[bucket_s - 1ms]` evaluated at the bucket's end), so no bucket reaches outside the
    window. The same numbers come from PromQL (`count_over_time`/`sum_over_time`/`max_over_time` over
    the bucket, or the shipped recording rules) and from a recording computed in Python.

    A compact named tuple (not a model): a scan holds one per signal, device and bucket (10,000 GPUs ×
    6 signals × 12 buckets), so its size matters. Build it with keywords or positionally.

    Attributes:
        end: the bucket's right edge (UTC); the bucket is `(end - bucket_s, end]`.
        count: readable samples in the bucket (0: no data — never "idle").
        total: sum of sample values (avg = total ÷ count).
        max: largest sample (0.0 when count is 0).
    """

    end: datetime
    count: int  # type: ignore[assignment]  # the field shadows tuple.count on purpose (the Bucket vocabulary)
    total: float = 0.0
    max: float = 0.0

    @property
    def avg(self) -> float | None:
        """Mean of the bucket's samples; None when the bucket holds none."""
        return self.total / self.count if self.count else None


#: Bucket widths (seconds) a window is cut into, finest first (see `bucket_seconds`).
BUCKET_WIDTHS_S: tuple[int, ...] = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 14400, 21600, 43200, 86400)
#: Windows the scan accepts (seconds): 10 minutes to 7 days.
MIN_WINDOW_S = 600
MAX_WINDOW_S = 7 * 86400


def bucket_seconds(window_s: int) -> int:
    """The bucket width (seconds) for a window: minutes for an hour, hours for a week.

    The smallest width of `BUCKET_WIDTHS_S` that divides the window into at most 24 buckets (at most 48
    for windows over a day), e.g. 60 s for 10 min, 300 s for 1 h, 900 s for 4 h, 3600 s for 1 d, 14400 s
    (4 h) for 7 d. A window no listed width divides gets the smallest divisor of its length that keeps
    the bucket count within the limit, so buckets always tile the window exactly.
    """
    window_s = int(window_s)
    if window_s <= 0:
        raise ValueError("window_s must be positive")
    most = 48 if window_s > 86400 else 24
    for width in BUCKET_WIDTHS_S:
        if window_s % width == 0 and window_s // width <= most:
            return width
    for width in range(max(1, -(-window_s // most)), window_s + 1):
        if window_s % width == 0:
            return width
    return window_s


class BucketGrid:
    """The bucket ends of one window: `n` buckets of `bucket_s` ending at `eval_time` (see `Bucket`).

    Attributes:
        eval_time: end of the window. window_s: its length. bucket_s: bucket width (`bucket_seconds`).
        ends: the buckets' right edges, oldest first (shared by every series of a scan).
        recent_buckets: how many of the newest buckets make the "recent" tail (at least 10 minutes).
        avg_run: how many consecutive buckets make one "10-minute average" (1 when buckets are ≥ 10 min).
    """

    __slots__ = ("avg_run", "bucket_s", "ends", "eval_time", "recent_buckets", "window_s")

    def __init__(self, eval_time: datetime, window_s: int, bucket_s: int | None = None) -> None:
        self.eval_time = eval_time
        self.window_s = int(window_s)
        self.bucket_s = int(bucket_s or bucket_seconds(self.window_s))
        n = max(1, self.window_s // self.bucket_s)
        self.ends: tuple[datetime, ...] = tuple(eval_time - timedelta(seconds=(n - 1 - k) * self.bucket_s) for k in range(n))
        self.recent_buckets = min(n, -(-RECENT_TAIL_S // self.bucket_s))
        self.avg_run = min(n, max(1, AVG_SPAN_S // self.bucket_s))

    @property
    def recent_s(self) -> int:
        """Length of the recent tail (seconds): whole buckets covering at least 10 minutes."""
        return self.recent_buckets * self.bucket_s

    def empty(self) -> tuple[Bucket, ...]:
        """One empty bucket per end."""
        return tuple(Bucket(e, 0, 0.0, 0.0) for e in self.ends)


#: The staleness tail (seconds) and the span of the "highest 10-minute average" (seconds).
RECENT_TAIL_S = 600
AVG_SPAN_S = 600
