"""Messages, streamed replies, the throttled `ReplySaver` and crash recovery."""

from __future__ import annotations

import threading

import pytest

from app.core.errors import BudgetError
from app.core.store import NotFoundError, ReplySaver, ReplyStats, Store

STATS = ReplyStats(
    prompt_tokens=120,
    generated_tokens=5,
    reused_tokens=100,
    ttft_s=0.31,
    tokens_per_s=42.5,
    peak_memory_bytes=1_500_000_000,
    kv_bits=8,
)


class FakeMonotonic:
    """Monotonic seconds that only move when the test says so."""

    def __init__(self) -> None:
        self.seconds = 100.0

    def __call__(self) -> float:
        return self.seconds


class CountingStore:
    """Wraps a store and counts the partial-text writes a `ReplySaver` makes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.writes: list[str] = []

    def update_reply_text(self, message_id: int, text: str) -> None:
        self.writes.append(text)
        self.store.update_reply_text(message_id, text)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_add_message_validates_role(store, conversation_id):
    with pytest.raises(ValueError, match="role must be one of system, user, assistant"):
        store.add_message(conversation_id, "robot", "beep")


def test_messages_are_returned_in_order_with_their_fields(
    store, conversation_id, clock
):
    user_id = store.add_message(conversation_id, "user", "Hello", token_count=2)
    created = clock.now
    store.add_message(conversation_id, "assistant", "Hi!")
    messages = store.messages(conversation_id)
    assert [(m.role, m.content) for m in messages] == [
        ("user", "Hello"),
        ("assistant", "Hi!"),
    ]
    first = store.get_message(user_id)
    assert (first.token_count, first.state, first.created_at) == (
        2,
        "complete",
        created,
    )
    assert first.stats == ReplyStats()
    assert not first.trimmed
    store.set_token_count(user_id, 3)
    assert store.get_message(user_id).token_count == 3


def test_streamed_reply_lifecycle(store, conversation_id):
    reply_id = store.begin_reply(conversation_id)
    reply = store.get_message(reply_id)
    assert (reply.role, reply.state, reply.content) == ("assistant", "generating", "")

    store.update_reply_text(reply_id, "Once upon")
    assert store.get_message(reply_id).content == "Once upon"

    store.finish_reply(reply_id, "Once upon a time.", STATS)
    reply = store.get_message(reply_id)
    assert (reply.state, reply.content, reply.token_count) == (
        "complete",
        "Once upon a time.",
        5,
    )
    assert reply.stats == STATS
    assert reply.error is None

    with pytest.raises(ValueError, match="is not generating"):
        store.update_reply_text(reply_id, "too late")
    with pytest.raises(ValueError, match="is not generating"):
        store.finish_reply(reply_id, "twice")
    with pytest.raises(NotFoundError):
        store.update_reply_text(12345, "nobody")


def test_stopped_and_failed_replies_keep_their_text(store, conversation_id):
    stopped = store.begin_reply(conversation_id)
    store.finish_reply(stopped, "Half an ans", STATS, token_count=4, stopped=True)
    message = store.get_message(stopped)
    assert (message.state, message.content, message.token_count) == (
        "interrupted",
        "Half an ans",
        4,
    )

    failed = store.begin_reply(conversation_id)
    store.fail_reply(failed, "Partial", "Out of memory")
    message = store.get_message(failed)
    assert (message.state, message.content, message.error) == (
        "error",
        "Partial",
        "Out of memory",
    )


def test_saver_writes_every_64_tokens(store, conversation_id):
    counting = CountingStore(store)
    reply_id = store.begin_reply(conversation_id)
    saver = ReplySaver(counting, reply_id, clock=FakeMonotonic())
    for i in range(200):
        saver.add(f"t{i} ")
    assert saver.saves == len(counting.writes) == 3  # after tokens 64, 128 and 192
    assert counting.writes[0] == "".join(f"t{i} " for i in range(64))
    assert store.get_message(reply_id).content == "".join(f"t{i} " for i in range(192))

    saver.finish(STATS)
    assert len(counting.writes) == 3  # finishing writes the rest, not another partial
    reply = store.get_message(reply_id)
    assert reply.content == saver.text == "".join(f"t{i} " for i in range(200))
    assert reply.state == "complete"


def test_saver_writes_at_least_every_second(store, conversation_id):
    counting = CountingStore(store)
    reply_id = store.begin_reply(conversation_id)
    clock = FakeMonotonic()
    saver = ReplySaver(
        counting, reply_id, every_seconds=1.0, every_tokens=64, clock=clock
    )
    saver.add("slow ")
    clock.seconds += 0.5
    saver.add("model ")
    assert counting.writes == []
    clock.seconds += 0.6
    saver.add("here ")
    assert counting.writes == ["slow model here "]
    clock.seconds += 0.2
    saver.add("again")
    assert len(counting.writes) == 1
    saver.flush()
    saver.flush()  # nothing new: no write
    assert counting.writes == ["slow model here ", "slow model here again"]


def test_saver_counts_batched_tokens(store, conversation_id):
    counting = CountingStore(store)
    saver = ReplySaver(
        counting,
        store.begin_reply(conversation_id),
        every_tokens=10,
        clock=FakeMonotonic(),
    )
    saver.add("a chunk of nine tokens", tokens=9)
    assert counting.writes == []
    saver.add(" and one", tokens=1)
    assert len(counting.writes) == 1


def test_saver_fail_and_stop(store, conversation_id):
    failing = ReplySaver(store, store.begin_reply(conversation_id))
    failing.add("Some text")
    failing.fail(MemoryError())
    message = store.get_message(failing.message_id)
    assert (message.state, message.content, message.error) == (
        "error",
        "Some text",
        "MemoryError",
    )
    known = ReplySaver(store, store.begin_reply(conversation_id))
    known.fail(BudgetError("The model ran out of memory."))
    assert store.get_message(known.message_id).error == "The model ran out of memory."

    stopping = ReplySaver(store, store.begin_reply(conversation_id))
    stopping.add("Cut")
    stopping.finish(STATS, stopped=True)
    assert store.get_message(stopping.message_id).state == "interrupted"


def test_saver_rejects_bad_thresholds(store):
    with pytest.raises(ValueError, match="every_seconds"):
        ReplySaver(store, 1, every_seconds=0)
    with pytest.raises(ValueError, match="every_tokens"):
        ReplySaver(store, 1, every_tokens=0)


def test_recover_interrupted_on_open_keeps_partial_text(db_path, clock):
    with Store.open(db_path, clock=clock) as store:
        conversation_id = store.create_conversation()
        store.add_message(conversation_id, "user", "Tell me a story")
        reply_id = store.begin_reply(conversation_id)
        saver = ReplySaver(store, reply_id, every_tokens=2)
        for word in ["Once ", "upon ", "a "]:
            saver.add(word)
        document_id = store.add_document(
            conversation_id, "book.txt", 1, "f" * 64, 128, 4
        )
        store.save_segment(document_id, 0, 128, "chapter one")
        # The process dies here: no finish_reply, no closing the document.
        assert store.recovered_replies == 0

    with Store.open(db_path, clock=clock) as store:
        assert store.recovered_replies == 1
        reply = store.get_message(reply_id)
        assert (reply.state, reply.content) == ("interrupted", "Once upon ")
        assert store.get_document(document_id).status == "interrupted"
        assert store.next_segment_index(document_id) == 1
        assert store.recover_interrupted() == 0
        # An interrupted reply is still part of the model's context, as the user saw it.
        assert store.context_for_model(conversation_id).messages[-1].id == reply_id


def test_delete_message_for_regenerate(store, conversation_id):
    question = store.add_message(conversation_id, "user", "Q")
    answer = store.add_message(conversation_id, "assistant", "A")
    store.delete_message(answer)
    assert [m.id for m in store.messages(conversation_id)] == [question]
    assert store.search("A") == []
    store.add_summary(conversation_id, question, question, "q", 1, "extractive")
    with pytest.raises(ValueError, match="covered by summary"):
        store.delete_message(question)


def test_store_can_be_used_from_several_threads(store, conversation_id):
    errors = []

    def writer(n: int) -> None:
        try:
            for i in range(20):
                store.add_message(conversation_id, "user", f"thread {n} message {i}")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(store.messages(conversation_id)) == 80


def test_a_replys_reasoning_is_stored_apart_and_not_searched(store):
    from app.core.store.records import ReplyStats
    from app.core.store.reply_saver import ReplySaver

    conversation = store.create_conversation(title="t", system_prompt="")
    saver = ReplySaver(store, store.begin_reply(conversation), every_tokens=1)
    saver.add("The user asks about zebras.", reasoning=True)
    assert store.messages(conversation)[-1].reasoning == "The user asks about zebras."
    saver.add("Stripes help.")
    saver.finish(ReplyStats(generated_tokens=9, reasoning_tokens=6, reasoning_s=1.5))
    message = store.messages(conversation)[-1]
    assert message.content == "Stripes help."
    assert message.reasoning == "The user asks about zebras."
    assert (message.stats.reasoning_tokens, message.stats.reasoning_s) == (6, 1.5)
    # The answers' index finds the answer, never the thought.
    assert store.search("stripes")
    assert not store.search("zebras")
