"""Recall over a server request's own trimmed history (an in-memory FTS5 index)."""

from __future__ import annotations

from app.core.recall.in_memory import PRUNE_FROM_MESSAGES, MessageIndex, Original
from app.core.recall.query import recall_query
from app.core.recall.recaller import recall_among


def words(text):
    return len(text.split())


def history(count: int) -> list[Original]:
    messages = []
    for i in range(count // 2):
        messages.append(
            Original(2 * i, "user", f"The river report {i}: level {i % 7}.")
        )
        messages.append(Original(2 * i + 1, "assistant", f"Logged entry {i}."))
    return messages


def test_the_pair_with_the_rare_word_comes_back_whole_and_current():
    messages = history(20)
    messages[4] = Original(4, "user", "My boat Kestrelwing is at pier 9.")
    messages[12] = Original(12, "user", "Update: my boat Kestrelwing is now at pier 4.")
    index = MessageIndex(messages)
    result = recall_among(index, "Where is Kestrelwing?", 200, words)
    # The newer statement supersedes the older one: only its pair comes back.
    assert [r.message_id for r in result.recalled] == [12, 13]
    assert recall_among(index, "?", 200, words).recalled == ()
    assert recall_among(index, '"NEAR( OR *', 200, words).query == '"near"*'


def test_a_large_index_leaves_words_most_messages_have_out_and_ranks_the_same():
    messages = history(PRUNE_FROM_MESSAGES + 20)
    messages[80] = Original(
        80, "user", "The river report: my boat Kestrelwing, pier 9."
    )
    index = MessageIndex(messages)
    # "rive" is a prefix query, and as one it matches every "river": left out too.
    assert index.informative_terms(["river", "rive", "kestrelwing", "unseen"]) == [
        "kestrelwing",
        "unseen",
    ]
    question = "Which river report named Kestrelwing?"
    unpruned = index.search(recall_query(question), 1)
    result = recall_among(index, question, 200, words)
    assert result.recalled[0].message_id == unpruned[0][0][0].id == 80
    assert recall_among(index, "river report", 200, words).recalled == ()
