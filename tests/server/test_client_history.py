"""Trims remembered across requests, and which cache a request runs on (no model needed)."""

from __future__ import annotations

from app.core.chat.model_messages import MERGED, SEPARATE
from app.core.trim.extractive import HEADER
from app.server.openai_chat.client_history import (
    ClientHistory,
    TrimRecord,
    TrimRecords,
    model_view,
)
from app.server.openai_chat.openai_request import ChatMessage
from app.server.service.conversation_index import ConversationIndex, shared_prefix

SYSTEM = ChatMessage("system", "Be brief.")


def conversation(turns: int, *, system=True, last_user="next?") -> tuple:
    messages = [SYSTEM] if system else []
    for i in range(turns):
        messages += [ChatMessage("user", f"q{i}"), ChatMessage("assistant", f"a{i}")]
    return (*messages, ChatMessage("user", last_user))


def test_prefix_hashes_identify_whole_prefixes():
    a = ClientHistory.of(conversation(2))
    b = ClientHistory.of(conversation(3))
    assert a.system_count == 1 and len(a.hashes) == len(a.messages)
    assert a.hashes[:5] == b.hashes[:5]  # system, q0, a0, q1, a1 are the same
    assert a.hashes[5] != b.hashes[5]
    assert shared_prefix(a.hashes, b.hashes) == 5
    edited = ClientHistory.of((SYSTEM, ChatMessage("user", "Q0"), *conversation(2)[2:]))
    assert shared_prefix(a.hashes, edited.hashes) == 1


def test_a_remembered_trim_maps_the_next_requests_onto_the_summary():
    records = TrimRecords()
    first = ClientHistory.of(conversation(3))
    record = TrimRecord(covered=5, summary=f"{HEADER}\n- User: q0", summary_tokens=9)
    records.remember(first, record)
    # The client sends everything again, plus the reply and a new question.
    later = ClientHistory.of(
        (
            *conversation(3)[:-1],
            ChatMessage("user", "next?"),
            ChatMessage("assistant", "x"),
            ChatMessage("user", "more"),
        )
    )
    assert records.lookup(later) == record
    view = model_view(later, record, SEPARATE)
    assert view.head == (SYSTEM, ChatMessage("system", record.summary))
    assert view.body == later.messages[5:]
    assert view.summarized_messages == 4
    assert view.messages()[0] == {"role": "system", "content": "Be brief."}
    # The same history with an edited old message has no summary.
    edited = ClientHistory.of(
        (SYSTEM, ChatMessage("user", "other"), *later.messages[2:])
    )
    assert records.lookup(edited) is None


def test_the_longest_remembered_prefix_wins_and_the_newest_message_is_never_covered():
    records = TrimRecords()
    history = ClientHistory.of(conversation(4))
    short = TrimRecord(3, "s1", 2)
    long = TrimRecord(7, "s2", 2)
    records.remember(history, short)
    records.remember(history, long)
    assert records.lookup(history) == long
    # A history that ends right where the long record ends: that record would cover
    # the message being answered, so the shorter one applies.
    cut = ClientHistory.of(history.messages[:7])
    assert records.lookup(cut) == short


def test_records_are_bounded():
    records = TrimRecords(capacity=2)
    for i in range(3):
        history = ClientHistory.of(conversation(2, last_user=f"u{i}"))
        records.remember(history, TrimRecord(3 + 0 * i, f"s{i}", 1))
    assert len(records) <= 2


def test_merged_style_puts_the_summary_into_the_system_prompt():
    history = ClientHistory.of(conversation(2))
    view = model_view(history, TrimRecord(3, "gist", 1), MERGED)
    assert view.head == (ChatMessage("system", f"Be brief.\n\n{HEADER}\ngist"),)
    no_system = ClientHistory.of(conversation(2, system=False))
    assert no_system.system_count == 0
    view = model_view(no_system, TrimRecord(2, "gist", 1), MERGED)
    assert view.head == (ChatMessage("system", f"{HEADER}\ngist"),)


def test_a_request_continues_the_cache_of_its_conversation():
    index = ConversationIndex(cached_tokens=lambda key: 10)
    one = ClientHistory.of(conversation(1))
    lease = index.acquire(one.hashes, one.system_count)
    assert not lease.continued
    index.release(lease, one.hashes)
    # The next request of the same conversation: everything before, plus more.
    two = ClientHistory.of(
        (*one.messages, ChatMessage("assistant", "r"), ChatMessage("user", "u"))
    )
    again = index.acquire(two.hashes, two.system_count)
    assert again.key == lease.key and again.continued
    index.release(again, two.hashes)
    # Another conversation with the same system prompt gets a cache of its own.
    other = ClientHistory.of((SYSTEM, ChatMessage("user", "different")))
    other_lease = index.acquire(other.hashes, other.system_count)
    assert other_lease.key != lease.key and not other_lease.continued
    index.release(other_lease, other.hashes)
    # Regenerating or editing the last message still continues it.
    edited = ClientHistory.of((*two.messages[:-1], ChatMessage("user", "edited")))
    edit_lease = index.acquire(edited.hashes, edited.system_count)
    assert edit_lease.key == lease.key
    index.release(edit_lease, edited.hashes)


def test_a_busy_cache_is_never_shared():
    index = ConversationIndex(cached_tokens=lambda key: 10)
    history = ClientHistory.of(conversation(1))
    first = index.acquire(history.hashes, history.system_count)
    index.release(first, history.hashes)
    busy = index.acquire(history.hashes, history.system_count)
    twin = index.acquire(history.hashes, history.system_count)
    assert busy.key == first.key and twin.key != first.key
    index.release(twin, history.hashes)
    index.release(busy, history.hashes)
    assert set(index.forget_idle()) == {first.key, twin.key}
    assert index.keys() == []


def test_the_index_forgets_the_least_recently_used_idle_conversations():
    index = ConversationIndex(cached_tokens=lambda key: 0, capacity=2)
    keys = []
    for i in range(3):
        history = ClientHistory.of((ChatMessage("user", f"conversation {i}"),))
        lease = index.acquire(history.hashes, history.system_count)
        index.release(lease, history.hashes)
        keys.append(lease.key)
    assert index.keys() == keys[1:]
    assert index.live_conversations() == 0


def test_keys_are_never_reused_by_a_later_index():
    # A server started again on the same engine must not inherit old caches' keys.
    history = ClientHistory.of(conversation(1))
    first = ConversationIndex(cached_tokens=lambda key: 0).acquire(history.hashes, 1)
    second = ConversationIndex(cached_tokens=lambda key: 0).acquire(history.hashes, 1)
    assert first.key != second.key
