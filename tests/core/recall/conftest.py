"""A real store for the recall tests, and conversations of user+reply pairs in it."""

from __future__ import annotations

import pytest

from app.core.store import Store


@pytest.fixture
def store(tmp_path):
    store = Store.open(tmp_path / "recall.db")
    yield store
    store.close()


@pytest.fixture
def conversation_of(store):
    """``conversation_of(pairs, trim_until)``: add user/reply pairs and summarise the
    first ``trim_until`` pairs; returns the conversation id and the message ids."""

    def add(pairs, trim_until):
        conversation = store.create_conversation(model="m", preset="chat", settings={})
        ids = []
        for question, answer in pairs:
            ids.append(store.add_message(conversation, "user", question))
            ids.append(store.add_message(conversation, "assistant", answer))
        if trim_until:
            store.add_summary(
                conversation,
                ids[0],
                ids[2 * trim_until - 1],
                "summary",
                3,
                "extractive",
            )
        return conversation, ids

    return add
