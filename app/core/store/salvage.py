"""Salvaging a damaged database: nothing that can still be read disappears.

SQLite's ``quick_check`` fails for a damaged page anywhere in the file, but most
damage touches one table: often only the full-text search index, which is derived
from the messages and can be rebuilt from them. So `database.open_database` asks
which tables are damaged (`damaged_tables`) and then

* repairs the file in place when only search indexes (or free pages) are damaged
  (`rebuild_search_indexes`): nothing the user wrote is touched;
* otherwise copies every row it can still read into a fresh database
  (`copy_readable_rows`), stepping over damaged pages by row id, and says how many
  rows could not be read (`SalvageReport`).

`swapless import` uses `copy_readable_rows` too, to bring back the conversations of a
database file that was set aside.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sqlite_utils import Database

from app.core.files import private_files
from app.core.store import migrations
from app.core.store.records import format_time, utc_now

# Search index (FTS5 table) -> the table and column it indexes.
SEARCH_INDEXES = {
    "messages_fts": ("messages", "content"),
    "conversations_fts": ("conversations", "title"),
}

# Copied in this order so parents come before the rows that point at them (foreign
# keys are off while copying, but the order keeps the new file's pages tidy).
_COPIED_TABLES = (
    "writers",
    "conversations",
    "messages",
    "summaries",
    "tool_calls",
    "documents",
    "document_segments",
    "quality_checks",
    "quality_results",
)
# What each kind of row is called in the report.
_ROW_NOUNS = {
    "writers": "writer records",
    "conversations": "conversations",
    "messages": "messages",
    "summaries": "summaries",
    "tool_calls": "tool calls",
    "documents": "documents",
    "document_segments": "document notes",
    "quality_checks": "quality checks",
    "quality_results": "quality results",
}
# Nullable references cleared when what they point at could not be read.
_NULLABLE_REFERENCES = (
    ("messages", "summary_id", "summaries"),
    ("messages", "writer_id", "writers"),
    ("documents", "writer_id", "writers"),
    ("summaries", "superseded_by", "summaries"),
)
_MIN_ROWID = -(2**63)
_MAX_ROWID = 2**63 - 1


@dataclass(frozen=True)
class SalvageReport:
    """What `copy_readable_rows` could and could not copy.

    Attributes:
        copied: Rows copied, per table.
        unreadable: Rows that could not be read, per table (counted from the gaps
            in the row ids around damaged pages, so an upper bound: rows deleted
            earlier leave gaps too).
        unreadable_tables: Tables of which nothing could be read.
        recreated_conversations: Conversations whose own row was lost but whose
            messages were read; they come back under a placeholder title.
    """

    copied: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, int] = field(default_factory=dict)
    unreadable_tables: tuple[str, ...] = ()
    recreated_conversations: int = 0
    damaged_to_the_end: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        """Whether every row was read."""
        return not (
            any(self.unreadable.values())
            or self.unreadable_tables
            or self.damaged_to_the_end
        )

    def describe(self) -> str:
        """Return one sentence saying what was kept and what could not be read."""
        kept = (
            f"{self.copied.get('conversations', 0) + self.recreated_conversations:,} "
            f"conversation(s) with {self.copied.get('messages', 0):,} message(s) "
            "were kept"
        )
        if self.complete:
            return f"{kept}; every row could be read."
        if not any(self.copied.values()) and not self.recreated_conversations:
            return "nothing in it could be read."
        lost = [
            f"up to {count:,} {_ROW_NOUNS.get(table, table)}"
            for table, count in self.unreadable.items()
            if count
        ]
        lost += [
            f"all {_ROW_NOUNS.get(table, table)}" for table in self.unreadable_tables
        ]
        lost += [
            f"the last {_ROW_NOUNS.get(table, table)} (how many is unknown)"
            for table in self.damaged_to_the_end
            if table not in self.unreadable_tables
        ]
        sentence = f"{kept}; could not be read: {', '.join(lost)}"
        if self.recreated_conversations:
            sentence += (
                f" ({self.recreated_conversations:,} conversation(s) lost their title "
                "and came back as 'Recovered conversation')"
            )
        return sentence + "."


def damaged_tables(conn: sqlite3.Connection) -> set[str] | None:
    """Return the tables that fail ``quick_check`` (each with its indexes).

    Args:
        conn: A connection to the damaged file.

    Returns:
        The names of the damaged tables (empty when only free pages are damaged),
        or None if even the list of tables cannot be read.
    """
    try:
        tables = conn.execute(
            "SELECT name, sql FROM sqlite_schema WHERE type = 'table'"
        ).fetchall()
    except sqlite3.DatabaseError:
        return None
    damaged = set()
    for name, sql in tables:
        if (sql or "").upper().startswith("CREATE VIRTUAL"):
            continue  # checked through its shadow tables
        try:
            ok = conn.execute(f'PRAGMA quick_check("{name}")').fetchall() == [("ok",)]
        except sqlite3.DatabaseError:
            ok = False
        if not ok:
            damaged.add(name)
    return damaged


def search_index_of(table: str) -> str | None:
    """Return the search index that ``table`` belongs to, if it is a shadow table."""
    for index in SEARCH_INDEXES:
        if table.startswith(f"{index}_"):
            return index
    return None


def rebuild_search_indexes(path: Path, indexes: set[str]) -> bool:
    """Drop the damaged search ``indexes`` of the file and build them again in place.

    A damaged index cannot be emptied or dropped the normal way (both walk its
    damaged pages), so its schema rows are removed directly (the documented
    ``writable_schema`` route), ``VACUUM`` then rewrites the file without the
    orphaned pages, and the index is created again from the rows it indexes.
    Only derived data is removed: every message and title stays as it was.

    Args:
        path: The database file; no other connection may be writing to it.
        indexes: Names from `SEARCH_INDEXES`; may be empty (only free pages are
            damaged, which ``VACUUM`` alone repairs).

    Returns:
        Whether the file passes ``quick_check`` afterwards.
    """
    try:
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            if indexes:
                conn.execute("PRAGMA writable_schema = ON")
                conn.execute("BEGIN IMMEDIATE")
                for index in sorted(indexes):
                    # The virtual table, its shadow tables and its triggers.
                    conn.execute(
                        "DELETE FROM sqlite_schema WHERE name = ? OR name GLOB ?",
                        [index, f"{index}_*"],
                    )
                conn.execute("COMMIT")
                conn.execute("PRAGMA writable_schema = OFF")
        # A new connection reads the schema without the removed rows.
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute("VACUUM")
            conn.execute("BEGIN IMMEDIATE")
            for index in sorted(indexes):
                for statement in migrations.search_index_statements(
                    *SEARCH_INDEXES[index]
                ):
                    conn.execute(statement)
            conn.execute("COMMIT")
            return conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
    except sqlite3.DatabaseError:
        return False


def copy_readable_rows(source: Path, target: Path) -> SalvageReport:
    """Copy every readable row of the database ``source`` into a new file ``target``.

    ``target`` gets the current schema (migrated like any new store) and the rows
    keep their ids, so summaries and documents still point at their messages. Rows
    are read by row id; a damaged page is stepped over by searching for the first
    row id after it that can be read again. Messages whose conversation row was lost
    get a placeholder conversation, and optional links to lost rows are cleared.

    Args:
        source: The damaged file; only read (through a read-only connection).
        target: Where to write the new database; must not exist (or be empty).

    Returns:
        What was copied and what could not be read.
    """
    private_files.create_private_file(target)  # it will hold conversations
    uri = f"{source.absolute().as_uri()}?mode=ro"
    with (
        contextlib.closing(sqlite3.connect(uri, uri=True)) as old,
        contextlib.closing(sqlite3.connect(target, isolation_level=None)) as new,
    ):
        # Damaged text must not stop the copy: keep what decodes, mark the rest.
        old.text_factory = lambda raw: raw.decode("utf-8", "replace")
        migrations.migrate(Database(new, execute_plugins=False))
        new.execute("PRAGMA foreign_keys = OFF")
        old_columns = _columns_by_table(old)
        copied: dict[str, int] = {}
        unreadable: dict[str, int] = {}
        lost_tables: list[str] = []
        to_the_end: list[str] = []
        new.execute("BEGIN IMMEDIATE")
        for table in _COPIED_TABLES:
            if table not in old_columns:
                if old_columns:
                    continue  # an older schema without this table: nothing to copy
                lost_tables.append(table)
                continue
            wanted = [
                column
                for column in _table_columns(new, table)
                if column in old_columns[table]
            ]
            reader = _RowReader(old, table, wanted)
            count = 0
            insert = (
                f"INSERT OR IGNORE INTO {table} ({', '.join(wanted)})"
                f" VALUES ({', '.join('?' * len(wanted))})"
            )
            for row in reader.rows():
                try:
                    count += new.execute(insert, row).rowcount
                except sqlite3.IntegrityError:
                    reader.unreadable += 1  # a damaged value that breaks a rule
            copied[table] = count
            if reader.nothing_readable:
                lost_tables.append(table)
                continue
            if reader.unreadable:
                unreadable[table] = reader.unreadable
            if reader.damaged_to_the_end:
                to_the_end.append(table)
        recreated = _recreate_lost_conversations(new)
        for table, column, parent in _NULLABLE_REFERENCES:
            new.execute(
                f"UPDATE {table} SET {column} = NULL WHERE {column} IS NOT NULL"
                f" AND {column} NOT IN (SELECT id FROM {parent})"
            )
        # A call whose reply could not be read has nothing to belong to.
        new.execute(
            "DELETE FROM tool_calls WHERE message_id NOT IN (SELECT id FROM messages)"
        )
        new.execute("COMMIT")
    return SalvageReport(
        copied, unreadable, tuple(lost_tables), recreated, tuple(to_the_end)
    )


class _RowReader:
    """Reads a table's rows in row-id order, stepping over damaged pages."""

    def __init__(self, conn: sqlite3.Connection, table: str, columns: list[str]):
        self._conn = conn
        self._select = (
            f"SELECT rowid, {', '.join(columns)} FROM {table}"
            " WHERE rowid >= ? ORDER BY rowid"
        )
        self._single = (
            f"SELECT rowid, {', '.join(columns)} FROM {table} WHERE rowid = ?"
        )
        self._probe = (
            f"SELECT rowid FROM {table} WHERE rowid >= ? ORDER BY rowid LIMIT 1"
        )
        self.unreadable = 0
        self.nothing_readable = False
        self.damaged_to_the_end = False

    def rows(self) -> Iterator[tuple]:
        """Yield every readable row (without its row id)."""
        start = _MIN_ROWID
        read_any = False
        while True:
            try:
                for row in self._conn.execute(self._select, [start]):
                    read_any = True
                    yield row[1:]
                    if row[0] == _MAX_ROWID:
                        return
                    start = row[0] + 1
                return
            except sqlite3.DatabaseError:
                # sqlite3 reads one row ahead, so the last row before the damage
                # may not have been returned yet: take it on its own.
                found = self._seek(start)
                if found is None:
                    return
                if found is not False:
                    row = self._conn.execute(self._single, [found]).fetchone()
                    read_any = True
                    yield row[1:]
                    if found == _MAX_ROWID:
                        return
                    start = found + 1
                    continue
                resume = self._first_readable_after(start)
                if resume is None:
                    # Damaged up to the end: the count of rows lost is unknown.
                    self.damaged_to_the_end = True
                    self.nothing_readable = not read_any
                    return
                # Ids start at 1; rows deleted earlier also leave gaps (upper bound).
                self.unreadable += max(1, resume - (start if read_any else 1))
                start = resume

    def _first_readable_after(self, damaged: int) -> int | None:
        """Return the first row id after ``damaged`` whose page can be read.

        Seeking a row id on a damaged page fails, and seeking past the page works,
        so the boundary is found by doubling steps and then halving them.
        """
        low, step = damaged, 1
        while True:
            high = min(damaged + step, _MAX_ROWID)
            found = self._seek(high)
            if found is not False:
                break
            if high == _MAX_ROWID:
                return None
            low, step = high, step * 2
        while high - low > 1:
            middle = (low + high) // 2
            probe = self._seek(middle)
            if probe is False:
                low = middle
            else:
                high, found = middle, probe
        return None if found is None else int(found)

    def _seek(self, rowid: int) -> int | None | bool:
        """Return the first row id >= ``rowid``, None past the end, False if damaged."""
        try:
            row = self._conn.execute(self._probe, [rowid]).fetchone()
        except sqlite3.DatabaseError:
            return False
        return None if row is None else row[0]


def _columns_by_table(conn: sqlite3.Connection) -> dict[str, set[str]]:
    try:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table'"
            )
        ]
    except sqlite3.DatabaseError:
        return {}
    columns = {}
    for name in names:
        with contextlib.suppress(sqlite3.DatabaseError):
            columns[name] = set(_table_columns(conn, name))
    return columns


def _table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]


def _recreate_lost_conversations(conn: sqlite3.Connection) -> int:
    """Give rows whose conversation was lost a placeholder conversation; return how many."""
    orphans = conn.execute(
        "SELECT conversation_id, MIN(created_at), MAX(created_at) FROM ("
        " SELECT conversation_id, created_at FROM messages"
        " UNION ALL SELECT conversation_id, created_at FROM summaries"
        " UNION ALL SELECT conversation_id, created_at FROM documents)"
        " WHERE conversation_id NOT IN (SELECT id FROM conversations)"
        " GROUP BY conversation_id"
    ).fetchall()
    now = format_time(utc_now())
    for conversation_id, first, last in orphans:
        conn.execute(
            "INSERT INTO conversations (id, title, created_at, updated_at)"
            " VALUES (?, ?, ?, ?)",
            [
                conversation_id,
                f"Recovered conversation {conversation_id}",
                first or now,
                last or now,
            ],
        )
    return len(orphans)
