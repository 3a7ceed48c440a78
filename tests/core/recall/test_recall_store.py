"""Recall against a real store: BM25 over one conversation's trimmed pairs."""

from __future__ import annotations

from app.core.recall.block import (
    BLOCK_END,
    BLOCK_START,
    choose,
    recall_budget,
    render_block,
    with_recall,
)
from app.core.recall.recaller import recall_for
from app.core.store.records import RecalledMessage


def words(text):
    return len(text.split())


PAIRS = [
    ("My locker number is 4417.", "Noted: your locker number is 4417."),
    ("Tell me about tides.", "Tides follow the moon."),
    ("What do herons eat?", "Herons eat fish and frogs."),
    ("And the weather in spring?", "Mild, with rain."),
]


def test_the_trimmed_pair_sharing_rare_words_comes_back_whole(store, conversation_of):
    conversation, ids = conversation_of(PAIRS, trim_until=3)
    result = recall_for(store, conversation, "What is my locker number?", 200, words)
    assert [r.message_id for r in result.recalled] == ids[:2]
    assert result.recalled[1].text == "Noted: your locker number is 4417."
    assert not result.cut


def test_messages_not_trimmed_and_other_conversations_are_never_recalled(
    store, conversation_of
):
    conversation, ids = conversation_of(PAIRS, trim_until=1)
    other, _ = conversation_of([("Herons nest in trees.", "Yes.")], 1)
    result = recall_for(store, conversation, "herons weather", 200, words)
    assert result.recalled == ()  # those turns are still in view
    result = recall_for(store, other, "locker", 200, words)
    assert result.recalled == ()


def test_fts_syntax_in_the_question_is_no_error(store, conversation_of):
    conversation, ids = conversation_of(PAIRS, trim_until=3)
    for text in ['"locker', "NEAR(locker", "locker*", "locker:", "AND OR NOT", "?"]:
        recall_for(store, conversation, text, 200, words)
    result = recall_for(store, conversation, '"locker" OR NOT', 200, words)
    assert result.recalled and result.recalled[0].message_id == ids[0]


def test_excluded_messages_are_not_recalled_again(store, conversation_of):
    conversation, ids = conversation_of(PAIRS, trim_until=3)
    result = recall_for(store, conversation, "locker", 200, words, exclude=[ids[0]])
    assert result.recalled == ()


def test_a_pair_larger_than_the_budget_is_cut_at_a_sentence(store, conversation_of):
    long_answer = " ".join(f"Sentence {i} about the locker." for i in range(60))
    conversation, ids = conversation_of(
        [("Where is my locker?", long_answer), *PAIRS[1:]], trim_until=3
    )
    result = recall_for(store, conversation, "locker", 60, words)
    assert result.cut and result.recalled
    assert words(render_block(result.recalled)) <= 60
    assert result.recalled[-1].text.endswith("locker.")


def test_pairs_are_taken_best_first_while_they_fit():
    class M:
        def __init__(self, id, role, content):
            self.id, self.role, self.content = id, role, content

    pairs = [
        (M(5, "user", "alpha " * 10), M(6, "assistant", "beta " * 10)),
        (M(1, "user", "gamma"), M(2, "assistant", "delta")),
        (M(3, "user", "x " * 100), M(4, "assistant", "y")),
    ]
    chosen = choose(pairs, 50, words)
    assert [r.message_id for r in chosen] == [5, 6, 1, 2]
    block = render_block(chosen)
    assert block.startswith(BLOCK_START) and block.endswith(BLOCK_END)
    # Written oldest first, whatever the rank.
    assert block.index("gamma") < block.index("alpha")


def test_the_block_precedes_the_message_and_nothing_changes_without_one():
    recalled = (RecalledMessage(1, "user", "My cat is Tom."),)
    assert with_recall("Name?", ()) == "Name?"
    text = with_recall("Name?", recalled)
    assert text.startswith(BLOCK_START) and text.endswith("\n\nName?")
    assert "User: My cat is Tom." in text


def test_the_budget_is_three_tenths_of_the_limit_up_to_1024():
    assert recall_budget(512) == 153
    assert recall_budget(2048) == 614
    assert recall_budget(32_768) == 1024


def test_the_block_is_stored_with_the_user_message(store, conversation_of):
    conversation, ids = conversation_of(PAIRS, trim_until=3)
    recalled = (RecalledMessage(ids[0], "user", "My locker number is 4417.", True),)
    new = store.add_message(conversation, "user", "locker?", recalled=recalled)
    assert store.get_message(new).recalled == recalled
    assert store.get_message(ids[1]).recalled == ()


UPDATED = [
    ("My locker number is 4417.", "Noted: your locker number is 4417."),
    ("Tell me about tides.", "Tides follow the moon."),
    ("Update: my locker number is now 52.", "Noted: your locker number is 52."),
    ("And the weather in spring?", "Mild, with rain."),
]


def test_an_out_of_date_value_is_not_recalled_whatever_the_budget(
    store, conversation_of
):
    conversation, ids = conversation_of(UPDATED, trim_until=3)
    for budget in (40, 400):
        result = recall_for(
            store, conversation, "What is my locker number?", budget, words
        )
        texts = " ".join(r.text for r in result.recalled)
        assert "52" in texts and "4417" not in texts


def test_a_value_restated_in_view_makes_the_trimmed_one_out_of_date(
    store, conversation_of
):
    conversation, ids = conversation_of(UPDATED, trim_until=1)
    question = "What is my locker number?"
    result = recall_for(store, conversation, question, 400, words)
    assert [r.message_id for r in result.recalled] == ids[:2]  # nothing newer known
    in_view = [("user", UPDATED[2][0]), ("assistant", UPDATED[2][1])]
    result = recall_for(store, conversation, question, 400, words, newer=in_view)
    assert result.recalled == ()


def test_a_statement_outranks_a_shorter_question_with_the_same_words(
    store, conversation_of
):
    pairs = [
        ("My locker number is 4417, in the east hall.", "Noted."),
        ("Which locker number?", "Which one do you mean?"),
        ("Tell me about tides.", "Tides follow the moon."),
    ]
    conversation, ids = conversation_of(pairs, trim_until=3)
    result = recall_for(store, conversation, "my locker number", 30, words)
    assert [r.message_id for r in result.recalled] == ids[:2]


def test_a_longer_word_finds_its_other_endings_and_a_short_one_only_itself(
    store, conversation_of
):
    pairs = [
        ("I went to two support groups this week.", "That sounds supportive."),
        ("It was a good day.", "Glad to hear."),
        ("Tell me about tides.", "Tides follow the moon."),
    ]
    conversation, ids = conversation_of(pairs, trim_until=3)
    result = recall_for(store, conversation, "the group", 200, words)
    assert [r.message_id for r in result.recalled] == ids[:2]
    # "go" is no prefix: it does not find "good".
    assert recall_for(store, conversation, "go", 200, words).recalled == ()


def test_words_in_most_messages_are_left_out_of_a_large_index_and_rank_the_same(
    store, conversation_of
):
    from app.core.recall.query import recall_query
    from app.core.store.search import PRUNE_FROM_MESSAGES

    pairs = [
        (f"The river report {i}: water level {i % 7} metres.", f"Logged entry {i}.")
        for i in range(PRUNE_FROM_MESSAGES // 2 + 10)
    ]
    pairs[40] = ("The river report: my boat Kestrelwing is moored at pier 9.", "Ok.")
    conversation, ids = conversation_of(pairs, trim_until=len(pairs) - 2)
    # "repo" is a prefix query, and as one it matches every "report": left out too.
    terms = ["river", "report", "repo", "kestrelwing", "unseenword"]
    assert store.informative_terms(terms, conversation) == ["kestrelwing", "unseenword"]
    question = "Which river report mentioned Kestrelwing?"
    unpruned = store.search_trimmed(conversation, recall_query(question), 1)
    result = recall_for(store, conversation, question, 400, words)
    assert result.recalled[0].message_id == unpruned[0][0][0].id == ids[80]
    # Only words every message has: nothing informative, nothing recalled.
    assert recall_for(store, conversation, "river report", 400, words).recalled == ()
