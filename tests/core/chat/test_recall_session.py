"""Recall and pins in a stored conversation on the real tiny model."""

from __future__ import annotations

from app.core.chat.conversation_session import ConversationSession
from app.core.chat.model_messages import PINNED_HEADER
from app.core.chat.turn_events import Recalled
from app.core.presets.presets import get_preset
from app.core.recall.block import BLOCK_START

SYSTEM = "You are Swapless test bot."
FACT = "My locker number is 4417."


def start(engine, store, tiny_model_dir, **changes):
    preset = get_preset("chat").with_changes(
        system_prompt=SYSTEM,
        temperature=0.0,
        max_tokens=8,
        summary_mode="extractive",
        max_context=512,
        keep_ratio=0.5,
        **changes,
    )
    return ConversationSession.start(engine, store, preset, model=str(tiny_model_dir))


def filler(i: int) -> str:
    return f"Tell me about topic {i}: rivers, hills and quiet valleys in spring."


def trim_the_fact_away(session, store):
    session.send(FACT).wait()
    first = store.messages(session.conversation_id)[0]
    for i in range(40):
        session.send(filler(i)).wait()
        if store.get_message(first.id).trimmed:
            return first
    raise AssertionError("the fact was never trimmed")


def test_a_trimmed_fact_is_recalled_word_for_word_and_stored_with_the_turn(
    engine, store, tiny_model_dir
):
    session = start(engine, store, tiny_model_dir)
    fact = trim_the_fact_away(session, store)
    turn = session.send("What is my locker number?")
    events = list(turn)
    recalled = [e for e in events if isinstance(e, Recalled)]
    assert len(recalled) == 1
    assert recalled[0].messages[0].message_id == fact.id
    assert recalled[0].messages[0].text == FACT
    assert [m.role for m in recalled[0].messages] == ["user", "assistant"]
    report = turn.report
    assert report.recalled == recalled[0].messages
    assert report.to_json()["recalled"][0] == {
        "message_id": fact.id,
        "role": "user",
        "text": FACT,
    }
    assert report.context_tokens <= 512
    question = store.messages(session.conversation_id)[-2]
    assert question.content == "What is my locker number?"
    assert question.recalled == report.recalled
    # The next turn renders the same tokens for that question: the cache holds them.
    # (Up to the reply: a random model's reply may re-tokenize differently.)
    messages = session.model_messages(session.context())
    assert BLOCK_START in messages[-2]["content"]
    prompt = engine.render(messages[:-1], True)
    assert engine.cached_token_ids(session.cache_key)[: len(prompt)] == prompt
    next_report = session.send("Thanks, and the rivers?").wait()
    # (The prompt's last token is fed again to get the first logits.)
    assert next_report.trimmed or next_report.reused_tokens >= len(prompt) - 1


def test_a_value_updated_later_is_recalled_new_and_the_old_one_left_out(
    engine, store, tiny_model_dir
):
    session = start(engine, store, tiny_model_dir)
    trim_the_fact_away(session, store)
    session.send("Update: my locker number is now 5260.").wait()
    report = session.send("What is my locker number?").wait()
    # The update is still in view: the trimmed old value is out of date, not recalled.
    assert report.recalled == ()
    update = store.messages(session.conversation_id)[-4]
    for i in range(40):
        if store.get_message(update.id).trimmed:
            break
        session.send(filler(i)).wait()
    # Once the update is summarised too, the summary holds the new value only, and
    # recall brings back the update, never the old statement.
    summary = "\n".join(s.content for s in session.context().summaries)
    assert "5260" in summary and "4417" not in summary
    report = session.send("What is my locker number?").wait()
    texts = " ".join(r.text for r in report.recalled)
    assert "5260" in texts and "4417" not in texts


def test_recall_off_in_the_preset_recalls_nothing(engine, store, tiny_model_dir):
    session = start(engine, store, tiny_model_dir, recall=False)
    trim_the_fact_away(session, store)
    turn = session.send("What is my locker number?")
    assert not [e for e in turn if isinstance(e, Recalled)]
    assert turn.report.recalled == ()


def test_a_question_without_searchable_words_just_runs(engine, store, tiny_model_dir):
    session = start(engine, store, tiny_model_dir)
    trim_the_fact_away(session, store)
    report = session.send('"?" NEAR( AND').wait()
    assert report.recalled == ()


def test_a_pinned_message_stays_word_for_word_after_the_summary(
    engine, store, tiny_model_dir
):
    session = start(engine, store, tiny_model_dir, recall=False)
    session.send(FACT).wait()
    fact = store.messages(session.conversation_id)[0]
    store.set_pinned(fact.id, True)
    for i in range(40):
        report = session.send(filler(i)).wait()
        assert report.context_tokens <= 512
        if store.get_message(fact.id).trimmed:
            break
    context = session.context()
    assert [m.id for m in context.pinned] == [fact.id]
    messages = session.model_messages(context)
    summary_at = next(
        i for i, m in enumerate(messages) if PINNED_HEADER in m["content"]
    )
    assert f"User: {FACT}" in messages[summary_at]["content"]
    # It follows the summary and precedes every kept turn; the cache holds it.
    assert all(m["role"] == "system" for m in messages[: summary_at + 1])
    report = session.send("And then?").wait()
    assert report.context_tokens <= 512
    prompt = engine.render(session.model_messages(session.context())[:-1], True)
    assert engine.cached_token_ids(session.cache_key)[: len(prompt)] == prompt
