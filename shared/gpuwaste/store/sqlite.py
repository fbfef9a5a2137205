"""Adapter: the finding lifecycle store in SQLite (local runs, `gpuwaste run`, `gpuwaste demo`).

Every write is conditional, as in DynamoDB: `put_new` inserts only when the fingerprint is absent and
`update` replaces only when the stored version is the expected one. One connection, guarded by a lock,
so the store is safe to share between threads of one process. A file database runs in WAL mode with
`synchronous=NORMAL` (no fsync per committed write; a power loss may lose the last few writes, never
corrupt the file — the next scan re-sends every open finding anyway).
"""

from __future__ import annotations

import sqlite3
import threading
from datetime import datetime
from pathlib import Path

from gpuwaste.errors import StoreError
from gpuwaste.models.lifecycle import FindingRecord, FindingState

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
        self._lock = threading.Lock()
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

    def history(self, *, since: datetime, until: datetime) -> list[FindingRecord]:
        """Records whose latest activity is in [since, until], oldest activity first."""
        with self._lock:
            rows = self._execute("SELECT body FROM findings ORDER BY activity_at, fingerprint", ()).fetchall()
        records = [FindingRecord.model_validate_json(r[0]) for r in rows]
        # activity_at strings may carry different offsets; compare as datetimes, not text
        return [r for r in records if since <= _activity_dt(r) <= until]

    def _execute(self, sql: str, params: tuple[object, ...]) -> sqlite3.Cursor:
        try:
            return self._conn().execute(sql, params)
        except sqlite3.Error as exc:
            raise _translate(exc) from exc


def _activity_dt(record: FindingRecord) -> datetime:
    return datetime.fromisoformat(_activity(record))


def _translate(exc: Exception) -> StoreError:
    """SQLite/OS errors → StoreError (a locked or unreadable database may succeed on retry)."""
    return StoreError(f"sqlite store: {type(exc).__name__}: {exc}")


__all__ = ["SqliteFindingStore"]
