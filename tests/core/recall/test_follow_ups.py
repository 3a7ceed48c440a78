"""A reply that asked something lends relevance to the pair that answers it."""

from __future__ import annotations

from app.core.recall.follow_ups import FOLLOW_SHARE, with_follow_ups
from app.core.recall.in_memory import MessageIndex, Original
from app.core.recall.recaller import recall_among, recall_for


def words(text):
    return len(text.split())


# The answer (pair 2) never says "camping"; the reply before it asked about it.
TALK = [
    ("I just got back from a trip.", "Nice! How was the camping trip? Anything fun?"),
    ("It was awesome: we roasted marshmallows and hiked.", "Sounds lovely."),
    ("Tell me about tides.", "Tides follow the moon."),
    ("What do herons eat?", "Herons eat fish and frogs."),
]
QUESTION = "What did we do on the camping trip?"


def test_the_answer_to_a_matching_reply_is_recalled_with_it(store, conversation_of):
    conversation, ids = conversation_of(TALK, trim_until=4)
    result = recall_for(store, conversation, QUESTION, 200, words)
    assert [r.message_id for r in result.recalled] == ids[:4]
    assert "marshmallows" in result.recalled[2].text


def test_without_room_for_both_the_matching_pair_comes_first(store, conversation_of):
    conversation, ids = conversation_of(TALK, trim_until=4)
    # Room for one pair: the match itself outranks the answer it lends to.
    result = recall_for(store, conversation, QUESTION, 30, words)
    assert [r.message_id for r in result.recalled] == ids[:2]


def test_a_matching_reply_followed_by_a_new_subject_brings_nothing_more(
    store, conversation_of
):
    conversation, ids = conversation_of(TALK[1:], trim_until=3)
    # "Sounds lovely." holds no word of the question: the tides pair stays out.
    result = recall_for(store, conversation, "marshmallows", 200, words)
    assert [r.message_id for r in result.recalled] == ids[:2]
    result = recall_for(store, conversation, "What do herons eat?", 200, words)
    assert [r.message_id for r in result.recalled] == ids[4:6]


def test_the_store_gives_only_a_trimmed_user_pair_after_a_reply(store, conversation_of):
    conversation, ids = conversation_of(TALK, trim_until=2)
    after = store.trimmed_pair_after(conversation, ids[1])
    assert [m.id for m in after] == ids[2:4]
    # The next pair is not trimmed (still in view): nothing to lend to.
    assert store.trimmed_pair_after(conversation, ids[3]) is None
    # After a user message comes its own reply, not a new pair.
    assert store.trimmed_pair_after(conversation, ids[0]) is None
    assert store.trimmed_pair_after(conversation, ids[-1]) is None


def test_the_in_memory_index_recalls_the_answer_the_same_way():
    messages = [
        Original(i, role, text)
        for i, (role, text) in enumerate(
            (role, text)
            for question, answer in TALK
            for role, text in (("user", question), ("assistant", answer))
        )
    ]
    index = MessageIndex(messages)
    assert [m.id for m in index.pair_after(1)] == [2, 3]
    assert index.pair_after(0) is None and index.pair_after(7) is None
    result = recall_among(index, QUESTION, 200, words)
    assert [r.message_id for r in result.recalled] == [0, 1, 2, 3]


def test_a_follow_up_that_matched_too_adds_the_shares():
    first = (Original(0, "user", "a"), Original(1, "assistant", "b?"))
    second = (Original(2, "user", "c"), Original(3, "assistant", "d"))
    found, context = with_follow_ups(
        [(first, 2.0), (second, 1.0)],
        lambda i: second if i == 1 else None,
        lambda text: text == "b?",
    )
    assert found == [(second, 1.0 + FOLLOW_SHARE * 2.0), (first, 2.0)]
    assert context == {(2, 3): "b?"}
    # A reply that holds none of the question's words lends nothing.
    unchanged, context = with_follow_ups(
        [(first, 2.0), (second, 1.0)],
        lambda i: second if i == 1 else None,
        lambda text: False,
    )
    assert unchanged == [(first, 2.0), (second, 1.0)] and context == {}


def test_a_reply_that_only_states_lends_only_when_the_next_message_asks():
    stated = (Original(0, "user", "a"), Original(1, "assistant", "Noted: 4417."))
    new_subject = (Original(2, "user", "Tell me about tides."),)
    asked = (Original(2, "user", "Why that number?"),)
    for after, lends in ((new_subject, False), (asked, True)):
        found, _ = with_follow_ups(
            [(stated, 1.0)], lambda i, after=after: after, lambda text: True
        )
        assert (after in [pair for pair, _ in found]) is lends
