"""The session registry: one session per conversation, presets, the meter's numbers."""

from __future__ import annotations

import threading

import pytest

from app.core.chat.sessions import SessionRegistry
from app.core.engine.engine import Engine
from app.core.errors import KnownError
from app.core.presets.presets import get_preset


def quick(**changes):
    return get_preset("chat").with_changes(
        temperature=0.0, max_tokens=8, summary_mode="extractive", **changes
    )


def test_without_a_model_presets_are_stored_and_turns_refused(store):
    registry = SessionRegistry(Engine(), store)
    cid = store.create_conversation(
        model="m", preset="chat", settings=quick().to_dict()
    )
    registry.apply_preset(cid, quick(kv_bits=4, name="code"))
    conversation = store.get_conversation(cid)
    assert conversation.preset == "code" and conversation.settings["kv_bits"] == 4
    with pytest.raises(KnownError, match="No model is loaded"):
        registry.for_turn(cid)


def test_one_session_per_conversation_even_from_many_threads(engine, store):
    registry = SessionRegistry(engine, store)
    cid = registry.start(quick()).conversation_id
    registry.forget(cid)
    seen = []
    threads = [
        threading.Thread(target=lambda: seen.append(registry.get(cid)))
        for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(s) for s in seen}) == 1


def test_the_meter_numbers_follow_the_cache_and_the_preset(engine, store):
    registry = SessionRegistry(engine, store, pressure=lambda: "normal")
    session = registry.start(quick(kv_bits=8, kv_group=32, max_context=1024))
    cid = session.conversation_id
    before = registry.context_state(cid)
    system = [{"role": "system", "content": session.preset.system_prompt}]
    assert before.tokens == len(engine.render(system, False)) and not before.exact
    report = session.send("Hello, how are you today?").wait()
    after = registry.context_state(cid)
    assert after.exact and after.tokens == report.context_tokens
    assert after.kv_bytes == report.kv_bytes and after.kv_group == 32
    assert after.effective_limit == 1024 and after.next_trim_at == 1024 - 8
    new_chat = registry.new_chat_state(quick(system_prompt="Be brief."))
    assert new_chat.conversation_id is None and new_chat.tokens > 0
    # A new model drops every session; the conversation reopens from the store.
    registry.clear()
    assert registry.get(cid) is not session
    assert registry.get(cid).preset.kv_group == 32
