"""Adapter: the finding lifecycle store in SQLite (local runs, `gpuwaste run`, `gpuwaste demo`).

Every write is conditional, as in DynamoDB: `put_new` inserts only when the fingerprint is absent and
`update` replaces only when the stored version is the expected one. One connection, guarded by a lock,
so the store is safe to share between threads of one process. A file database runs in WAL mode with
`synchronous=NORMAL` (no fsync per committed write; a power loss may lose the last few writes, never
corrupt the file — the next scan re-sends every open finding anyway).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from gpuwaste.errors import GpuWasteError, StateInUseError, StoreError
from gpuwaste.models.coverage import CoverageTally, KindCoverage, coverage_hour, sum_kinds
from gpuwaste.models.lifecycle import FindingRecord, FindingState
from gpuwaste.models.messages import ScanCompleted, completion_is_whole
from gpuwaste.models.spend import AllocationTally, ScanAllocation, add_allocation
from gpuwaste.store.ledger_items import packed, unpacked

M = TypeVar("M", bound=BaseModel)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS findings (
    fingerprint TEXT PRIMARY KEY,
    cluster TEXT NOT NULL,
    state TEXT NOT NULL,
    activity_at TEXT NOT NULL,
    version INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS findings_by_cluster_state ON findings (cluster, state);
CREATE INDEX IF NOT EXISTS findings_by_activity ON findings (activity_at);
CREATE TABLE IF NOT EXISTS deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    dedupe_key TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    done_at TEXT,
    UNIQUE (queue, dedupe_key)
);
CREATE INDEX IF NOT EXISTS deliveries_pending ON deliveries (queue, state, id);
CREATE TABLE IF NOT EXISTS scan_parts (
    scan_id TEXT NOT NULL,
    token TEXT NOT NULL,
    body TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (scan_id, token)
);
CREATE TABLE IF NOT EXISTS scan_coverage (
    cluster TEXT NOT NULL,
    hour TEXT NOT NULL,
    token TEXT NOT NULL,
    counts INTEGER NOT NULL,
    body TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (cluster, hour, token)
);
CREATE INDEX IF NOT EXISTS scan_coverage_by_hour ON scan_coverage (hour);
CREATE TABLE IF NOT EXISTS scan_allocation (
    cluster TEXT NOT NULL,
    hour TEXT NOT NULL,
    token TEXT NOT NULL,
    counts INTEGER NOT NULL,
    body BLOB NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (cluster, hour, token)
);
CREATE INDEX IF NOT EXISTS scan_allocation_by_hour ON scan_allocation (hour);
CREATE INDEX IF NOT EXISTS scan_allocation_by_expiry ON scan_allocation (expires_at);
CREATE TABLE IF NOT EXISTS scan_progress (
    scan_id TEXT PRIMARY KEY,
    shard_count INTEGER NOT NULL,
    done_by TEXT,
    expires_at INTEGER NOT NULL
);
"""


def _activity(record: FindingRecord) -> str:
    at = record.activity_at or max(t for t in (record.last_seen, record.resolved_at) if t is not None)
    return at.isoformat()


class SqliteFindingStore:
    """`ports.FindingStore` over one SQLite file (or ":memory:").

    Args:
        path: the database file; its folder is created. ":memory:" keeps everything in memory.
    """

    def __init__(self, path: Path | str = ":memory:") -> None:
        self.path = str(path)
        self._lock = threading.RLock()  # re-entrant: `transaction()` holds it around the calls it groups
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                if self.path != ":memory:":
                    Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10)
                if self.path != ":memory:":
                    # WAL + synchronous=NORMAL: a committed write is durable against a process crash and
                    # costs no fsync per transaction (only at checkpoints); each conditional write stays
                    # its own atomic statement, so the put_new/update semantics are unchanged.
                    db.execute("PRAGMA journal_mode=WAL")
                    db.execute("PRAGMA synchronous=NORMAL")
                db.executescript(_SCHEMA)
            except (sqlite3.Error, OSError) as exc:
                raise _translate(exc) from exc
            self._db = db
        return self._db

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Group the writes made inside into one transaction (one commit): each conditional write keeps its own
        semantics, and a crash before the end undoes them all (the caller redoes them: scans are idempotent).
        Nested use joins the outer transaction."""
        with self._lock:
            db = self._conn()
            if db.in_transaction:
                yield
                return
            try:
                # IMMEDIATE: take the write lock now (waiting up to the connection's busy timeout), not at the first
                # write, where another writer would make SQLite answer `database is locked` at once
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise _translate(exc) from exc
            try:
                yield
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise
            try:
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise _translate(exc) from exc

    def update_many(self, updates: Sequence[tuple[FindingRecord, int]]) -> list[bool]:
        """`update` for each (record, expected_version), in one transaction; one outcome per update."""
        with self.transaction():
            return [self.update(record, expected_version=version) for record, version in updates]

    def close(self) -> None:
        """Close the connection (a later call reopens it)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def get(self, fingerprint: str) -> FindingRecord | None:
        """The lifecycle record, or None."""
        with self._lock:
            row = self._execute("SELECT body FROM findings WHERE fingerprint = ?", (fingerprint,)).fetchone()
        return FindingRecord.model_validate_json(row[0]) if row else None

    def put_new(self, record: FindingRecord) -> bool:
        """Insert the record unless its fingerprint exists; False for a duplicate."""
        with self._lock:
            cur = self._execute(
                "INSERT OR IGNORE INTO findings (fingerprint, cluster, state, activity_at, version, body) VALUES (?, ?, ?, ?, ?, ?)",
                (record.fingerprint, record.cluster, record.state.value, _activity(record), record.version,
                 record.model_dump_json()),
            )
            return cur.rowcount == 1

    def update(self, record: FindingRecord, *, expected_version: int) -> bool:
        """Replace the record if the stored version is `expected_version`; False on a conflict."""
        with self._lock:
            cur = self._execute(
                "UPDATE findings SET cluster = ?, state = ?, activity_at = ?, version = ?, body = ? "
                "WHERE fingerprint = ? AND version = ?",
                (record.cluster, record.state.value, _activity(record), record.version, record.model_dump_json(),
                 record.fingerprint, expected_version),
            )
            return cur.rowcount == 1

    def open_for_cluster(self, cluster: str) -> list[FindingRecord]:
        """Open records of a cluster, by fingerprint."""
        with self._lock:
            rows = self._execute(
                "SELECT body FROM findings WHERE cluster = ? AND state = ? ORDER BY fingerprint",
                (cluster, FindingState.OPEN.value),
            ).fetchall()
        return [FindingRecord.model_validate_json(r[0]) for r in rows]

    def open_fingerprints(self, cluster: str) -> list[str]:
        """Fingerprints of the open records of a cluster, sorted (no record is parsed)."""
        with self._lock:
            rows = self._execute("SELECT fingerprint FROM findings WHERE cluster = ? AND state = ? ORDER BY fingerprint",
                                 (cluster, FindingState.OPEN.value)).fetchall()
        return [str(r[0]) for r in rows]

    def record_scan_part(self, part: ScanCompleted, *, expires_at: int) -> list[ScanCompleted] | None:
        """`ports.FindingStore.record_scan_part`, in one transaction (tables scan_parts, scan_progress). Rows of
        scans that expire a week before this part does are dropped on the way (the expiry is the caller's clock)."""
        token = part.part_token
        with self.transaction():
            old = expires_at - 7 * 86400
            self._execute("DELETE FROM scan_parts WHERE expires_at < ?", (old,))
            self._execute("DELETE FROM scan_progress WHERE expires_at < ?", (old,))
            self._execute("INSERT OR IGNORE INTO scan_parts (scan_id, token, body, expires_at) VALUES (?, ?, ?, ?)",
                          (part.scan_id, token, part.model_dump_json(), expires_at))
            self._execute("INSERT OR IGNORE INTO scan_progress (scan_id, shard_count, expires_at) VALUES (?, ?, ?)",
                          (part.scan_id, part.shard_count, expires_at))
            shard_count, done_by = self._execute("SELECT shard_count, done_by FROM scan_progress WHERE scan_id = ?",
                                                 (part.scan_id,)).fetchone()
            rows = self._execute("SELECT token, body FROM scan_parts WHERE scan_id = ?", (part.scan_id,)).fetchall()
            if done_by is None and completion_is_whole({str(r[0]) for r in rows}, int(shard_count)):
                self._execute("UPDATE scan_progress SET done_by = ? WHERE scan_id = ? AND done_by IS NULL",
                              (token, part.scan_id))
                done_by = token
            if done_by != token:
                return None
        return [ScanCompleted.model_validate_json(str(r[1])) for r in rows]

    def record_coverage(self, completion: ScanCompleted, *, expires_at: int) -> bool:
        """`ports.FindingStore.record_coverage`: one row per scan shard (table scan_coverage, keyed by cluster, UTC
        hour and "<scan_id>#<shard>"; a redelivery is ignored by the key). Rows that expired before this scan's
        scheduled time are dropped on the way."""
        hour = coverage_hour(completion.scheduled_time)
        body = json.dumps([k.model_dump(mode="json") for k in completion.coverage])
        with self.transaction():
            self._execute("DELETE FROM scan_coverage WHERE expires_at < ?", (int(completion.scheduled_time.timestamp()),))
            cur = self._execute("INSERT OR IGNORE INTO scan_coverage (cluster, hour, token, counts, body, expires_at) "
                                "VALUES (?, ?, ?, ?, ?, ?)",
                                (completion.cluster, hour.isoformat(), f"{completion.scan_id}#{completion.shard}",
                                 1 if completion.shard == 0 else 0, body, expires_at))
            return cur.rowcount == 1

    def coverage(self, *, since: datetime, until: datetime) -> list[CoverageTally]:
        """`ports.FindingStore.coverage`: the rows of the hours overlapping [since, until), summed per cluster and hour."""
        with self._lock:
            rows = self._execute("SELECT cluster, hour, counts, body FROM scan_coverage WHERE hour >= ? AND hour < ? "
                                 "ORDER BY cluster, hour, token",
                                 (coverage_hour(since).isoformat(), until.astimezone(UTC).isoformat())).fetchall()
        tallies: dict[tuple[str, str], tuple[int, list[KindCoverage]]] = {}
        for cluster, hour, counts, body in rows:
            scans, kinds = tallies.get((cluster, hour), (0, []))
            tallies[(cluster, hour)] = (scans + int(counts), kinds + [KindCoverage.model_validate(k) for k in json.loads(body)])
        return [CoverageTally(cluster=c, hour=datetime.fromisoformat(h), scans=n, kinds=sum_kinds(kinds))
                for (c, h), (n, kinds) in sorted(tallies.items())]

    def record_allocation(self, completion: ScanCompleted, *, expires_at: int) -> bool:
        """`ports.FindingStore.record_allocation`: one row per scan shard (table scan_allocation, keyed by cluster,
        UTC hour and "<scan_id>#<shard>"; a redelivery is ignored by the key; the ledger compressed, as the DynamoDB
        item holds it), as `record_coverage`; rows past their expiry are dropped on the way (by an index)."""
        if completion.allocation is None:
            return False
        hour = coverage_hour(completion.scheduled_time)
        with self.transaction():
            self._execute("DELETE FROM scan_allocation WHERE expires_at < ?", (int(completion.scheduled_time.timestamp()),))
            cur = self._execute("INSERT OR IGNORE INTO scan_allocation (cluster, hour, token, counts, body, expires_at) "
                                "VALUES (?, ?, ?, ?, ?, ?)",
                                (completion.cluster, hour.isoformat(), f"{completion.scan_id}#{completion.shard}",
                                 1 if completion.shard == 0 else 0, packed(completion.allocation), expires_at))
            return cur.rowcount == 1

    def allocation(self, *, since: datetime, until: datetime) -> list[AllocationTally]:
        """`ports.FindingStore.allocation`: the rows of the hours overlapping [since, until), added per cluster and
        hour in the order they were recorded (`models.spend.add_allocation`, as the DynamoDB item adds them)."""
        with self._lock:
            rows = self._execute("SELECT cluster, hour, counts, body FROM scan_allocation WHERE hour >= ? AND hour < ? "
                                 "ORDER BY cluster, hour, rowid",
                                 (coverage_hour(since).isoformat(), until.astimezone(UTC).isoformat())).fetchall()
        sums: dict[tuple[str, str], tuple[int, ScanAllocation | None]] = {}
        for cluster, hour, counts, body in rows:
            scans, total = sums.get((cluster, hour), (0, None))
            # a row is compressed JSON; a text row (JSON as written by this branch's first build) is read as such
            one = ScanAllocation.model_validate_json(body) if isinstance(body, str) else unpacked(body)
            sums[(cluster, hour)] = (scans + int(counts), add_allocation(total, one, counts_window=bool(counts)))
        return [AllocationTally(cluster=c, hour=datetime.fromisoformat(h), scans=n, window_s=a.window_s, allocation=a)
                for (c, h), (n, a) in sorted(sums.items()) if a is not None]

    def history(self, *, since: datetime, until: datetime) -> list[FindingRecord]:
        """Records whose latest activity is in [since, until], oldest activity first."""
        with self._lock:
            rows = self._execute("SELECT body FROM findings ORDER BY activity_at, fingerprint", ()).fetchall()
        records = [FindingRecord.model_validate_json(r[0]) for r in rows]
        # activity_at strings may carry different offsets; compare as datetimes, not text
        return [r for r in records if since <= _activity_dt(r) <= until]

    def with_outbox(self) -> list[FindingRecord]:
        """Records whose outbox holds messages decided but not yet handed to a delivery queue (a crash between
        the lifecycle's write and its send)."""
        with self._lock:
            rows = self._execute("SELECT body FROM findings WHERE json_extract(body, '$.outbox_json') != ''", ()).fetchall()
        return [FindingRecord.model_validate_json(r[0]) for r in rows]

    def get_many(self, fingerprints: list[str]) -> dict[str, FindingRecord]:
        """Records of the given fingerprints (absent ones left out), in one query per 500."""
        out: dict[str, FindingRecord] = {}
        with self._lock:
            for k in range(0, len(fingerprints), 500):
                chunk = fingerprints[k:k + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._execute(f"SELECT body FROM findings WHERE fingerprint IN ({marks})", tuple(chunk)).fetchall()
                for (body,) in rows:
                    record = FindingRecord.model_validate_json(body)
                    out[record.fingerprint] = record
        return out

    def delivery_queue(self, name: str) -> DeliveryQueue:
        """The durable delivery queue `name` ("alerts", "tickets", "summary") kept in this database."""
        return DeliveryQueue(self, name)

    def _execute(self, sql: str, params: tuple[object, ...]) -> sqlite3.Cursor:
        try:
            return self._conn().execute(sql, params)
        except sqlite3.Error as exc:
            raise _translate(exc) from exc


@dataclass(frozen=True)
class PendingDelivery:
    """A message waiting in a delivery queue: its row id, JSON body and how often delivery was tried."""

    id: int
    body: str
    attempts: int
    last_error: str


class DeliveryQueue:
    """A durable outbox in the SQLite state (the local chain's alerts / tickets / summary queues).

    `send` stores each message as *pending*, once per identity (`dedupe_key` of the message: an alert's
    `fingerprint:action:scan_id`), so a lifecycle outbox re-sent after a crash is not queued twice. A consumer
    takes `pending()` messages, calls `attempt()` before it calls the sink (so a later run knows the sink may
    already have it), and `done()` only once the sink accepted the message. What is left pending is delivered
    by the next run; nothing is marked done on the producer's side.
    """

    def __init__(self, store: SqliteFindingStore, name: str) -> None:
        self.store = store
        self.name = name
        self.sent: list[str] = []  # bodies queued by this process (for the run's own report)
        #: the messages this process queued, by body: read back without parsing their JSON again (`message`)
        self._models: dict[str, BaseModel] = {}

    def send_each(self, messages: Sequence[BaseModel]) -> Sequence[BaseException | None]:
        """`EnvelopeSender.send_each` for the outbox: one transaction, so every message shares its outcome."""
        try:
            self.send(messages)
        except (GpuWasteError, OSError) as exc:
            return [exc] * len(messages)
        return [None] * len(messages)

    def send(self, messages: Sequence[BaseModel]) -> None:
        """Store the messages as pending (an identity already stored, pending or done, is ignored)."""
        if not messages:
            return
        now = datetime.now(tz=UTC).isoformat()
        rows = []
        for m in messages:
            body = m.model_dump_json()
            rows.append((self.name, _dedupe_key(m, body), body, "pending", now))
            self.sent.append(body)
            self._models[body] = m
        with self.store.transaction():
            try:
                self.store._conn().executemany("INSERT OR IGNORE INTO deliveries (queue, dedupe_key, body, state, "
                                               "created_at) VALUES (?, ?, ?, ?, ?)", rows)
            except sqlite3.Error as exc:
                raise _translate(exc) from exc

    def message(self, body: str, model: type[M]) -> M:
        """The message of a queued body: the one this process sent (frozen, as parsed), else parsed from the JSON.

        Raises:
            ValidationError: the body is not a `model`.
        """
        known = self._models.get(body)
        return known if isinstance(known, model) else model.model_validate_json(body)

    def send_alerts(self, messages: Sequence[BaseModel]) -> None:
        """`ports.AlertQueue.send_alerts`."""
        self.send(messages)

    def after_sent(self, callback: Callable[[], object]) -> None:
        """`ports.AlertQueue.after_sent`: `send` stored the messages already, so the callback runs now."""
        callback()

    def pending(self) -> list[PendingDelivery]:
        """Pending messages, oldest first."""
        with self.store._lock:
            rows = self.store._execute(
                "SELECT id, body, attempts, last_error FROM deliveries WHERE queue = ? AND state = 'pending' ORDER BY id",
                (self.name,)).fetchall()
        return [PendingDelivery(int(r[0]), str(r[1]), int(r[2]), str(r[3])) for r in rows]

    def count_pending(self) -> int:
        """How many messages wait."""
        with self.store._lock:
            row = self.store._execute("SELECT COUNT(*) FROM deliveries WHERE queue = ? AND state = 'pending'",
                                      (self.name,)).fetchone()
        return int(row[0])

    def attempt(self, ids: Sequence[int]) -> None:
        """Count a delivery attempt for these messages (before the sink is called)."""
        self._many("UPDATE deliveries SET attempts = attempts + 1 WHERE id = ?", [(i,) for i in ids])

    def done(self, ids: Sequence[int]) -> None:
        """Mark messages delivered (the sink accepted them)."""
        now = datetime.now(tz=UTC).isoformat()
        self._many("UPDATE deliveries SET state = 'done', done_at = ?, last_error = '' WHERE id = ?",
                   [(now, i) for i in ids])

    def failed(self, id_: int, error: str) -> None:
        """Keep a message pending with the reason its delivery failed."""
        self._many("UPDATE deliveries SET last_error = ? WHERE id = ?", [(error[:1000], id_)])

    def prune(self, *, done_before: datetime) -> int:
        """Forget messages delivered before `done_before` (the state file does not grow without bound); returns how many.
        Also forgets the messages this process kept to read back (the end of a run)."""
        self._models.clear()
        with self.store.transaction():
            cur = self.store._execute("DELETE FROM deliveries WHERE queue = ? AND state = 'done' AND done_at < ?",
                                      (self.name, done_before.astimezone(UTC).isoformat()))
            return int(cur.rowcount)

    def _many(self, sql: str, rows: list[tuple[object, ...]]) -> None:
        if not rows:
            return
        with self.store.transaction():
            try:
                self.store._conn().executemany(sql, rows)
            except sqlite3.Error as exc:
                raise _translate(exc) from exc


def _dedupe_key(message: BaseModel, body: str) -> str:
    """A message's identity in a delivery queue: `fingerprint:action:scan_id` for alerts, else the body's hash."""
    fingerprint = getattr(message, "fingerprint", None)
    action = getattr(message, "action", None)
    if fingerprint and action is not None:
        return f"{fingerprint}:{getattr(action, 'value', action)}:{getattr(message, 'scan_id', '') or '-'}"
    key = getattr(message, "dedupe_key", None)
    if isinstance(key, str) and key:
        return key
    return hashlib.sha256(body.encode()).hexdigest()


#: Seconds a run waits for another run holding the same state file before it gives up (`state_lock`).
STATE_LOCK_WAIT_S = 120.0
_LOCK_POLL_S = 0.1


def lock_path(state: Path | str) -> Path:
    """The advisory lock file beside a state file (`state.db` → `state.db.lock`)."""
    return Path(f"{state}.lock")


@contextlib.contextmanager
def state_lock(state: Path | str, *, wait_s: float = STATE_LOCK_WAIT_S,
               on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the state file exclusively for one run: an advisory `fcntl.flock` on `lock_path(state)` (released by
    the kernel when the process ends, however it ends, so a crashed run never leaves it held). Another run on the
    same state waits for it up to `wait_s` seconds (`on_wait` is told once, with who holds it), then gives up.
    ":memory:" and platforms without `fcntl` are not locked.

    Raises:
        StateInUseError: another process still holds the state after `wait_s` seconds.
        StoreError: the lock file cannot be created.
    """
    if str(state) == ":memory:":
        yield
        return
    try:
        import fcntl
    except ImportError:  # not POSIX: no advisory locks (one run at a time is then the user's to keep)
        yield
        return
    path = lock_path(state)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise _translate(exc) from exc
    try:
        deadline = time.monotonic() + wait_s
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _lock_holder(fd)
                if time.monotonic() >= deadline:
                    raise StateInUseError(
                        f"{state} is in use by another gpuwaste run{holder} for more than {wait_s:.0f} s; "
                        "wait for it to finish, or use another --state") from None
                if not told and on_wait is not None:
                    on_wait(f"{state} is in use by another gpuwaste run{holder}; waiting up to {wait_s:.0f} s")
                    told = True
                time.sleep(_LOCK_POLL_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _lock_holder(fd: int) -> str:
    """The holder as " (pid N)", read from the lock file; empty when it cannot be read."""
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""


def _activity_dt(record: FindingRecord) -> datetime:
    return datetime.fromisoformat(_activity(record))


def _translate(exc: Exception) -> StoreError:
    """SQLite/OS errors → StoreError (a locked or unreadable database may succeed on retry)."""
    return StoreError(f"sqlite store: {type(exc).__name__}: {exc}")


__all__ = ["STATE_LOCK_WAIT_S", "DeliveryQueue", "PendingDelivery", "SqliteFindingStore", "lock_path", "state_lock"]
