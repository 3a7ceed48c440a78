"""Conversation CRUD, ordering, cascading deletes and automatic titles."""

from __future__ import annotations

import pytest

from app.core.store import Conversation, NotFoundError, make_title


def test_create_and_get_round_trip(store, clock):
    conversation_id = store.create_conversation(
        "Plans",
        model="/models/tiny",
        preset="Precise",
        settings={"temperature": 0.2, "stop": ["</s>"]},
        system_prompt="Answer in French.",
    )
    conversation = store.get_conversation(conversation_id)
    assert conversation == Conversation(
        id=conversation_id,
        title="Plans",
        created_at=clock.now,
        updated_at=clock.now,
        model="/models/tiny",
        preset="Precise",
        settings={"temperature": 0.2, "stop": ["</s>"]},
        system_prompt="Answer in French.",
    )


def test_defaults_for_a_bare_conversation(store):
    conversation = store.get_conversation(store.create_conversation())
    assert (conversation.title, conversation.model, conversation.preset) == (
        "",
        None,
        None,
    )
    assert conversation.settings == {}
    assert conversation.system_prompt == ""


def test_list_is_newest_updated_first(store):
    first = store.create_conversation("first")
    second = store.create_conversation("second")
    third = store.create_conversation("third")
    assert [c.id for c in store.list_conversations()] == [third, second, first]

    store.add_message(first, "user", "new activity moves it to the top")
    assert [c.id for c in store.list_conversations()] == [first, third, second]
    assert [c.id for c in store.list_conversations(limit=2)] == [first, third]


def test_rename_and_settings_changes_do_not_reorder(store):
    older = store.create_conversation("older")
    newer = store.create_conversation("newer")
    store.rename_conversation(older, "renamed")
    store.update_conversation(older, preset="Creative", settings={"temperature": 1.0})
    assert [c.id for c in store.list_conversations()] == [newer, older]
    assert store.get_conversation(older).title == "renamed"


def test_update_changes_only_the_given_fields(store, conversation_id):
    store.update_conversation(conversation_id, model=None, settings={"top_p": 0.9})
    conversation = store.get_conversation(conversation_id)
    assert conversation.model is None
    assert conversation.settings == {"top_p": 0.9}
    assert conversation.preset == "Balanced"
    assert conversation.system_prompt == "Be brief."
    store.update_conversation(conversation_id, system_prompt="")
    assert store.get_conversation(conversation_id).system_prompt == ""


def test_unknown_ids_raise_not_found(store):
    with pytest.raises(NotFoundError, match="Conversation 99 does not exist"):
        store.get_conversation(99)
    with pytest.raises(NotFoundError):
        store.rename_conversation(99, "x")
    with pytest.raises(NotFoundError):
        store.update_conversation(99, model="m")
    with pytest.raises(NotFoundError):
        store.delete_conversation(99)
    with pytest.raises(NotFoundError):
        store.add_message(99, "user", "hello")
    with pytest.raises(NotFoundError):
        store.messages(99)


def test_delete_cascades_to_everything_of_the_conversation(store, conversation_id):
    kept = store.create_conversation("kept")
    store.add_message(kept, "user", "unrelated")
    first = store.add_message(conversation_id, "user", "hello")
    last = store.add_message(conversation_id, "assistant", "hi")
    store.add_summary(conversation_id, first, last, "greetings", 2, "model")
    document_id = store.add_document(conversation_id, "a.txt", 10, "0" * 64, 256, 1)
    store.save_segment(document_id, 0, 3, "notes")

    store.delete_conversation(conversation_id)

    counts = {
        table: store.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        for table in (
            "conversations",
            "messages",
            "summaries",
            "documents",
            "document_segments",
        )
    }
    assert counts == {
        "conversations": 1,
        "messages": 1,
        "summaries": 0,
        "documents": 0,
        "document_segments": 0,
    }
    assert [c.id for c in store.list_conversations()] == [kept]


def test_auto_title_uses_the_first_user_message(store):
    conversation_id = store.create_conversation()
    assert store.auto_title(conversation_id) == ""
    store.add_message(conversation_id, "system", "ignored")
    store.add_message(conversation_id, "user", "  How do I\nbake   sourdough bread?  ")
    store.add_message(conversation_id, "user", "second question")
    assert store.auto_title(conversation_id) == "How do I bake sourdough bread?"
    assert (
        store.get_conversation(conversation_id).title
        == "How do I bake sourdough bread?"
    )


def test_auto_title_keeps_a_title_unless_told_to_overwrite(store):
    conversation_id = store.create_conversation("My own title")
    store.add_message(conversation_id, "user", "Something else")
    assert store.auto_title(conversation_id) == "My own title"
    assert store.auto_title(conversation_id, overwrite=True) == "Something else"


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("", ""),
        ("Short question?", "Short question?"),
        ("x" * 60, "x" * 60),
        (
            "Please explain how the key-value cache of a transformer grows with context length",
            "Please explain how the key-value cache of a transformer…",
        ),
        ("word, " * 30, "word, " * 9 + "word…"),
        ("y" * 100, "y" * 59 + "…"),
    ],
)
def test_make_title_cuts_at_a_word_boundary(text, title):
    assert make_title(text) == title
    assert len(make_title(text)) <= 60
