"""Build ``schema_v1.db``: a small database in the first released store schema.

The file is committed next to this script and opened by the current `Store` in
``tests/core/store/test_store_schema.py`` to prove that upgrades keep every row.
It is built by applying migration 1 only (shipped migrations never change) and
inserting rows with plain SQL, so running this script in a later release still
produces a schema-1 file. Do not regenerate the committed file without reason:
its bytes are the point.

Run from the repository root::

    .venv/bin/python tests/data/make_schema_v1_db.py
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUTPUT = Path(__file__).with_name("schema_v1.db")


def build(path: Path) -> None:
    """Write the schema-1 fixture database to ``path`` (replacing it)."""
    sys.path.insert(0, str(REPO))
    from sqlite_utils import Database

    from app.core.store.migrations import migrate

    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA page_size = 1024")  # the committed file stays small
    db = Database(conn, execute_plugins=False)
    migrate(db, up_to=1)
    with db.atomic():
        _insert_rows(db)
    db.execute("VACUUM")
    db.close()


def _insert_rows(db) -> None:
    db.execute(
        "INSERT INTO conversations"
        " (id, title, created_at, updated_at, model, preset, settings, system_prompt)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            1,
            "Café recipes — ünïcode title",
            "2025-01-02T10:00:00.000000Z",
            "2025-01-02T10:05:00.000000Z",
            "mlx-community/Qwen2.5-0.5B-Instruct-4bit",
            "Balanced",
            '{"temperature": 0.7, "max_tokens": 512, "kv_bits": 8}',
            "You are a helpful cook.",
        ],
    )
    db.execute(
        "INSERT INTO conversations"
        " (id, title, created_at, updated_at, model, preset, settings, system_prompt)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            2,
            "Reading a report",
            "2025-01-03T09:00:00.000000Z",
            "2025-01-03T09:30:00.000000Z",
            "/Users/me/models/tiny",
            None,
            "{}",
            "",
        ],
    )
    messages = [
        # id, conversation, role, content, created_at, token_count, state, error, stats
        (1, 1, "user", "How do I make a flat white?", "2025-01-02T10:00:01.000000Z",
         9, "complete", None, (None,) * 7),
        (2, 1, "assistant", "Pull a double ristretto, then add steamed milk.",
         "2025-01-02T10:00:02.000000Z", 12, "complete", None,
         (40, 12, 0, 0.25, 31.5, 734003200, 8)),
        (3, 1, "user", "And a cortado?", "2025-01-02T10:04:00.000000Z",
         5, "complete", None, (None,) * 7),
        (4, 1, "assistant", "Equal parts espresso and", "2025-01-02T10:04:01.000000Z",
         None, "generating", None, (None,) * 7),
        (5, 2, "user", "Summarise the attached report.", "2025-01-03T09:00:01.000000Z",
         6, "complete", None, (None,) * 7),
        (6, 2, "assistant", "The report says", "2025-01-03T09:00:02.000000Z",
         4, "error", "Out of memory while generating.",
         (2048, 4, 1024, 1.5, 9.0, 2147483648, None)),
    ]  # fmt: skip
    for mid, cid, role, content, created, tokens, state, error, stats in messages:
        db.execute(
            "INSERT INTO messages (id, conversation_id, role, content, created_at,"
            " token_count, state, error, prompt_tokens, generated_tokens,"
            " reused_tokens, ttft_s, tokens_per_s, peak_memory_bytes, kv_bits)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [mid, cid, role, content, created, tokens, state, error, *stats],
        )
    db.execute(
        "INSERT INTO summaries (id, conversation_id, first_message_id, last_message_id,"
        " content, token_count, method, created_at, superseded_by)"
        " VALUES (1, 1, 1, 2, 'The user asked how to make a flat white.', 11,"
        " 'model', '2025-01-02T10:03:00.000000Z', NULL)"
    )
    db.execute("UPDATE messages SET summary_id = 1 WHERE id IN (1, 2)")
    db.execute(
        "INSERT INTO documents (id, conversation_id, name, size_bytes, sha256,"
        " segment_tokens, segments_total, status, created_at, error)"
        " VALUES (1, 2, 'report.txt', 48213, ?, 1024, 3, 'reading',"
        " '2025-01-03T09:00:00.500000Z', NULL)",
        ["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"],
    )
    for index, notes in enumerate(["Revenue grew 12%.", "Costs fell in Q3."]):
        db.execute(
            "INSERT INTO document_segments (document_id, segment_index, token_count,"
            " notes, tokens_per_s, peak_memory_bytes, kv_bytes, created_at)"
            " VALUES (1, ?, 1024, ?, 55.5, 1073741824, 16777216, ?)",
            [index, notes, f"2025-01-03T09:1{index}:00.000000Z"],
        )


if __name__ == "__main__":
    build(OUTPUT)
    print(f"wrote {OUTPUT}")
