"""Taking SQLite's write lock with several processes on one file: wait while it moves.

SQLite's busy timeout makes a writer wait up to `BUSY_TIMEOUT_MS` for the lock, polling
it every few tens of milliseconds. It is not fair: two processes writing back to back
can take the lock in turns between a third one's polls for longer than any timeout,
although nothing is stuck. So a write that times out is tried again for as long as the
database keeps changing (``PRAGMA data_version`` moves whenever another connection
commits): a busy file is waited for, and only a lock that makes no progress for a whole
busy timeout (a process stuck mid-transaction) becomes an error.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

# Long enough to ride out another thread's or process's short write, short enough
# that a stuck lock becomes a readable error instead of a frozen window.
BUSY_TIMEOUT_MS = 5000
MAX_WAIT_S = 120.0
"""Even a lock that keeps moving is given up after this long."""

_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})

T = TypeVar("T")


def is_busy(exc: sqlite3.Error) -> bool:
    """True when ``exc`` means another connection holds a lock we need."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _BUSY_CODES


def while_busy(conn: sqlite3.Connection, attempt: Callable[[], T]) -> T:
    """Run ``attempt`` until it gets past SQLite's locks, while others make progress.

    Args:
        conn: The connection ``attempt`` uses (it must not be inside a transaction
            when an attempt fails: callers roll back before raising).
        attempt: Does the locking work; raises sqlite3.OperationalError when busy.

    Returns:
        What ``attempt`` returned.

    Raises:
        sqlite3.OperationalError: The lock did not move for a whole busy timeout, or
            ``MAX_WAIT_S`` passed.
    """
    started = time.monotonic()
    version = _data_version(conn)
    moved_at = started
    pause = 0.005
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            now = time.monotonic()
            current = _data_version(conn)
            if current != version:
                version, moved_at = current, now
            stuck = now - moved_at >= BUSY_TIMEOUT_MS / 1000
            if stuck or now - started >= MAX_WAIT_S:
                raise
        # Random pauses keep the waiting processes from colliding in lockstep.
        time.sleep(pause * (1 + random.random()))
        pause = min(pause * 2, 0.1)


def begin_immediate(conn: sqlite3.Connection) -> None:
    """Start a write transaction that holds the write lock from its first statement.

    A deferred transaction would read first and ask for the lock at its first write;
    if another process wrote in between, SQLite fails it at once with "database is
    locked" instead of waiting.
    """
    while_busy(conn, lambda: conn.execute("BEGIN IMMEDIATE"))


def _data_version(conn: sqlite3.Connection) -> int | None:
    try:
        return conn.execute("PRAGMA data_version").fetchone()[0]
    except sqlite3.Error:
        return None
