"""Opening the SQLite file safely, and turning SQLite's failures into words.

Everything that can go wrong with the *file* rather than with a query is handled here:
a damaged file is repaired (a damaged search index rebuilt in place) or salvaged
(every readable row copied into a new file, the damaged one kept aside, never
overwritten; see `salvage`), a file from a newer Swapless is
refused before anything writes to it, and full disks, read-only locations, locks and
I/O errors become `StoreError`s that name the path. The rest of the store only runs
queries.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlite_utils import Database

from app.core.errors import StoreError
from app.core.files import private_files
from app.core.store import locking, migrations, salvage

logger = logging.getLogger(__name__)

# Less free space than this (a few SQLite pages and a WAL frame) is a full disk.
DISK_FULL_BYTES = 1024 * 1024

_CORRUPT_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
# Files SQLite keeps next to the database; a stale one must follow the file it
# belongs to, or SQLite would replay it into the new, empty database.
_SIDECAR_SUFFIXES = ("-wal", "-shm", "-journal")


@dataclass(frozen=True)
class OpenedDatabase:
    """A ready-to-use database and what happened while opening it.

    Attributes:
        db: The migrated database.
        recovered_from: Where a damaged file was set aside, or None.
        salvage_report: What was copied out of the damaged file, or None.
        rebuilt_search_index: Whether a damaged search index was rebuilt in place.
    """

    db: Database
    recovered_from: Path | None
    salvage_report: salvage.SalvageReport | None = None
    rebuilt_search_index: bool = False


def open_database(path: Path, now: datetime) -> OpenedDatabase:
    """Open (creating if needed), check and migrate the database at ``path``.

    The order matters: integrity and version are checked through a read-only
    connection, so a file that is refused stays byte-for-byte as it was; only then is
    WAL switched on and the schema migrated.

    Args:
        path: The database file.
        now: Current time, used to name the backup of a corrupt file.

    Returns:
        The opened database and the backup path if the old file was corrupt.

    Raises:
        StoreError: The file is from a newer Swapless, or cannot be opened or
            written (read-only location, full disk, locked, I/O error).
    """
    with translate_errors(path):
        try:
            private_files.make_private_dir(path.parent)
        except OSError as exc:
            raise StoreError(
                f"Swapless cannot create the folder {path.parent} for its conversation "
                f"database: {exc.strerror or exc}."
            ) from exc
        _check_is_a_file(path)
        _make_private(path)
        conn, recovery = _connect_checked(path, now)
        db = Database(conn, execute_plugins=False)
        try:
            locking.while_busy(db.conn, lambda: _prepare(db))
        except BaseException:
            db.close()
            raise
    return OpenedDatabase(
        db, recovery.backup, recovery.salvage_report, recovery.rebuilt_search_index
    )


def open_read_only_database(path: Path) -> Database:
    """Open the database at ``path`` for reading only: nothing is created, repaired,
    migrated or written (a home on a read-only mount: a backup).

    A WAL file needs a shared-memory file beside it, which a read-only folder cannot
    get; such a file is then opened as immutable (what the last checkpoint holds).

    Raises:
        StoreError: The file is missing, not a Swapless database, from a newer
            Swapless, or an older one that would need migrating first.
    """
    if not path.is_file():
        raise StoreError(f"There is no conversation database at {path} to read.")
    uri = path.absolute().as_uri()
    with translate_errors(path):
        conn = None
        for options in ("mode=ro", "mode=ro&immutable=1"):
            conn = sqlite3.connect(
                f"{uri}?{options}", uri=True, check_same_thread=False
            )
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
                break
            except sqlite3.OperationalError:
                conn.close()
                conn = None
        if conn is None:
            raise StoreError(f"Swapless cannot read the conversation database {path}.")
        conn.execute(f"PRAGMA busy_timeout = {locking.BUSY_TIMEOUT_MS}")
        db = Database(conn, execute_plugins=False)
        found = migrations.schema_version(db)
        try:
            migrations.refuse_newer(found, path)
            if found < migrations.SCHEMA_VERSION:
                raise StoreError(
                    f"The conversation database {path} was written by an older "
                    f"Swapless (schema version {found}) and must be upgraded before "
                    "it can be read, which a read-only folder does not allow: copy "
                    "it somewhere writable and open that copy."
                )
        except BaseException:
            db.close()
            raise
    return db


@dataclass(frozen=True)
class _Recovery:
    backup: Path | None = None
    salvage_report: salvage.SalvageReport | None = None
    rebuilt_search_index: bool = False


def _check_is_a_file(path: Path) -> None:
    """Refuse a database path that is a folder, a device or another special file.

    SQLite would report those as a generic disk error (or, for ``/dev/null``, open an
    empty database that can never be saved), which names the wrong cause.

    Raises:
        StoreError: ``path`` exists (or is a symbolic link) but is not a regular file.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            raise StoreError(
                f"The conversation database {path} is a symbolic link to "
                f"{os.readlink(path)}, which does not exist. Remove the link or make it "
                "point to the database file."
            ) from None
        return
    except OSError as exc:
        raise StoreError(
            f"Swapless cannot access its conversation database {path}: "
            f"{exc.strerror or exc}."
        ) from exc
    if stat.S_ISREG(info.st_mode):
        return
    kind = _FILE_KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
    where = (
        f"{path} (a link to {os.path.realpath(path)})" if path.is_symlink() else path
    )
    raise StoreError(
        f"The conversation database {where} is {kind}, not a database file. Move it "
        "away, or set SWAPLESS_HOME to another folder, and start Swapless again."
    )


_FILE_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a named pipe",
    stat.S_IFSOCK: "a socket",
}


def _make_private(path: Path) -> None:
    """Create the file readable only by this user, or tighten an existing one.

    SQLite gives its WAL and shared-memory files the database file's permissions, so
    they follow.
    """
    try:
        if private_files.create_private_file(path):
            return
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise StoreError(_disk_full_message(path)) from exc
        return  # SQLite will say what is wrong with the location
    changed = [
        candidate
        for candidate in (
            path,
            *(path.with_name(path.name + s) for s in _SIDECAR_SUFFIXES),
        )
        if private_files.make_private(candidate)
    ]
    if changed:
        logger.warning(
            "Swapless made %s readable only by you (other users of this computer "
            "could read your conversations).",
            ", ".join(str(p) for p in changed),
        )


def _connect_checked(path: Path, now: datetime) -> tuple[sqlite3.Connection, _Recovery]:
    """Connect to ``path`` after checking it, repairing or salvaging a damaged file.

    The checks use a read-only connection: unlike a normal one, it never
    checkpoints a WAL into the main file when it closes, so a refused or corrupt
    file keeps its exact bytes.

    Raises:
        StoreError: The file was written by a newer Swapless, or is damaged and
            could not be set aside.
    """
    if not path.exists():
        return _connect(path), _Recovery()
    checker = _connect_read_only(path)
    try:
        corrupt = _is_corrupt(checker, path)
        damaged = salvage.damaged_tables(checker) if corrupt else None
    finally:
        checker.close()
    recovery = _repair(path, damaged, now) if corrupt else _Recovery()
    return _connect(path), recovery


def _repair(path: Path, damaged: set[str] | None, now: datetime) -> _Recovery:
    """Make the damaged file at ``path`` usable again, losing nothing readable.

    Only search indexes damaged: they are rebuilt in place from the messages.
    Anything else: every readable row is copied into a new file that takes the
    place of the damaged one, which is kept next to it (`_move_aside`).
    """
    if damaged is not None:
        indexes = {salvage.search_index_of(table) for table in damaged}
        if None not in indexes and salvage.rebuild_search_indexes(
            path, {index for index in indexes if index is not None}
        ):
            logger.warning("Rebuilt the damaged search index of %s in place.", path)
            return _Recovery(rebuilt_search_index=True)
    salvaged = path.with_name(path.name + ".salvage")
    _remove_with_sidecars(salvaged)  # left by a salvage that was interrupted
    report: salvage.SalvageReport | None = None
    try:
        report = salvage.copy_readable_rows(path, salvaged)
    except (OSError, sqlite3.Error) as exc:
        logger.warning("Could not salvage rows from %s: %s", path, exc)
        _remove_with_sidecars(salvaged)
    backup = _move_aside(path, now, replacement=salvaged if report else None)
    return _Recovery(backup=backup, salvage_report=report)


def _remove_with_sidecars(path: Path) -> None:
    for candidate in (
        path,
        *(path.with_name(path.name + s) for s in _SIDECAR_SUFFIXES),
    ):
        with contextlib.suppress(FileNotFoundError):
            candidate.unlink()


def _connect_read_only(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    conn.execute(f"PRAGMA busy_timeout = {locking.BUSY_TIMEOUT_MS}")
    return conn


def _connect(path: Path) -> sqlite3.Connection:
    # The Store serialises all access with a lock, so the connection may be shared
    # by the UI thread and the generation thread.
    conn = sqlite3.connect(str(path), check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {locking.BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _is_corrupt(conn: sqlite3.Connection, path: Path) -> bool:
    """Return whether the file is not SQLite or fails ``PRAGMA quick_check``.

    Only corruption answers True: a locked or unreadable file raises instead, because
    moving a healthy database aside would hide the user's conversations.

    Raises:
        StoreError: The file was written by a newer Swapless. The header is checked
            before anything parses the schema, which a newer Swapless may have made
            unreadable to this SQLite.
    """
    try:
        migrations.refuse_newer(migrations.header_version(conn), path)
        if conn.execute("PRAGMA quick_check").fetchall() != [("ok",)]:
            return True
        migrations.refuse_newer(migrations.recorded_version(conn), path)
    except sqlite3.DatabaseError as exc:
        if _primary_code(exc) in _CORRUPT_CODES:
            return True
        raise
    return False


def _move_aside(path: Path, now: datetime, replacement: Path | None = None) -> Path:
    """Rename a corrupt database (and its sidecar files) to ``<name>.corrupt-<time>``.

    Args:
        path: The damaged file.
        now: Names the backup.
        replacement: A salvaged file that takes the damaged one's place. The damaged
            file is then linked to its backup name before the replacement moves in,
            so at every moment ``path`` holds one of the two.

    Returns:
        The new path of the corrupt file.
    """
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    backup = path.with_name(f"{path.name}.corrupt-{stamp}")
    counter = 1
    while backup.exists():
        counter += 1
        backup = path.with_name(f"{path.name}.corrupt-{stamp}-{counter}")
    try:
        # Sidecars first: a crash half-way must not leave an old WAL or journal
        # next to the fresh database that will be created at ``path``.
        for suffix in _SIDECAR_SUFFIXES:
            sidecar = path.with_name(path.name + suffix)
            if sidecar.exists():
                os.replace(sidecar, backup.with_name(backup.name + suffix))
        if replacement is None:
            os.replace(path, backup)
        else:
            try:
                os.link(path, backup)
            except OSError:
                os.replace(path, backup)  # no hard links here: a moment without it
            os.replace(replacement, path)
    except OSError as exc:
        raise StoreError(
            f"The conversation database {path} is damaged and Swapless could not move "
            f"it aside to {backup}: {exc.strerror or exc}. Move or delete it yourself "
            "to start a new one."
        ) from exc
    return backup


def _prepare(db: Database) -> None:
    """Switch to WAL, migrate and probe writability; safe to repeat after a failure.

    Switching the journal mode of a new file does not wait for the busy timeout (it
    needs the file to itself and fails at once), so several processes opening a new
    file together repeat this (`locking.while_busy`). Migrations check under the
    write lock whether another process applied them already.
    """
    try:
        _enable_wal(db)
        migrations.migrate(db)
        _check_writable(db)
    except sqlite3.OperationalError:
        db.rollback()
        raise


def _enable_wal(db: Database) -> None:
    # WAL lets the UI read while a reply is being saved, and a crash mid-write
    # cannot damage what was committed before.
    if db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
        return  # the file says so already: nothing to change, no lock needed
    with db.ensure_autocommit_on():
        db.conn.execute("PRAGMA journal_mode = WAL").fetchall()


def _check_writable(db: Database) -> None:
    """Fail now, not at the first reply, if the database cannot be written.

    An up-to-date file is opened without writing anything, so a read-only file or
    folder would otherwise go unnoticed until the user's first message. The probe
    rewrites a header field with its own value and rolls back: nothing changes.

    Raises:
        sqlite3.OperationalError: The file is read-only (or locked, or the disk fails).
    """
    locking.begin_immediate(db.conn)
    try:
        version = migrations.header_version(db.conn)
        db.conn.execute(f"PRAGMA user_version = {version}")
    finally:
        db.conn.rollback()


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def describe_error(exc: sqlite3.Error, path: Path | str) -> str | None:
    """Return a message for the user if ``exc`` is a fault of the environment.

    Args:
        exc: An error raised by sqlite3.
        path: The database file, named in the message.

    Returns:
        The message, or None if the error is a bug (bad SQL, constraint violation).
    """
    code = _primary_code(exc)
    if code == sqlite3.SQLITE_FULL or (
        code in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN) and _disk_is_full(path)
    ):
        return _disk_full_message(path)
    if code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM):
        return (
            f"The conversation database {path} is read-only, so Swapless cannot save "
            "to it. Check the permissions of the file and its folder."
        )
    if code == sqlite3.SQLITE_CANTOPEN:
        return (
            f"Swapless cannot open the conversation database {path}. Check that the "
            "folder exists and is writable."
        )
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return (
            f"The conversation database {path} is locked by another program. Close "
            "other Swapless windows or processes and try again."
        )
    if code == sqlite3.SQLITE_IOERR:
        return (
            f"A disk error occurred while using the conversation database {path} "
            f"({exc}). Check the disk; everything saved before is still there."
        )
    if code in _CORRUPT_CODES:
        return (
            f"The conversation database {path} is damaged. Restart Swapless: it will "
            "keep every conversation it can still read and set the damaged file aside."
        )
    if code == sqlite3.SQLITE_NOMEM:
        return f"Out of memory while using the conversation database {path}."
    return None


def _disk_full_message(path: Path | str) -> str:
    return (
        f"The disk is full: Swapless cannot write to its conversation database {path}. "
        "Free some space and try again; everything saved before is still there."
    )


def _disk_is_full(path: Path | str) -> bool:
    """Return whether the file system holding ``path`` has (almost) no room left.

    SQLite reports a disk that fills while it creates its WAL or shared-memory file as
    an I/O error, not as "full".
    """
    folder = Path(path).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free < DISK_FULL_BYTES
    except OSError:
        return False


@contextlib.contextmanager
def translate_errors(path: Path | str) -> Iterator[None]:
    """Turn sqlite3 errors caused by the environment into `StoreError`.

    Other sqlite3 errors are bugs and propagate unchanged.
    """
    try:
        yield
    except sqlite3.Error as exc:
        message = describe_error(exc, path)
        if message is None:
            raise
        raise StoreError(message) from exc
