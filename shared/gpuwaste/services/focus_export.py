"""Service: the daily FOCUS export — one UTC day of one cluster's FOCUS rows, written as one object per cluster and day.

The day's rows come from one priced scan of that day: window [day 00:00, next day 00:00) UTC, evaluated at the end,
through the same share ledger as `gpuwaste export` (`services.focus`), so a row's cost is the ledger's and the day's
rows add up to the cluster's physical GPUs' cost. A cluster scanned in shards is scanned shard by shard (each shard's
ledger holds its own nodes) and its rows concatenated. The object key names the cluster and the day
(`<prefix>cluster=<name>/day=<YYYY-MM-DD>/focus.csv`, Hive-style partitions that Athena and Glue read): a re-run of the
same day (a scheduler retry, a backfill) writes the same key and replaces the object.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from gpuwaste.models.settings import DeliverySettings
from gpuwaste.ports import ObjectWriter
from gpuwaste.services.focus import COLUMNS, focus_csv, focus_rows, split_unpriced
from gpuwaste.services.scan import ScanReport

logger = logging.getLogger(__name__)

DAY = timedelta(days=1)
_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

#: Scans one shard of one cluster over a window ending at `at`: (cluster, at, window, shard, shard count) → report.
DayScan = Callable[[str, datetime, timedelta, int, int], ScanReport]


@dataclass(frozen=True)
class ExportedDay:
    """What one cluster's export of one day wrote.

    Attributes:
        cluster, day: the cluster and the UTC day.
        uri: where the object went.
        rows: FOCUS rows written.
        unpriced_rows: rows left out because their GPUs have no price (FOCUS costs are never null).
        bytes: the object's size.
    """

    cluster: str
    day: date
    uri: str
    rows: int
    unpriced_rows: int
    bytes: int


def object_key(cluster: str, day: date) -> str:
    """The key of a cluster's day, relative to the export prefix: `cluster=<name>/day=<YYYY-MM-DD>/focus.csv`.

    A cluster name's characters outside `[A-Za-z0-9._-]` become `_`, so a name never makes another path.
    """
    return f"cluster={_KEY_UNSAFE.sub('_', cluster)}/day={day.isoformat()}/focus.csv"


def day_before(tick: datetime) -> date:
    """The UTC day a tick at `tick` exports: the last whole day before it."""
    return tick.astimezone(UTC).date() - DAY


class FocusExportService:
    """Writes each cluster's FOCUS rows of a day to the object store.

    Args:
        scan: scans one cluster shard over a window (priced: ledger and findings, the pipeline's price book).
        writer: the object store (S3 under the export prefix).
        clusters: (cluster name, shard count) of every configured cluster.
        delivery: the routing settings that name each holder's team (the `x_Team` column).
        account: `BillingAccountId` of the rows ("" = the cluster).
    """

    def __init__(self, *, scan: DayScan, writer: ObjectWriter, clusters: Sequence[tuple[str, int]],
                 delivery: DeliverySettings | None = None, account: str = "") -> None:
        """Hold the ports (no I/O)."""
        self.scan = scan
        self.writer = writer
        self.clusters = tuple(clusters)
        self.delivery = delivery
        self.account = account

    def export(self, day: date) -> list[ExportedDay]:
        """Export `day` for every cluster (in order; a failure propagates: the invocation fails and is retried).

        Raises:
            SourceUnavailableError, RetryableError, PermanentError: from the scan or the object store.
        """
        return [self.export_cluster(name, shards, day) for name, shards in self.clusters]

    def export_cluster(self, cluster: str, shards: int, day: date) -> ExportedDay:
        """Export one cluster's `day`: its shards scanned over the day, their rows in one object."""
        end = datetime.combine(day + DAY, time(0), tzinfo=UTC)
        rows: list[dict[str, object]] = []
        unpriced = 0
        for shard in range(shards):
            report = self.scan(cluster, end, DAY, shard, shards)
            if report.showback is None:
                continue
            priced, left_out = split_unpriced(
                focus_rows(report.showback, report.findings, self.delivery, account=self.account))
            rows += [r.values for r in priced]
            unpriced += len(left_out)
        body = focus_csv(rows, COLUMNS).encode("utf-8")
        uri = self.writer.put(object_key(cluster, day), body, content_type="text/csv; charset=utf-8")
        logger.info("focus export written", extra={"cluster": cluster, "day": day.isoformat(), "rows": len(rows),
                                                   "unpriced_rows": unpriced, "bytes": len(body)})
        if unpriced:
            logger.warning("focus export left out unpriced GPUs",
                           extra={"cluster": cluster, "day": day.isoformat(), "unpriced_rows": unpriced})
        return ExportedDay(cluster, day, uri, len(rows), unpriced, len(body))


__all__ = ["DAY", "DayScan", "ExportedDay", "FocusExportService", "day_before", "object_key"]
