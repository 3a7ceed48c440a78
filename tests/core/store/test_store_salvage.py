"""Salvage: a damaged page never hides what can still be read.

Each test damages a real SQLite file by overwriting one chosen page with garbage (the
page found through SQLite's ``dbstat`` table), then opens it as Swapless would.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from app.cli.main import main
from app.core.store import Store

PAGE_SIZE = 4096
CONVERSATIONS = 4
MESSAGES_EACH = 150


def _build(path: Path, clock) -> dict[int, list[str]]:
    """A store of several conversations whose tables span many pages."""
    texts: dict[int, list[str]] = {}
    with Store.open(path, clock=clock) as store:
        with store.db.atomic():
            for c in range(CONVERSATIONS):
                conversation_id = store.create_conversation(f"Conversation {c}")
                texts[conversation_id] = []
                for i in range(MESSAGES_EACH):
                    text = f"note {c}-{i} " + " ".join(
                        f"word{(i * j + c) % 311}" for j in range(50)
                    )
                    store.add_message(conversation_id, "user", text)
                    texts[conversation_id].append(text)
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return texts


def _pages(path: Path, table: str, kind: str = "leaf") -> list[tuple[int, int]]:
    """Return ``(page number, cells)`` of the pages of ``table`` of that kind."""
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT pageno, ncell FROM dbstat WHERE name = ? AND pagetype = ?"
            " ORDER BY pageno",
            [table, kind],
        ).fetchall()


def _damage(path: Path, page: int) -> bytes:
    """Overwrite one page with garbage; return the damaged file's bytes."""
    garbage = random.Random(page).randbytes(PAGE_SIZE)
    with path.open("r+b") as file:
        file.seek((page - 1) * PAGE_SIZE)
        file.write(garbage)
    return path.read_bytes()


def _quick_check_fails(path: Path) -> bool:
    with sqlite3.connect(path) as conn:
        try:
            return conn.execute("PRAGMA quick_check").fetchall() != [("ok",)]
        except sqlite3.DatabaseError:
            return True


def _all_texts(store: Store) -> dict[int, list[str]]:
    return {
        c.id: [m.content for m in store.messages(c.id)]
        for c in store.list_conversations()
    }


def test_damaged_search_index_is_rebuilt_in_place_and_nothing_is_lost(db_path, clock):
    texts = _build(db_path, clock)
    with Store.open(db_path, clock=clock) as store:
        hits_before = store.search("word7", limit=10_000)
    page, _ = _pages(db_path, "messages_fts_data")[1]
    _damage(db_path, page)
    assert _quick_check_fails(db_path)

    with Store.open(db_path, clock=clock) as store:
        assert store.rebuilt_search_index
        assert store.recovered_from is None
        assert "nothing was lost" in store.recovery_notice()
        assert _all_texts(store) == texts
        # The index answers again, as it did before the damage.
        assert store.search("word7", limit=10_000) == hits_before
    assert not list(db_path.parent.glob("*.corrupt-*"))
    assert not _quick_check_fails(db_path)
    with Store.open(db_path, clock=clock) as store:
        assert store.recovery_notice() is None


def test_damaged_message_page_keeps_every_other_row_and_counts_the_lost(db_path, clock):
    texts = _build(db_path, clock)
    page, cells = _pages(db_path, "messages")[5]
    damaged = _damage(db_path, page)

    with Store.open(db_path, clock=clock) as store:
        backup = store.recovered_from
        report = store.salvage
        kept = _all_texts(store)
        notice = store.recovery_notice()
        # Usable at once: new messages are saved next to the salvaged ones.
        store.add_message(min(kept), "user", "written after the salvage")
    assert backup is not None and backup.read_bytes() == damaged
    assert report is not None and report.unreadable == {"messages": cells}
    assert f"up to {cells} messages" in notice and str(backup) in notice
    assert sorted(kept) == sorted(texts)  # every conversation is still there
    kept_count = sum(len(v) for v in kept.values())
    assert kept_count == CONVERSATIONS * MESSAGES_EACH - cells
    for conversation_id, contents in kept.items():
        assert set(contents) <= set(texts[conversation_id])
    with Store.open(db_path, clock=clock) as store:
        assert store.recovery_notice() is None
        assert sum(len(v) for v in _all_texts(store).values()) == kept_count + 1


def test_lost_conversation_rows_come_back_with_a_placeholder_title(db_path, clock):
    texts = _build(db_path, clock)
    ((page, _),) = _pages(db_path, "conversations")
    _damage(db_path, page)

    with Store.open(db_path, clock=clock) as store:
        assert store.salvage.recreated_conversations == CONVERSATIONS
        assert _all_texts(store) == texts
        assert {c.title for c in store.list_conversations()} == {
            f"Recovered conversation {i}" for i in texts
        }


def test_swapless_import_reads_a_set_aside_database(db_path, clock, swapless_home):
    texts = _build(db_path, clock)
    page, cells = _pages(db_path, "messages")[2]
    _damage(db_path, page)
    set_aside = db_path.with_name("swapless.db.corrupt-20250601T120000Z")
    db_path.rename(set_aside)

    assert main(["import", str(set_aside)]) == 0

    with Store.open(swapless_home / "swapless.db", clock=clock) as store:
        imported = _all_texts(store)
    assert len(imported) == CONVERSATIONS
    assert sum(len(v) for v in imported.values()) == (
        CONVERSATIONS * MESSAGES_EACH - cells
    )
    all_texts = {t for ts in texts.values() for t in ts}
    assert {t for ts in imported.values() for t in ts} <= all_texts
