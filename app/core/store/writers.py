"""Who writes each unfinished reply or document, and recovery from writers that died.

The window and any number of terminal commands share one database. A reply stays
``generating`` while its process streams it, so "generating" alone cannot tell a
crash-left reply from one that is being written right now. Each open `Store` that
starts a reply or a document reading records itself once in ``writers`` (host, process
id, process start time and a token naming this very store), and the unfinished row
points at that writer. When a store opens, it marks ``interrupted`` only the rows whose
writer is gone: a dead or replaced process, or a store of this process that was closed.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading

from sqlite_utils import Database

from app.core.files import process_identity
from app.core.files.process_identity import ProcessIdentity
from app.core.store.base import StoreBase, inserted_id
from app.core.store.records import format_time, utc_now

# Tokens of the stores open in this process: the process is alive, so its own
# writers are alive exactly while their store is open.
_open_tokens: set[str] = set()
_open_tokens_lock = threading.Lock()

_UNFINISHED = (
    ("messages", "state", "generating"),
    ("documents", "status", "reading"),
)


class WritersMixin(StoreBase):
    """Writer bookkeeping and crash recovery of `Store`."""

    def _start_writing(self) -> None:
        """Give this store its token; rows it starts from now on name it."""
        self._writer_token = secrets.token_hex(16)
        self._writer_row: int | None = None
        with _open_tokens_lock:
            _open_tokens.add(self._writer_token)

    def _writer_id(self, db: Database) -> int:
        """Return this store's row in ``writers``, inserting it on first use.

        Must run inside the write transaction of the row that will reference it: if
        that transaction rolls back, so does a new writer row, and the next call
        inserts it again.
        """
        if self._writer_row is not None:
            found = db.execute(
                "SELECT 1 FROM writers WHERE id = ?", [self._writer_row]
            ).fetchone()
            if found:
                return self._writer_row
        me = process_identity.current()
        self._writer_row = inserted_id(
            db.table("writers").insert(
                {
                    "host": me.host,
                    "pid": me.pid,
                    "process_started_at": me.started_at,
                    "store_token": self._writer_token,
                    # Bookkeeping, not content: the real time, not the store's clock.
                    "opened_at": format_time(utc_now()),
                }
            )
        )
        return self._writer_row

    def recover_interrupted(self) -> int:
        """Mark replies and documents whose writer is gone as ``interrupted``.

        Called by `Store.open`. Rows a running process (or another open store of this
        process) is still writing are left alone. Text saved so far is kept; document
        reading can be resumed from `next_segment_index`.

        Returns:
            The number of replies that were left ``generating``.
        """
        with self._reading() as db:
            writers = list(db.query("SELECT * FROM writers"))
            unfinished = [
                row[0]
                for table, column, value in _UNFINISHED
                for row in db.execute(
                    f"SELECT DISTINCT writer_id FROM {table} WHERE {column} = ?",
                    [value],
                )
            ]
        dead = [w["id"] for w in writers if not _writer_is_running(w)]
        known = {w["id"] for w in writers}
        # A row without a (known) writer was started before writers were recorded.
        orphaned = any(w is None or w not in known for w in unfinished)
        if not dead and not orphaned:
            return 0  # the common case: no write lock needed to open the store
        gone = "writer_id IS NULL OR writer_id NOT IN (SELECT id FROM writers)"
        if dead:
            gone += f" OR writer_id IN ({', '.join('?' * len(dead))})"
        with self._writing() as db:
            counts = [
                db.execute(
                    f"UPDATE {table} SET {column} = 'interrupted', writer_id = NULL"
                    f" WHERE {column} = ? AND ({gone})",
                    [value, *dead],
                ).rowcount
                for table, column, value in _UNFINISHED
            ]
            if dead:
                db.execute(
                    f"DELETE FROM writers WHERE id IN ({', '.join('?' * len(dead))})",
                    dead,
                )
        return counts[0]

    def _stop_writing(self) -> None:
        """Forget this store's writer: its unfinished rows become recoverable.

        A writer row that no unfinished row points at is deleted now; otherwise the
        next store to open marks those rows interrupted and deletes it.
        """
        with _open_tokens_lock:
            _open_tokens.discard(self._writer_token)
        if self._writer_row is None:
            return
        conn = self._db.conn
        try:
            with self._lock:
                # One busy timeout at most, not `locking.while_busy`: closing must
                # not wait on other processes for a row the next open can delete.
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(
                        "DELETE FROM writers WHERE id = ?"
                        " AND NOT EXISTS (SELECT 1 FROM messages WHERE writer_id = ?)"
                        " AND NOT EXISTS (SELECT 1 FROM documents WHERE writer_id = ?)",
                        [self._writer_row] * 3,
                    )
                    conn.execute("COMMIT")
                except BaseException:
                    conn.rollback()
                    raise
        except sqlite3.Error:
            pass  # a full or locked disk: the next open deletes it instead


def _writer_is_running(row: dict) -> bool:
    identity = ProcessIdentity(
        host=row["host"], pid=row["pid"], started_at=row["process_started_at"]
    )
    if not process_identity.is_running(identity):
        return False
    me = process_identity.current()
    if (identity.host, identity.pid) == (me.host, me.pid):
        with _open_tokens_lock:
            return row["store_token"] in _open_tokens
    return True
