"""Full-text search over messages and titles, safe for any typed text."""

from __future__ import annotations

import pytest

from app.core.store.search import fts_query


@pytest.fixture
def corpus(store):
    espresso = store.create_conversation("Espresso brewing")
    store.add_message(espresso, "user", "What grind size for a ristretto?")
    answer = store.add_message(
        espresso, "assistant", "Use a fine grind; ristretto needs it."
    )
    garden = store.create_conversation("Garden plans")
    tomato = store.add_message(
        garden, "user", "When should I plant tomatoes? It's 10:30 now."
    )
    return {"espresso": espresso, "answer": answer, "garden": garden, "tomato": tomato}


def test_finds_words_in_messages_with_snippets(store, corpus):
    hits = store.search("ristretto")
    assert {(h.conversation_id, h.role) for h in hits} == {
        (corpus["espresso"], "user"),
        (corpus["espresso"], "assistant"),
    }
    assert all(h.conversation_title == "Espresso brewing" for h in hits)
    assert all("[ristretto]" in h.snippet for h in hits)


def test_finds_titles_first_with_no_message_id(store, corpus):
    hits = store.search("garden")
    assert hits[0].conversation_id == corpus["garden"]
    assert hits[0].message_id is None and hits[0].role is None
    assert hits[0].snippet == "[Garden] plans"


def test_every_word_must_match_and_prefixes_match(store, corpus):
    assert [h.message_id for h in store.search("fine grind")] == [corpus["answer"]]
    assert [h.message_id for h in store.search("tomat")] == [corpus["tomato"]]
    assert store.search("fine tomatoes") == []


def test_search_follows_edits_and_renames(store, corpus):
    reply = store.begin_reply(corpus["garden"])
    store.update_reply_text(reply, "Plant after the last frost")
    assert [h.message_id for h in store.search("frost")] == [reply]
    store.finish_reply(reply, "Plant in May")
    assert store.search("frost") == []
    assert [h.message_id for h in store.search("May")] == [reply]
    store.rename_conversation(corpus["garden"], "Vegetables")
    assert [h.conversation_id for h in store.search("vegetables")] == [corpus["garden"]]
    assert all(h.message_id is not None for h in store.search("garden"))


def test_deleted_conversation_leaves_the_index(store, corpus):
    store.delete_conversation(corpus["espresso"])
    assert store.search("ristretto") == []
    assert store.search("espresso") == []
    assert store.db.execute("SELECT COUNT(*) FROM messages_fts").fetchone()[0] == 1
    # The external-content index agrees with the rows it indexes.
    store.db.execute(
        "INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')"
    )
    store.db.execute(
        "INSERT INTO conversations_fts(conversations_fts) VALUES ('integrity-check')"
    )


@pytest.mark.parametrize(
    "text",
    [
        '"',
        '"unbalanced',
        "-",
        "--tomato",
        "*",
        "tomato*",
        "10:30",
        ":",
        "NOT",
        "AND OR NEAR(",
        "a AND",
        "(",
        ")",
        "^",
        "'; DROP TABLE messages; --",
        "column:tomato",
        "",
        "   ",
        "_",
        "ünïcödé ✨ 🍅",
    ],
)
def test_user_text_with_fts_syntax_never_raises(store, corpus, text):
    store.search(text)


def test_syntax_characters_are_searched_as_text(store, corpus):
    assert [h.message_id for h in store.search("10:30")] == [corpus["tomato"]]
    assert [h.message_id for h in store.search('"tomatoes?"')] == [corpus["tomato"]]
    assert [h.message_id for h in store.search("It's")] == [corpus["tomato"]]


def test_limit(store, corpus):
    assert len(store.search("ristretto", limit=1)) == 1
    assert store.search("ristretto", limit=0) == []


def test_fts_query_quotes_every_word():
    assert fts_query('say "hi" -now') == '"say"* """hi"""* "-now"*'
    assert fts_query("- * :") == ""
