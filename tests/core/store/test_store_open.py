"""Opening: newer files refused untouched, corrupt files moved aside, faults in words.

Tests run as root, which ignores file permissions, so a read-only database is made
with SQLite's own switches (``PRAGMA query_only``, ``mode=ro``) and a full disk with
``PRAGMA max_page_count``; both produce the same SQLite errors as the real thing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from app.core.errors import KnownError, StoreError
from app.core.files import paths
from app.core.store import SCHEMA_VERSION, Store, locking
from app.core.store import database as store_database


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _make_store_with_one_conversation(path: Path, clock) -> int:
    with Store.open(path, clock=clock) as store:
        conversation_id = store.create_conversation("Kept")
        store.add_message(conversation_id, "user", "Saved before the fault.")
        return conversation_id


def _pretend_newer(path: Path, clock) -> None:
    _make_store_with_one_conversation(path, clock)
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO _migrations (version, name, applied_at)"
        " VALUES (?, 'm002_from_the_future', '2030-01-01T00:00:00.000000Z')",
        [SCHEMA_VERSION + 1],
    )
    conn.commit()
    conn.close()


def test_default_path_is_under_swapless_home(swapless_home):
    with Store.open() as store:
        assert store.path == paths.database_path()
        assert store.path.parent == swapless_home
        assert store.path.exists()


def test_database_from_a_newer_version_is_refused_and_left_untouched(db_path, clock):
    _pretend_newer(db_path, clock)
    files_before = sorted(p.name for p in db_path.parent.iterdir())
    digest = sha256_of(db_path)

    with pytest.raises(StoreError) as raised:
        Store.open(db_path, clock=clock)

    message = str(raised.value)
    assert str(db_path) in message
    assert f"schema version {SCHEMA_VERSION + 1}" in message
    assert f"supports schema version {SCHEMA_VERSION}" in message
    assert "Upgrade Swapless" in message
    assert sha256_of(db_path) == digest
    # SQLite's read-only check may leave an empty WAL index behind; nothing else.
    new_files = {p.name for p in db_path.parent.iterdir()} - set(files_before)
    assert new_files <= {"swapless.db-wal", "swapless.db-shm"}
    wal = db_path.with_name("swapless.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0


def test_newer_schema_this_sqlite_cannot_parse_is_refused_not_moved_aside(
    db_path, clock
):
    """A newer Swapless may use SQL this SQLite rejects as a "malformed schema"."""
    _make_store_with_one_conversation(db_path, clock)
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE future (x)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = 'CREATE TABLE future (x) WITH FUTURE SYNTAX'"
        " WHERE name = 'future'"
    )
    conn.commit()
    conn.close()
    digest = sha256_of(db_path)

    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}"):
        Store.open(db_path, clock=clock)
    assert sha256_of(db_path) == digest
    assert not list(db_path.parent.glob("*.corrupt-*"))


def test_newer_database_with_unsaved_wal_frames_is_left_untouched(tmp_path, clock):
    """A newer Swapless that crashed leaves its last writes in the WAL only."""
    live = tmp_path / "live" / "swapless.db"
    _make_store_with_one_conversation(live, clock)
    writer = sqlite3.connect(live)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute(
        "INSERT INTO _migrations VALUES (?, 'm002_from_the_future', 'x')",
        [SCHEMA_VERSION + 1],
    )
    writer.commit()
    crashed = tmp_path / "crashed"
    shutil.copytree(live.parent, crashed)  # the files as a kill -9 would leave them
    writer.close()
    db_path = crashed / "swapless.db"
    wal = crashed / "swapless.db-wal"
    assert wal.stat().st_size > 0
    digests = (sha256_of(db_path), sha256_of(wal))

    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}"):
        Store.open(db_path, clock=clock)
    assert (sha256_of(db_path), sha256_of(wal)) == digests


def _assert_fresh_store_after_recovery(db_path: Path, clock, original: bytes) -> None:
    """Open an unreadable file with a clock that starts at 2025-06-01 12:00 UTC."""
    with Store.open(db_path, clock=clock) as store:
        backup = store.recovered_from
        assert backup is not None
        assert backup.parent == db_path.parent
        # The clock ticks once before the move.
        assert backup.name == "swapless.db.corrupt-20250601T120001Z"
        assert backup.read_bytes() == original
        assert store.list_conversations() == []
        conversation_id = store.create_conversation("Fresh start")
        store.add_message(conversation_id, "user", "works again")
    with Store.open(db_path, clock=clock) as store:
        assert store.recovered_from is None
        assert [c.title for c in store.list_conversations()] == ["Fresh start"]


def test_random_bytes_are_moved_aside_and_a_new_store_starts(db_path, new_clock):
    db_path.parent.mkdir(parents=True)
    original = os.urandom(64 * 1024)
    db_path.write_bytes(original)
    _assert_fresh_store_after_recovery(db_path, new_clock(), original)


def test_truncated_database_is_moved_aside_with_its_sidecar_files(
    db_path, clock, new_clock
):
    with Store.open(db_path, clock=clock) as store:
        conversation_id = store.create_conversation("Long")
        with store.db.atomic():  # one commit: faster than 300
            for i in range(300):
                store.add_message(conversation_id, "user", f"message {i} " + "w " * 80)
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = db_path.read_bytes()
    original = data[: len(data) // 2]
    db_path.write_bytes(original)
    wal = db_path.with_name(db_path.name + "-wal")
    wal.write_bytes(b"stale wal bytes")

    _assert_fresh_store_after_recovery(db_path, new_clock(), original)

    moved_wal = db_path.with_name("swapless.db.corrupt-20250601T120001Z-wal")
    assert moved_wal.read_bytes() == b"stale wal bytes"


def test_second_corruption_in_the_same_second_gets_its_own_backup(db_path, clock):
    db_path.parent.mkdir(parents=True)
    first_backup = db_path.with_name("swapless.db.corrupt-20250601T120001Z")
    first_backup.write_bytes(b"an earlier backup")
    db_path.write_bytes(b"not a database" * 100)
    with Store.open(db_path, clock=clock) as store:
        assert store.recovered_from == db_path.with_name(
            "swapless.db.corrupt-20250601T120001Z-2"
        )
    assert first_backup.read_bytes() == b"an earlier backup"


def test_empty_file_is_a_valid_new_database(db_path, clock):
    db_path.parent.mkdir(parents=True)
    db_path.touch()
    with Store.open(db_path, clock=clock) as store:
        assert store.recovered_from is None
        assert store.schema_version == SCHEMA_VERSION


def test_locked_database_is_an_error_not_corruption(db_path, clock, monkeypatch):
    _make_store_with_one_conversation(db_path, clock)
    monkeypatch.setattr(locking, "BUSY_TIMEOUT_MS", 50)
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("PRAGMA journal_mode = DELETE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="locked"):
            Store.open(db_path, clock=clock)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not list(db_path.parent.glob("*.corrupt-*"))
    with Store.open(db_path, clock=clock) as store:
        assert [c.title for c in store.list_conversations()] == ["Kept"]


def test_unopenable_location_is_a_store_error_naming_the_path(tmp_path, clock):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where a folder should be")
    path = blocker / "swapless.db"
    with pytest.raises(StoreError) as raised:
        Store.open(path, clock=clock)
    assert str(blocker) in str(raised.value)
    assert isinstance(raised.value, KnownError)


def test_writes_to_a_read_only_database_raise_store_error_and_keep_data(db_path, clock):
    conversation_id = _make_store_with_one_conversation(db_path, clock)
    with Store.open(db_path, clock=clock) as store:
        store.db.execute("PRAGMA query_only = ON")
        with pytest.raises(StoreError) as raised:
            store.add_message(conversation_id, "user", "cannot be saved")
        assert "read-only" in str(raised.value)
        assert str(db_path) in str(raised.value)
        # Reads still work, and the store is usable once writing is possible again.
        assert [m.content for m in store.messages(conversation_id)] == [
            "Saved before the fault."
        ]
        store.db.execute("PRAGMA query_only = OFF")
        store.add_message(conversation_id, "user", "saved later")
    with Store.open(db_path, clock=clock) as store:
        assert len(store.messages(conversation_id)) == 2


def test_opening_a_read_only_file_raises_store_error(db_path, clock, monkeypatch):
    conversation_id = _make_store_with_one_conversation(db_path, clock)
    monkeypatch.setattr(store_database, "_connect", store_database._connect_read_only)
    with pytest.raises(StoreError, match="read-only"):
        Store.open(db_path, clock=clock)
    monkeypatch.undo()
    with Store.open(db_path, clock=clock) as store:
        assert [m.content for m in store.messages(conversation_id)] == [
            "Saved before the fault."
        ]


@pytest.mark.skipif(shutil.which("chattr") is None, reason="needs chattr (Linux)")
def test_really_immutable_folder_raises_store_error(tmp_path, clock):
    """Even root cannot write into a folder marked immutable (where supported)."""
    folder = tmp_path / "immutable"
    folder.mkdir()
    path = folder / "swapless.db"
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
        pytest.skip("file system does not support the immutable flag")
    try:
        with pytest.raises(StoreError) as raised:
            Store.open(path, clock=clock)
        assert str(path) in str(raised.value)
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_full_disk_raises_store_error_and_keeps_saved_rows(db_path, clock):
    conversation_id = _make_store_with_one_conversation(db_path, clock)
    with Store.open(db_path, clock=clock) as store:
        pages = store.db.execute("PRAGMA page_count").fetchone()[0]
        store.db.execute(f"PRAGMA max_page_count = {pages + 1}")
        reply_id = store.begin_reply(conversation_id)
        with pytest.raises(StoreError) as raised:
            store.finish_reply(reply_id, "x" * 200_000)
        assert "disk is full" in str(raised.value)
        assert str(db_path) in str(raised.value)
        # The failed transaction was rolled back as a whole.
        assert store.get_message(reply_id).state == "generating"
        with pytest.raises(StoreError, match="disk is full"):
            export = store.export_json(conversation_id)
            export["conversation"]["system_prompt"] = "y" * 200_000
            store.import_json(export)
        assert len(store.list_conversations()) == 1
    with Store.open(db_path, clock=clock) as store:
        assert store.recovered_replies == 1
        assert [m.content for m in store.messages(conversation_id)] == [
            "Saved before the fault.",
            "",
        ]


def test_sqlite_errors_that_are_bugs_are_not_disguised(store, conversation_id):
    with pytest.raises(sqlite3.IntegrityError):
        store.db.execute(
            "INSERT INTO messages (conversation_id, role, created_at) VALUES (?, 'robot', 'x')",
            [conversation_id],
        )
    with (
        pytest.raises(sqlite3.OperationalError),
        store_database.translate_errors("x.db"),
    ):
        store.db.execute("SELECT * FROM no_such_table")
