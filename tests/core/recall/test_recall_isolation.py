"""Recall of one conversation is not changed, nor slowed, by other conversations.

The words too common to search are counted over the conversation's own messages, and
FTS5 is given the conversation's id range so it never scores another's rows.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from app.core.recall.recaller import RecallResult, recall_for
from app.core.store import Store
from app.core.store.search import PRUNE_FROM_MESSAGES, terms_match

COMMON = [
    "river",
    "hill",
    "valley",
    "lantern",
    "meadow",
    "ledger",
    "harbor",
    "summit",
    "quartz",
    "willow",
]
OTHER_MESSAGES = 3_000
QUESTIONS = [
    "What about the river and item 7?",
    "Which meadow ledger had the heron Kestrelwing?",
    "Tell me about the lantern at pier 31.",
    "summit quartz willow",
]


def words(text: str) -> int:
    return len(text.split())


def _texts(seed: int, count: int) -> list[str]:
    """Messages full of the common words, a few with rarer ones."""
    rng = random.Random(seed)
    texts = []
    for i in range(count):
        text = " ".join(rng.choice(COMMON) for _ in range(12)) + f" item {i}."
        if i % 37 == 0:
            text += f" The heron Kestrelwing sat at pier {i % 50}."
        texts.append(text)
    return texts


def _add(store: Store, conversation: int, texts: list[str]) -> list[int]:
    return [
        store.add_message(conversation, "user" if i % 2 == 0 else "assistant", text)
        for i, text in enumerate(texts)
    ]


def _summarise(store: Store, conversation: int, ids: list[int]) -> None:
    store.add_summary(conversation, ids[0], ids[-11], "summary", 8, "extractive")


def _new(store: Store) -> int:
    return store.create_conversation(model="m", preset="chat", settings={})


def _their_texts(count: int, shared: str = "") -> list[str]:
    """Another topic's messages (``shared`` words in every one of them)."""
    rng = random.Random(2)
    vocabulary = [f"topic{i}" for i in range(40)]
    return [
        " ".join(rng.choice(vocabulary) for _ in range(12)) + f" {shared} note {i}."
        for i in range(count)
    ]


MINE = _texts(1, PRUNE_FROM_MESSAGES + 100)
# Written in turns with ``MINE``: "river" in about half of these too, so the exact
# count decides.
HALF = _texts(3, PRUNE_FROM_MESSAGES + 100)
# The store's counts would keep this conversation's common words: they are in under
# half of all messages once the other conversation is added.
THEIRS = _their_texts(OTHER_MESSAGES)


@pytest.fixture
def alone(tmp_path) -> Iterator[tuple[Store, int]]:
    store = Store.open(tmp_path / "alone.db")
    conversation = _new(store)
    _summarise(store, conversation, _add(store, conversation, MINE))
    yield store, conversation
    store.close()


def _crowded(path, theirs: list[str]) -> tuple[Store, int]:
    """The same conversation after 3,000 messages of another."""
    store = Store.open(path)
    other = _new(store)
    _summarise(store, other, _add(store, other, theirs))
    conversation = _new(store)
    _summarise(store, conversation, _add(store, conversation, MINE))
    return store, conversation


@pytest.fixture
def crowded(tmp_path) -> Iterator[tuple[Store, int]]:
    store, conversation = _crowded(tmp_path / "crowded.db", THEIRS)
    yield store, conversation
    store.close()


def _recalled(store: Store, conversation: int, question: str) -> tuple:
    """What recall chose, as positions in the conversation, and its query."""
    result = recall_for(store, conversation, question, 120, words)
    position = {
        m.id: i
        for i, m in enumerate(store.messages(conversation, include_trimmed=True))
    }
    return result.query, [position[r.message_id] for r in result.recalled]


def _steps(store: Store, conversation: int, question: str) -> int:
    """SQLite VM instructions (in hundreds) the recall step ran: rows it touched."""
    steps = 0

    def tick() -> int:
        nonlocal steps
        steps += 1
        return 0

    connection = store._db.conn
    connection.set_progress_handler(tick, 100)
    try:
        result: RecallResult = recall_for(store, conversation, question, 120, words)
    finally:
        connection.set_progress_handler(None, 0)
    assert result.candidates > 0
    return steps


@pytest.mark.parametrize("question", QUESTIONS)
def test_another_conversations_thousands_of_messages_change_nothing_recalled(
    alone, crowded, question
):
    recalled = _recalled(*alone, question)
    assert _recalled(*crowded, question) == recalled
    # The words in every message of this conversation are not searched, even
    # though they are in under half of the store's messages.
    query = recalled[0]
    assert "river" not in query and "item" not in query
    if "Kestrelwing" in question:
        assert terms_match("kestrelwing") in query and recalled[1]


def test_the_other_conversations_rows_are_not_scored(alone, tmp_path):
    # Kestrelwing is rare here (informative) and in every message of the other.
    store, conversation = _crowded(
        tmp_path / "shared.db", _their_texts(OTHER_MESSAGES, "heron Kestrelwing")
    )
    try:
        question = "What about the river and the heron Kestrelwing?"
        assert _steps(store, conversation, question) < 1.5 * _steps(*alone, question)
    finally:
        store.close()


def test_conversations_written_in_turns_recall_as_if_alone(alone, tmp_path):
    """Ids interleaved with another conversation's: the counts are made exactly."""
    store = Store.open(tmp_path / "turns.db")
    try:
        mine, theirs = _new(store), _new(store)
        ids = []
        for i, text in enumerate(MINE):
            ids.append(
                store.add_message(mine, "user" if i % 2 == 0 else "assistant", text)
            )
            # The range count of a common word is then off by up to 600 messages.
            store.add_message(theirs, "user", HALF[i])
        _summarise(store, mine, ids)
        for question in QUESTIONS:
            assert _recalled(store, mine, question) == _recalled(*alone, question)
    finally:
        store.close()
