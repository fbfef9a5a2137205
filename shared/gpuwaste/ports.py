"""Ports: the interfaces services depend on; adapters implement them, tests fake them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, runtime_checkable

from gpuwaste.models.cluster import ClusterState
from gpuwaste.models.coverage import CoverageTally
from gpuwaste.models.findings import Finding
from gpuwaste.models.lifecycle import FindingRecord
from gpuwaste.models.messages import AlertMessage, FindingMessage, ScanCompleted, ScanRequest
from gpuwaste.models.notices import DailySummary, MessageRef, Notice, PostedMessage, TicketDraft
from gpuwaste.models.reclaim import ReclaimKind, ReclaimTarget
from gpuwaste.models.spend import AllocationTally
from gpuwaste.models.telemetry import TelemetryWindow

#: What `OnceLedger.claim` found: the caller holds the key now, the action is done already, or another holds it.
Claim = Literal["claimed", "done", "held"]


class ClusterStateSource(Protocol):
    """Reads GPU pods, their owners and GPU nodes."""

    def cluster_state(self, *, at: datetime) -> ClusterState:
        """The cluster as of now (`at` is recorded as the observation time).

        Raises:
            SourceUnavailableError: the API could not be reached (retryable).
            SourceAuthError: credentials were rejected.
            InputFormatError: a recording is malformed.
        """
        ...


class GpuTelemetrySource(Protocol):
    """Reads DCGM (and pod-level) telemetry summarised over a window."""

    def telemetry(self, *, at: datetime, window: timedelta) -> TelemetryWindow:
        """Window summaries ending at `at` (the scheduled time, never the wall clock).

        Raises:
            SourceUnavailableError: Prometheus could not be reached or timed out (retryable).
            SourceAuthError: credentials were rejected.
            InputFormatError: a recording is malformed.
        """
        ...


@runtime_checkable
class NodeScopedClusterSource(Protocol):
    """A cluster-state source that can read only what a scan shard's nodes need (`services.shards`)."""

    def planning_state(self, *, at: datetime) -> ClusterState:
        """What the shard plan needs, of the whole cluster (nodes, GPU pods' nodes and workloads, exporter pods)."""
        ...

    def for_nodes(self, nodes: Sequence[str], *, first: bool) -> ClusterStateSource:
        """The same source reading only `nodes`, their pods and the pods on no node (`first`: the shard that reads
        the pods that were on no node in the window).

        Raises:
            ValueError: the nodes cannot be sent as one matcher (too many); the caller reads whole.
        """
        ...


@runtime_checkable
class NodeScopedTelemetrySource(Protocol):
    """A telemetry source that can read only the series of some nodes (a scan shard's: `services.shards`)."""

    def for_hostnames(self, values: Sequence[str]) -> GpuTelemetrySource:
        """The same source reading only the GPU series whose exporter host label is one of `values`.

        Raises:
            ValueError: the values cannot be sent as one matcher (too many); the caller reads whole and filters.
        """
        ...


class FindingQueue(Protocol):
    """Puts findings (and scan completions) on the next stage's queue."""

    def send_findings(self, messages: Sequence[FindingMessage]) -> None:
        """Send findings in batches; raises RetryableError when the queue cannot take them."""
        ...

    def send_scan_completed(self, message: ScanCompleted) -> None:
        """Announce that a scan finished with the fingerprints it saw."""
        ...


class ScanRequestQueue(Protocol):
    """Puts one scan request per cluster on the scan queue (dispatch_scans → scan_gpu_waste)."""

    def send_scan_requests(self, messages: Sequence[ScanRequest]) -> None:
        """Send requests in batches; raises RetryableError when the queue cannot take them."""
        ...


class AlertQueue(Protocol):
    """Puts lifecycle decisions on the alerts queue."""

    def send_alerts(self, messages: Sequence[AlertMessage]) -> None:
        """Send alerts in batches; raises RetryableError when the queue cannot take them."""
        ...

    def after_sent(self, callback: Callable[[], object]) -> None:
        """Run `callback` once the alerts handed over so far are really sent: at once for a queue that sends when
        asked; when its batch is flushed for one that defers sends (`queue.batching.DeferredQueue`), so the finding
        lifecycle clears a record's outbox only after its messages are out."""
        ...


class FindingStore(Protocol):
    """The finding lifecycle store (DynamoDB, SQLite); every write is conditional."""

    def get(self, fingerprint: str) -> FindingRecord | None:
        """The lifecycle record, or None."""
        ...

    def put_new(self, record: FindingRecord) -> bool:
        """Create a record; False when one already exists (a duplicate delivery).

        Raises:
            StoreError: throttling or a transient failure (retryable).
        """
        ...

    def update(self, record: FindingRecord, *, expected_version: int) -> bool:
        """Replace a record if the stored version is still `expected_version`; False on a conflict.

        The caller sets `record.version` (normally `expected_version + 1`).

        Raises:
            StoreError: throttling or a transient failure (retryable).
        """
        ...

    def open_for_cluster(self, cluster: str) -> list[FindingRecord]:
        """Open (unresolved) records of a cluster, by fingerprint (reads every one: reports, never dedupe)."""
        ...

    def open_fingerprints(self, cluster: str) -> list[str]:
        """Fingerprints of the open records of a cluster, sorted, without reading the records (a keys-only index
        in DynamoDB): what dedupe reads to find the findings a scan did not see.

        Raises:
            StoreError: throttling or a transient failure (retryable).
        """
        ...

    def record_scan_part(self, part: ScanCompleted, *, expires_at: int) -> list[ScanCompleted] | None:
        """Store one part of a scan's completion (`ScanCompleted.part` of `parts`, of `shard` of `shard_count`) and
        count it on the scan's one progress entry with a conditional write, idempotently: a redelivered part is
        stored and counted once, so it never completes a scan early.

        Returns:
            Every part of every shard of the scan when all are in and `part` is the one that completed the scan
            (also when it is that part's redelivery, so an interrupted resolution is redone); None otherwise
            (parts still missing, or another part completed the scan). `expires_at` (epoch seconds) bounds how
            long the parts are kept.

        Raises:
            StoreError: throttling, a transient failure, or the progress entry kept changing (retryable).
        """
        ...

    def record_coverage(self, completion: ScanCompleted, *, expires_at: int) -> bool:
        """Add one shard's attribution coverage (`completion.coverage`, sent on part 0) to its cluster's tally of the
        UTC hour of `completion.scheduled_time`, idempotently: a redelivered completion (same scan and shard) is
        counted once. The scan counts once in the hour's `scans`, on shard 0. `expires_at` (epoch seconds) bounds how
        long the tally is kept.

        Returns:
            True when added; False when this scan's shard was counted already, or the hour's tally is full (the
            adapter's item limit: logged, the scan left out of the figure).

        Raises:
            StoreError: throttling, a transient failure, or the tally kept changing (retryable).
        """
        ...

    def coverage(self, *, since: datetime, until: datetime) -> list[CoverageTally]:
        """The hourly coverage tallies of every cluster for the UTC hours that overlap [since, until), sorted by
        cluster and hour.

        Raises:
            StoreError: throttling or a transient failure (retryable).
        """
        ...

    def record_allocation(self, completion: ScanCompleted, *, expires_at: int) -> bool:
        """Add one shard's allocation ledger (`completion.allocation`, sent on part 0: funnel, allocated cost per team
        and namespace; `models.spend`) to its cluster's tally of the UTC hour of `completion.scheduled_time`,
        idempotently as `record_coverage` (a redelivered shard counted once; the scan and its window count once,
        on shard 0). `expires_at` (epoch seconds) bounds how long the tally is kept.

        Returns:
            True when added; False when the completion carries none, this scan's shard was counted already, or the
            hour's tally is full (the adapter's item limit: logged, the shard left out of the figures).

        Raises:
            StoreError: throttling, a transient failure, or the tally kept changing (retryable).
        """
        ...

    def allocation(self, *, since: datetime, until: datetime) -> list[AllocationTally]:
        """The hourly allocation ledger tallies of every cluster for the UTC hours that overlap [since, until),
        sorted by cluster and hour.

        Raises:
            StoreError: throttling or a transient failure (retryable).
        """
        ...

    def get_many(self, fingerprints: list[str]) -> dict[str, FindingRecord]:
        """Records of the given fingerprints, absent ones left out (one batch read per 100, not one per record).

        Raises:
            StoreError: throttling or a transient failure (retryable).
        """
        ...

    def update_many(self, updates: list[tuple[FindingRecord, int]]) -> list[bool]:
        """`update` for each (record, expected_version), grouped into as few calls as the store allows; one outcome
        per update, in order (False: that record's version had moved on).

        Raises:
            StoreError: throttling or a transient failure (retryable).
        """
        ...

    def history(self, *, since: datetime, until: datetime) -> list[FindingRecord]:
        """Records whose latest activity (`activity_at`: last seen or resolved) is in [since, until].

        For the daily summary, run with `until` = now: an open finding seen in the last scan is included.
        """
        ...


class Notifier(Protocol):
    """A chat sink that tells owners (Slack, Microsoft Teams, a JSON webhook, or the terminal locally); each renders
    notices its own way and names itself (`name`: the sink of its message references and delivery keys).

    Sinks differ in what they can do after a post: `threads` says whether an update can be a reply in the
    original's conversation, `edits` whether a resolution can replace the original message. A sink that cannot
    posts a new message instead (in the same conversation where it can)."""

    name: str
    threads: bool
    edits: bool

    def post(self, notice: Notice, *, reply_to: MessageRef | None = None,
             on_posted: Callable[[PostedMessage], None] | None = None) -> list[PostedMessage]:
        """Post a notice to its route's destination (or as a reply in `reply_to`'s conversation), split over several
        messages when it is too long for the sink.

        A routed destination that does not exist falls back to the default one, and the message says so.
        `on_posted` is called with each part as soon as the sink accepted it (the caller records the delivery
        before the next part is tried, so a failure on part 2 never re-posts part 1).

        Raises:
            DeliveryError: rate-limited after retries, 5xx, timeout (retry through the queue).
            PermanentDeliveryError: bad credentials, bad payload, no destination at all.
        """
        ...

    def find_posted(self, notice: Notice, *, reply_to: MessageRef | None = None) -> list[PostedMessage]:
        """Messages already posted for this notice — a post (or an edit) the sink accepted but whose answer was lost
        (crash, timeout). With `reply_to`, the messages of that conversation (the original and its replies) that
        carry the notice's `delivery_key`, or, for a resolution, already show each of its resolved findings
        resolved; without it, top-level messages of the same scan, kind and findings. Empty when the sink cannot
        be searched."""
        ...

    def update(self, notice: Notice, *, message: MessageRef) -> PostedMessage:
        """Replace `message` with `notice` (only its first part when it is long); a sink that cannot edit posts it
        as a new message in the same conversation.

        Raises:
            DeliveryError: as for `post`.
            PermanentDeliveryError: as for `post`, and when the message no longer exists.
        """
        ...

    def reply(self, *, message: MessageRef, text: str) -> PostedMessage:
        """Post a short plain reply in `message`'s conversation (acknowledgements from buttons)."""
        ...

    def user_id(self, email: str) -> str | None:
        """The sink's user id of an e-mail address (to mention), None when unknown or not supported."""
        ...

    def post_summary(
        self, summary: DailySummary, *, channel: str, chart_png: bytes | None, note: str | None = None
    ) -> PostedMessage:
        """Post the daily summary to `channel` (sinks with their own destinations use their default one), with the
        chart image when given and supported (`note` says why it is missing)."""
        ...

    def set_time_left(self, time_left: Callable[[], float] | None) -> None:
        """Bound the sink's in-process waits (a `Retry-After`) by `time_left()`, the caller's remaining seconds (a
        Lambda's remaining time); None: unbounded. A sink that never waits ignores it."""
        ...


class RequestVerifier(Protocol):
    """Authenticates an inbound request from a chat service (e.g. Slack's request signatures)."""

    def verify(self, headers: Mapping[str, str], body: bytes) -> None:
        """Accept the request or raise.

        Raises:
            RequestSignatureError: the request is not authentic or is a replay.
        """
        ...


class TicketSink(Protocol):
    """An issue tracker (Jira Cloud)."""

    def find_open(self, label: str) -> str | None:
        """Key of an unresolved ticket carrying `label`, or None.

        Raises:
            DeliveryError: 429/5xx/timeouts. PermanentDeliveryError: 4xx (410 for retired endpoints).
        """
        ...

    def create(self, draft: TicketDraft) -> str:
        """Open a ticket; returns its key (e.g. `MLOPS-12`). Raises as `find_open`."""
        ...

    def comment(self, key: str, paragraphs: Sequence[str], *, delivery_keys: Sequence[str] = ()) -> None:
        """Add a comment to `key`, carrying the idempotency keys `delivery_keys` (found by `delivered`).
        Raises as `find_open`."""
        ...

    def delivered(self, key: str) -> set[str]:
        """The idempotency keys ticket `key` and its comments carry (`TicketDraft.delivery_keys`, `comment`'s
        `delivery_keys`): what was accepted before, looked up before a comment is posted (again). Raises as
        `find_open`."""
        ...

    def transition(self, key: str, transition: str) -> None:
        """Apply the transition named or numbered `transition` to `key`. Raises as `find_open`."""
        ...


class ChartRenderer(Protocol):
    """Draws the summary chart (PNG)."""

    def waste_by_team_and_kind(self, summary: DailySummary) -> bytes | None:
        """Stacked bars of USD wasted per team by kind; None when no plotting library is installed."""
        ...


class OnceLedger(Protocol):
    """Records of actions that must happen once (a day's summary to one destination, one signed chat request), so a
    retried invocation or a replayed request does not repeat them. Keys are the caller's; a record is kept until
    `keep_until`, then forgotten."""

    def claim(self, key: str, *, now: datetime, hold_until: datetime, keep_until: datetime) -> Claim:
        """Claim `key` for the caller: "claimed" when no one holds it (new, released, or a claim held past its
        `hold_until` by an invocation that died), "done" when the action was confirmed, "held" while another claim
        is younger than its `hold_until`.

        Raises:
            StoreError: the ledger cannot be reached (retryable).
        """
        ...

    def confirm(self, key: str, *, keep_until: datetime) -> None:
        """Mark the claimed action done (it is not repeated before `keep_until`).

        Raises:
            StoreError: as `claim`.
        """
        ...

    def release(self, key: str) -> None:
        """Give the claim up: the action did not happen; the next `claim` takes it.

        Raises:
            StoreError: as `claim`.
        """
        ...


class ClusterActuator(Protocol):
    """Performs reclaim actions on a cluster (the Kubernetes apiserver), with only the verbs each needs: PATCH of
    a scale subresource, PATCH of a Job/CronJob/Notebook, DELETE of a pod. `before`/`after` are the fields changed:
    `{"replicas": n}`, `{"suspend": b}`, `{"stopped": str | None}`, `{"uid": str}` (a deleted pod)."""

    def read(self, kind: ReclaimKind, target: ReclaimTarget) -> dict[str, Any]:
        """The current value of the fields `kind` changes (one GET).

        Raises:
            ActionRefusedError: 403/404 (reported, not retried). SourceUnavailableError: unreachable / 5xx.
        """
        ...

    def apply(self, kind: ReclaimKind, target: ReclaimTarget, before: Mapping[str, Any]) -> dict[str, Any]:
        """Perform `kind` on `target` (one PATCH or DELETE) and return the fields as written (`after`).

        Raises:
            ActionRefusedError, SourceUnavailableError: as `read`.
        """
        ...

    def restore(self, kind: ReclaimKind, target: ReclaimTarget, before: Mapping[str, Any]) -> dict[str, Any]:
        """Write `before` back (one PATCH: replicas, the suspend flag, the stopped annotation removed or reset).

        Raises:
            ActionRefusedError: also for a kind that cannot be undone (a deleted pod). SourceUnavailableError.
        """
        ...


class ReclaimNotifier(Protocol):
    """Announces reclaim actions in the owner's thread, with the buttons the mode needs."""

    def announce(self, *, message: MessageRef, text: str, buttons: Sequence[tuple[str, str, str]]) -> PostedMessage:
        """Reply in `message`'s thread with `text` and buttons `(action, label, fingerprint)` (action: `reclaim_keep`,
        `reclaim_approve`).

        Raises:
            DeliveryError, PermanentDeliveryError: as `Notifier.reply`.
        """
        ...


class Clock(Protocol):
    """Injected time source for code that must know "now" (never used inside a scan)."""

    def now(self) -> datetime:
        """The current time, tz-aware UTC."""
        ...


class ObjectWriter(Protocol):
    """Writes whole objects under keys (S3): a put of the same key replaces the object (idempotent re-runs)."""

    def put(self, key: str, body: bytes, *, content_type: str) -> str:
        """Write `body` at `key` (relative to the writer's prefix); return where it went (e.g. s3://bucket/key).

        Raises:
            RetryableError: throttling, 5xx, connection errors.
            PermanentError: access denied, no such bucket, or `body` over the store's single-put limit.
        """
        ...


__all__ = [
    "AlertQueue", "Claim", "Clock", "ClusterActuator", "ClusterStateSource", "Finding", "FindingQueue", "FindingStore", "GpuTelemetrySource",
    "ObjectWriter", "OnceLedger", "ReclaimNotifier", "ScanRequestQueue",
]
