"""What every part of the `Store` shares: the connection, the lock and the clock.

The store's methods are grouped by subject in mixins (conversations, messages,
summaries, documents, search, export, import) that all build on `StoreBase`. Every public
method reads inside `_reading()` or writes inside `_writing()`, so each write is one
transaction, access from the UI and the generation thread is serialised, and
environment failures reach the caller as `StoreError`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlite_utils import Database
from sqlite_utils.db import Table

from app.core.errors import StoreError
from app.core.store import locking
from app.core.store.database import translate_errors
from app.core.store.records import format_time


def inserted_id(table: Table) -> int:
    """The primary key of the row that ``table.insert(...)`` just wrote."""
    row_id = table.last_pk
    # None only after an insert that wrote nothing (ignore=True on a conflict).
    assert row_id is not None, "a plain insert always sets last_pk"
    return row_id


@contextlib.contextmanager
def _immediate(db: Database) -> Iterator[None]:
    """Run the block in a write transaction, or in a savepoint of the open one."""
    if db.conn.in_transaction:
        with db.atomic():  # a nested write: a savepoint of the outer transaction
            yield
        return
    locking.begin_immediate(db.conn)
    try:
        yield
    except BaseException:
        db.rollback()  # a no-op if the error already ended the transaction
        raise
    try:
        db.conn.execute("COMMIT")
    except BaseException:
        db.rollback()
        raise


class NotFoundError(StoreError, LookupError):
    """A conversation, message, summary or document id does not exist (any more)."""


class StoreBase:
    """Connection, lock and clock shared by the store's mixins."""

    def __init__(self, db: Database, path: Path, clock: Callable[[], datetime]) -> None:
        self._db = db
        self._path = path
        self._clock = clock
        # Re-entrant: a public method may call another one while holding it.
        self._lock = threading.RLock()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Database]:
        """Yield the database inside a read transaction (one consistent snapshot)."""
        with self._lock, translate_errors(self._path), self._db.atomic():
            yield self._db

    @contextlib.contextmanager
    def _writing(self) -> Iterator[Database]:
        """Yield the database inside one transaction, rolled back on any error.

        The transaction takes SQLite's write lock when it begins and waits for it
        while other processes write (`locking.begin_immediate`).
        """
        # The transaction is innermost so the rollback happens before the error is
        # translated.
        with self._lock, translate_errors(self._path), _immediate(self._db):
            yield self._db

    def _now(self) -> str:
        return format_time(self._clock())

    def _touch(self, db: Database, conversation_id: int, now: str) -> None:
        """Record that a conversation gained content at ``now`` (moves it up the list)."""
        db.execute(
            "UPDATE conversations SET updated_at = ? WHERE id = ?",
            [now, conversation_id],
        )

    def _row(self, db: Database, table: str, row_id: int, what: str) -> dict[str, Any]:
        """Return one row by id.

        Raises:
            NotFoundError: No row has that id.
        """
        rows = list(db.query(f"SELECT * FROM {table} WHERE id = ?", [row_id]))
        if not rows:
            raise NotFoundError(
                f"{what} {row_id} does not exist (it may have been deleted)."
            )
        return rows[0]
