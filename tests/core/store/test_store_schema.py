"""The schema is pinned, migrations are idempotent, and old files upgrade intact."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

from sqlite_utils import Database

from app.core.store import SCHEMA_VERSION, Store, migrations

DATA = Path(__file__).resolve().parents[2] / "data"
SCHEMA_V1_DB = DATA / "schema_v1.db"

EXPECTED_COLUMNS = {
    "_migrations": {"version": "INTEGER", "name": "TEXT", "applied_at": "TEXT"},
    "conversations": {
        "id": "INTEGER",
        "title": "TEXT",
        "created_at": "TEXT",
        "updated_at": "TEXT",
        "model": "TEXT",
        "preset": "TEXT",
        "settings": "TEXT",
        "system_prompt": "TEXT",
    },
    "messages": {
        "id": "INTEGER",
        "conversation_id": "INTEGER",
        "role": "TEXT",
        "content": "TEXT",
        "created_at": "TEXT",
        "token_count": "INTEGER",
        "state": "TEXT",
        "prompt_tokens": "INTEGER",
        "generated_tokens": "INTEGER",
        "reused_tokens": "INTEGER",
        "ttft_s": "REAL",
        "tokens_per_s": "REAL",
        "peak_memory_bytes": "INTEGER",
        "kv_bits": "INTEGER",
        "summary_id": "INTEGER",
        "error": "TEXT",
        "writer_id": "INTEGER",
        "reasoning": "TEXT",
        "reasoning_tokens": "INTEGER",
        "reasoning_s": "REAL",
        "recalled": "TEXT",
        "pinned": "INTEGER",
    },
    "summaries": {
        "id": "INTEGER",
        "conversation_id": "INTEGER",
        "first_message_id": "INTEGER",
        "last_message_id": "INTEGER",
        "content": "TEXT",
        "token_count": "INTEGER",
        "method": "TEXT",
        "created_at": "TEXT",
        "superseded_by": "INTEGER",
        "cause": "TEXT",
        "limit_tokens": "INTEGER",
        "trim_at_tokens": "INTEGER",
    },
    "documents": {
        "id": "INTEGER",
        "conversation_id": "INTEGER",
        "name": "TEXT",
        "size_bytes": "INTEGER",
        "sha256": "TEXT",
        "segment_tokens": "INTEGER",
        "segments_total": "INTEGER",
        "status": "TEXT",
        "created_at": "TEXT",
        "error": "TEXT",
        "writer_id": "INTEGER",
    },
    "writers": {
        "id": "INTEGER",
        "host": "TEXT",
        "pid": "INTEGER",
        "process_started_at": "REAL",
        "store_token": "TEXT",
        "opened_at": "TEXT",
    },
    "document_segments": {
        "id": "INTEGER",
        "document_id": "INTEGER",
        "segment_index": "INTEGER",
        "token_count": "INTEGER",
        "notes": "TEXT",
        "tokens_per_s": "REAL",
        "peak_memory_bytes": "INTEGER",
        "kv_bytes": "INTEGER",
        "created_at": "TEXT",
    },
    "quality_checks": {
        "id": "INTEGER",
        "model_identity": "TEXT",
        "model_folder": "TEXT",
        "settings_key": "TEXT",
        "measured_at": "TEXT",
        "seconds": "REAL",
        "cancelled": "INTEGER",
        "reference": "TEXT",
    },
    "quality_results": {
        "id": "INTEGER",
        "check_id": "INTEGER",
        "model_identity": "TEXT",
        "settings_key": "TEXT",
        "cell": "TEXT",
        "measured_at": "TEXT",
        "complete": "INTEGER",
        "verdict": "TEXT",
        "metrics": "TEXT",
    },
    "tool_calls": {
        "id": "INTEGER",
        "conversation_id": "INTEGER",
        "message_id": "INTEGER",
        "position": "INTEGER",
        "call_id": "TEXT",
        "server": "TEXT",
        "tool": "TEXT",
        "arguments": "TEXT",
        "result": "TEXT",
        "is_error": "INTEGER",
        "decision": "TEXT",
        "cut_note": "TEXT",
        "original_tokens": "INTEGER",
        "result_tokens": "INTEGER",
        "seconds": "REAL",
        "created_at": "TEXT",
    },
    "messages_fts": {"content": ""},
    "conversations_fts": {"title": ""},
}

EXPECTED_INDEXES = {
    "messages_by_conversation",
    "messages_by_summary",
    "messages_generating",
    "summaries_by_conversation",
    "documents_by_conversation",
    "conversations_by_update",
    "messages_by_writer",
    "documents_by_writer",
    "quality_checks_by_model",
    "quality_results_by_model",
    "quality_results_by_check",
    "messages_pinned",
    "tool_calls_by_message",
    "tool_calls_by_conversation",
}

EXPECTED_TRIGGERS = {
    f"{table}_fts_after_{event}"
    for table in ("messages", "conversations")
    for event in ("insert", "delete", "update")
}

EXPECTED_FOREIGN_KEYS = {
    ("messages", "conversation_id", "conversations", "CASCADE"),
    ("messages", "summary_id", "summaries", "SET NULL"),
    ("summaries", "conversation_id", "conversations", "CASCADE"),
    ("summaries", "first_message_id", "messages", "NO ACTION"),
    ("summaries", "last_message_id", "messages", "NO ACTION"),
    ("summaries", "superseded_by", "summaries", "NO ACTION"),
    ("documents", "conversation_id", "conversations", "CASCADE"),
    ("document_segments", "document_id", "documents", "CASCADE"),
    ("messages", "writer_id", "writers", "SET NULL"),
    ("documents", "writer_id", "writers", "SET NULL"),
    ("quality_results", "check_id", "quality_checks", "CASCADE"),
    ("tool_calls", "conversation_id", "conversations", "CASCADE"),
    ("tool_calls", "message_id", "messages", "CASCADE"),
}


def _columns(db: Database) -> dict[str, dict[str, str]]:
    """Return {table: {column: declared type}}, without FTS5's shadow tables."""
    shadow = ("_data", "_idx", "_docsize", "_config", "_content")
    tables = [
        name
        for name in db.table_names()
        if not (name.endswith(shadow) and "_fts_" in name)
    ]
    return {
        table: {row[1]: row[2] for row in db.execute(f"PRAGMA table_info({table})")}
        for table in tables
    }


def _schema_objects(db: Database, kind: str) -> set[str]:
    rows = db.execute(
        "SELECT name FROM sqlite_master WHERE type = ? AND name NOT LIKE 'sqlite_%'",
        [kind],
    )
    return {row[0] for row in rows}


def _foreign_keys(db: Database) -> set[tuple[str, str, str, str]]:
    keys = set()
    for table in EXPECTED_COLUMNS:
        for row in db.execute(f"PRAGMA foreign_key_list({table})"):
            # (id, seq, table, from, to, on_update, on_delete, match)
            keys.add((table, row[3], row[2], row[6]))
    return keys


def test_fresh_schema_matches_expected(store):
    assert _columns(store.db) == EXPECTED_COLUMNS
    assert _schema_objects(store.db, "index") == EXPECTED_INDEXES
    assert _schema_objects(store.db, "trigger") == EXPECTED_TRIGGERS
    assert _foreign_keys(store.db) == EXPECTED_FOREIGN_KEYS


def test_store_uses_wal_foreign_keys_and_busy_timeout(store):
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert store.db.execute("PRAGMA busy_timeout").fetchone()[0] > 0


def test_schema_version_is_the_last_migration(store):
    numbers = [m.version for m in migrations.registered()]
    assert numbers == list(range(1, len(numbers) + 1))
    assert numbers[-1] == SCHEMA_VERSION
    assert store.schema_version == SCHEMA_VERSION
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    rows = store.db.execute("SELECT version, name FROM _migrations").fetchall()
    assert rows == [(m.version, m.name) for m in migrations.registered()]


def test_reopening_applies_nothing_again(db_path, clock):
    Store.open(db_path, clock=clock).close()
    with Store.open(db_path, clock=clock) as store:
        assert store.db.execute("SELECT COUNT(*) FROM _migrations").fetchone()[
            0
        ] == len(migrations.registered())
        assert migrations.migrate(store.db) == []


def test_every_migration_tolerates_a_half_finished_earlier_run(tmp_path):
    """Running a migration's body again (after a partial run) changes nothing."""
    reference = Database(tmp_path / "reference.db")
    migrations.migrate(reference)

    db = Database(tmp_path / "partial.db")
    for step in migrations.registered():
        step.apply(db)  # a run that died before recording itself...
    assert migrations.migrate(db) == [m.version for m in migrations.registered()]
    assert _columns(db) == _columns(reference)
    assert _schema_objects(db, "trigger") == _schema_objects(reference, "trigger")
    assert _schema_objects(db, "index") == _schema_objects(reference, "index")


def test_migration_1_indexes_rows_written_before_its_fts_tables_existed(tmp_path):
    db = Database(tmp_path / "partial.db")
    for statement in migrations._V1_TABLES:  # died after the tables, before FTS
        db.execute(statement)
    db.execute(
        "INSERT INTO conversations (id, title, created_at, updated_at)"
        " VALUES (1, 'Espresso notes', 'x', 'x')"
    )
    migrations.migrate(db)
    hits = db.execute(
        "SELECT rowid FROM conversations_fts WHERE conversations_fts MATCH 'espresso'"
    ).fetchall()
    assert hits == [(1,)]


def _all_rows(path: Path) -> dict[str, list[dict]]:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    tables = [
        "conversations",
        "messages",
        "summaries",
        "documents",
        "document_segments",
    ]
    rows = {
        t: [dict(r) for r in conn.execute(f"SELECT * FROM {t} ORDER BY id")]
        for t in tables
    }
    conn.close()
    return rows


def test_schema_v1_file_upgrades_with_every_row_intact(tmp_path, clock):
    path = tmp_path / "old.db"
    shutil.copyfile(SCHEMA_V1_DB, path)
    before = _all_rows(path)
    assert sum(len(rows) for rows in before.values()) > 10

    with Store.open(path, clock=clock) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.recovered_replies == 1
        assert store.recovered_from is None
        cafe = store.get_conversation(1)
        assert cafe.title == "Café recipes — ünïcode title"
        assert cafe.settings == {"temperature": 0.7, "max_tokens": 512, "kv_bits": 8}
        all_messages = store.messages(1, include_trimmed=True)
        assert [m.content for m in all_messages][-1] == "Equal parts espresso and"
        assert all_messages[-1].state == "interrupted"
        context = store.context_for_model(1)
        assert [type(e).__name__ for e in context.entries] == [
            "Summary",
            "Message",
            "Message",
        ]
        assert store.next_segment_index(1) == 2
        assert store.get_document(1).status == "interrupted"
        assert [hit.message_id for hit in store.search("ristretto")] == [2]
        assert (
            store.export_json(2)["messages"][1]["error"]
            == "Out of memory while generating."
        )

    after = _all_rows(path)
    # The only changes an upgrade may make: the crash recovery at open.
    before["messages"][3]["state"] = "interrupted"
    before["documents"][0]["status"] = "interrupted"
    for table, rows in before.items():
        assert len(after[table]) == len(rows), table
        for old, new in zip(rows, after[table], strict=True):
            # Later migrations may add columns; every old column keeps its value.
            assert {k: new[k] for k in old} == old, table


def test_fixture_script_builds_a_schema_v1_file(tmp_path):
    """The committed file is what the committed script produces (row for row)."""
    sys.path.insert(0, str(DATA))
    try:
        import make_schema_v1_db
    finally:
        sys.path.remove(str(DATA))
    rebuilt = tmp_path / "rebuilt.db"
    make_schema_v1_db.build(rebuilt)
    assert _all_rows(rebuilt) == _all_rows(SCHEMA_V1_DB)
    # Also a guard for "a shipped migration is never edited": migration 1 must still
    # produce exactly the schema of the committed file.
    assert _schema_sql(rebuilt) == _schema_sql(SCHEMA_V1_DB)


def _schema_sql(path: Path) -> list[tuple]:
    conn = sqlite3.connect(path)
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master ORDER BY type, name"
    ).fetchall()
    rows.append(("user_version", "", conn.execute("PRAGMA user_version").fetchone()[0]))
    conn.close()
    return rows


def test_store_package_imports_neither_qt_nor_mlx():
    code = (
        "import sys, app.core.store; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'mlx', 'mlx_lm')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    root = Path(__file__).resolve().parents[3]
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_stores_opening_a_new_file_at_once_migrate_it_once(db_path, clock):
    """The CLI and the app may open (and migrate) the same file at the same moment."""
    db_path.parent.mkdir(parents=True)
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def open_store() -> None:
        barrier.wait()
        try:
            Store.open(db_path, clock=clock).close()
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT version FROM _migrations").fetchall() == [
        (m.version,) for m in migrations.registered()
    ]
    conn.close()
