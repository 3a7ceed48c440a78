"""A chat turn is one stream of frozen events, on the real tiny model.

The CLI, the Qt worker and the server all loop over these; the order, the cancel token
and the trim events are what they rely on.
"""

from __future__ import annotations

from app.core.cancel import CancelToken
from app.core.chat.conversation_session import ConversationSession
from app.core.chat.turn_events import Recalled, Trimmed, TrimStarted, TurnFinished
from app.core.engine.events import GenerationEvent, PrefillProgress
from app.core.presets.presets import get_preset


def start(engine, store, **changes) -> ConversationSession:
    values = {"temperature": 0.0, "max_tokens": 12, "summary_mode": "extractive"}
    preset = get_preset("chat").with_changes(**{**values, **changes})
    return ConversationSession.start(engine, store, preset, model="tiny")


def kinds(events) -> list[str]:
    names = {
        TrimStarted: "trim-started",
        Trimmed: "trimmed",
        Recalled: "recalled",
        PrefillProgress: "prefill",
        GenerationEvent: "text",
        TurnFinished: "finished",
    }
    return [names[type(event)] for event in events]


def collapse(sequence: list[str]) -> list[str]:
    return [k for i, k in enumerate(sequence) if i == 0 or sequence[i - 1] != k]


def test_a_turn_streams_prefill_then_text_then_one_finished_event(engine, store):
    session = start(engine, store)
    events = list(session.send("Hello there, how are you?"))
    assert collapse(kinds(events)) == ["prefill", "text", "finished"]
    report = events[-1].report
    assert report.reply == "".join(
        e.text for e in events if isinstance(e, GenerationEvent)
    )
    assert store.messages(session.conversation_id)[-1].content == report.reply


def test_nothing_runs_until_the_turn_is_iterated(engine, store):
    session = start(engine, store)
    turn = session.send("Not yet.")
    assert store.messages(session.conversation_id) == []
    assert turn.wait().conversation_id == session.conversation_id
    assert [m.role for m in store.messages(session.conversation_id)] == [
        "user",
        "assistant",
    ]


def test_a_token_cancelled_before_the_turn_runs_stops_it_at_once(engine, store):
    session = start(engine, store, max_tokens=200)
    token = CancelToken()
    token.cancel()
    report = session.send("Write a long story.", token).wait()
    assert report.finish_reason == "cancelled"
    assert report.generated_tokens <= 1
    user, reply = store.messages(session.conversation_id)
    assert user.content == "Write a long story." and reply.state == "interrupted"


def test_trims_are_events_of_the_turn_they_belong_to(engine, store):
    session = start(engine, store, max_context=400)
    seen = []
    for i in range(12):
        events = list(session.send(f"Turn {i}: item {i} costs {i * 3} euros."))
        sequence = collapse(kinds(events))
        if "trimmed" in sequence:
            assert sequence[:2] == ["trim-started", "trimmed"]
            assert sequence[-1] == "finished"
            started = next(e for e in events if isinstance(e, TrimStarted))
            trimmed = next(e for e in events if isinstance(e, Trimmed))
            assert started.dropped_messages == trimmed.outcome.dropped_messages > 0
            assert events[-1].report.trimmed
            seen.append(i)
    assert seen, "the conversation never trimmed"


def test_an_edit_reports_its_trim_during_the_turn(engine, store):
    # The old callback API reported an edit's trim only after the whole reply.
    session = start(engine, store, max_context=400)
    report = None
    while report is None or report.context_tokens < 200:
        report = session.send("Item costs three euros and is blue.").wait()
    last_user = [m for m in store.messages(session.conversation_id) if m.role == "user"]
    # An edit long enough to pass the limit with the history, short enough to fit alone.
    word = " blue"
    repeats = (400 - report.context_tokens + 60) // engine.count_tokens(word)
    events = list(
        session.edit_and_resend(last_user[-1].id, "Remember:" + word * repeats)
    )
    sequence = collapse(kinds(events))
    assert "trimmed" in sequence
    assert sequence.index("trimmed") < sequence.index("text")


def test_a_consumer_that_stops_listening_leaves_a_stopped_reply(engine, store):
    session = start(engine, store, max_tokens=200)
    turn = iter(session.send("Write a long story."))
    texts = 0
    for event in turn:
        if isinstance(event, GenerationEvent) and event.text:
            texts += 1
            if texts == 3:
                break
    turn.close()  # what a closed pipe or a gone client does
    user, reply = store.messages(session.conversation_id)
    assert reply.state == "interrupted" and reply.error is None
    assert reply.content  # the text received so far is kept
    # The cache is consistent: the next turn of the same conversation works.
    assert session.send("Shorter, please.").wait().finish_reason in {"stop", "length"}
