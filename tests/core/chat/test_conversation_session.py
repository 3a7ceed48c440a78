"""Stored conversations on the real tiny model: reuse, auto-trim, summaries, refusals."""

from __future__ import annotations

import pytest

from app.core.chat.conversation_session import ConversationSession
from app.core.chat.trimmer import Trimmer
from app.core.errors import BudgetError
from app.core.presets.presets import get_preset
from app.core.recall.block import render_block

SYSTEM = "You are Swapless test bot. Always answer briefly."


def start(engine, store, tiny_model_dir, **changes):
    preset = get_preset("chat").with_changes(
        system_prompt=SYSTEM,
        temperature=0.0,
        max_tokens=16,
        summary_mode="extractive",
        **changes,
    )
    return ConversationSession.start(engine, store, preset, model=str(tiny_model_dir))


def user_turn(i: int) -> str:
    return f"Turn {i}: please remember that item {i} costs {i * 3} euros and is blue."


def check_summary_coverage(store, conversation_id):
    """Every message up to the active summary's end is covered; none after it."""
    messages = store.messages(conversation_id, include_trimmed=True)
    active = [s for s in store.summaries(conversation_id) if s.superseded_by is None]
    if not active:
        assert all(m.summary_id is None for m in messages)
        return None
    assert len(active) == 1
    summary = active[0]
    for message in messages:
        covered = summary.first_message_id <= message.id <= summary.last_message_id
        assert (message.summary_id is not None) == covered, message
    return summary


def test_forty_turns_never_pass_max_context(engine, store, tiny_model_dir):
    session = start(engine, store, tiny_model_dir, max_context=512, keep_ratio=0.6)
    system_ids = engine.render(
        [{"role": "system", "content": SYSTEM}], add_generation_prompt=False
    )
    trims = 0
    for i in range(1, 41):
        report = session.send(user_turn(i)).wait()
        held = engine.cache_state(session.cache_key).tokens
        assert held <= 512 and report.context_tokens == held
        assert report.effective_max_context == 512
        cached = engine.cached_token_ids(session.cache_key)
        assert (
            cached[: len(system_ids)] == system_ids
        )  # the system prompt is always kept
        context = store.context_for_model(session.conversation_id)
        assert context.system_prompt == SYSTEM
        newest = context.messages[-2:]
        assert [m.role for m in newest] == ["user", "assistant"]
        assert newest[0].content == user_turn(i)
        summary = check_summary_coverage(store, session.conversation_id)
        if report.trimmed:
            trims += 1
            assert summary is not None and report.summary_tokens > 0
            assert report.trim_method == "splice", report.trim_note
            # After a splice the summary and kept turns come from the cache; only the
            # new message and the tail of the last reply are prefilled. A rebuild
            # would reuse just the system prompt.
            # (What recall put back before the new message is new tokens too.)
            recalled = engine.count_tokens(render_block(report.recalled))
            assert report.reused_tokens + recalled > 0.6 * report.prompt_tokens
    assert trims >= 5
    assert len(store.messages(session.conversation_id, include_trimmed=True)) == 80


def test_rebuild_trim_gives_the_same_greedy_reply_as_a_fresh_prefill(
    engine, store, tiny_model_dir
):
    session = start(
        engine, store, tiny_model_dir, max_context=400, trim_method="rebuild"
    )
    trimmed_reports = []
    for i in range(1, 12):
        report = session.send(user_turn(i)).wait()
        if report.trimmed:
            trimmed_reports.append(report)
            context = store.context_for_model(session.conversation_id)
            prompt_messages = session.model_messages(context)[:-1]  # without the reply
            fresh = engine.chat(
                f"fresh-{i}",
                prompt_messages,
                session.preset.kv_settings(),
                session.preset.sampling_settings(),
            )
            assert fresh.text() == report.reply
            assert report.trim_method == "rebuild"
    assert trimmed_reports


def test_auto_trim_off_refuses_with_the_numbers_and_saves_nothing(
    engine, store, tiny_model_dir
):
    session = start(engine, store, tiny_model_dir, max_context=300, auto_trim=False)
    with pytest.raises(BudgetError) as excinfo:
        for i in range(1, 20):
            session.send(user_turn(i)).wait()
    message = str(excinfo.value)
    assert "300" in message and "Auto-trim is off" in message
    saved = store.messages(session.conversation_id, include_trimmed=True)
    assert saved[-1].role == "assistant"  # the refused user message was not stored


def test_critical_pressure_trims_and_refuses_the_prefill(engine, store, tiny_model_dir):
    level = {"now": "normal"}
    preset = get_preset("chat").with_changes(
        system_prompt=SYSTEM,
        temperature=0.0,
        max_tokens=8,
        summary_mode="extractive",
        keep_ratio=0.3,
    )
    session = ConversationSession.start(
        engine, store, preset, model=str(tiny_model_dir), pressure=lambda: level["now"]
    )
    for i in range(1, 6):
        session.send(user_turn(i)).wait()
    level["now"] = "critical"
    with pytest.raises(BudgetError, match="critical"):
        session.send("one more").wait()
    summary = check_summary_coverage(store, session.conversation_id)
    assert summary is not None and summary.cause == "critical"
    level["now"] = "normal"
    assert session.send("one more").wait().finish_reason in {"length", "stop"}


def test_warning_pressure_trims_earlier(engine, store, tiny_model_dir):
    level = {"now": "warning"}
    preset = get_preset("chat").with_changes(
        system_prompt=SYSTEM,
        temperature=0.0,
        max_tokens=8,
        summary_mode="extractive",
        max_context=600,
    )
    session = ConversationSession.start(
        engine, store, preset, model=str(tiny_model_dir), pressure=lambda: level["now"]
    )
    for i in range(1, 15):
        report = session.send(user_turn(i)).wait()
        assert report.context_tokens <= 0.75 * 600 + 8
    # Every trim came early, and the store says where and why.
    summaries = store.summaries(session.conversation_id, include_superseded=True)
    assert summaries
    assert {(s.cause, s.limit_tokens, s.trim_at_tokens) for s in summaries} == {
        ("pressure", 600, 450)
    }


def test_model_summary_is_generated_on_the_live_cache_and_taken_off_again(
    engine, tiny_model_dir
):
    kv = get_preset("chat").kv_settings()
    messages = [{"role": "system", "content": SYSTEM}]
    for i in range(1, 4):
        messages.append({"role": "user", "content": user_turn(i)})
        handle = engine.chat(
            "model-summary", list(messages), kv, get_preset("chat").sampling_settings(0)
        )
        messages.append({"role": "assistant", "content": handle.text()})
    before = engine.cached_token_ids("model-summary")
    trimmer = Trimmer(engine, "model-summary", kv, "separate")
    text, method, note = trimmer.write_summary(
        "model", 24, messages, [("user", "x")], 2, ""
    )
    # Random weights write junk, which the degenerate check may replace (and say so).
    assert (method, note) == ("model", "") or "unusable" in note
    assert engine.count_tokens(text) <= 24 + 16  # bounded (plus the header)
    after = engine.cached_token_ids("model-summary")
    # The request and the summary's tokens were trimmed off; the history up to the last
    # reply (whose generated tokens may re-tokenize differently) is intact.
    history = engine.render(messages[:-1], add_generation_prompt=True)
    assert after == before[: len(after)] and len(after) >= len(history)


def test_a_trim_that_keeps_nothing_splices_even_when_the_reply_does_not_re_encode(
    engine, tiny_model_dir
):
    # A reply cut inside a character (or random weights emitting a lone byte) leaves
    # ids in the cache that a fresh rendering of the stored text does not reproduce.
    # When the trim keeps nothing, those ids are dropped anyway: the splice must go
    # ahead (and a cache that cannot splice must say why, not "did not line up").
    tokenizer = engine.tokenizer
    odd = next(
        i
        for i in range(512)
        if tokenizer.encode(tokenizer.decode([i])) not in ([i], [])
    )
    kv = get_preset("chat").kv_settings()
    history = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": user_turn(1)},
    ]
    reply_ids = [odd, odd, odd]
    prompt = engine.render(history, add_generation_prompt=True)
    engine.prefill("keeps-nothing", prompt + reply_ids, kv)
    old = [*history, {"role": "assistant", "content": tokenizer.decode(reply_ids)}]
    assert engine.render(old, add_generation_prompt=False)[: len(prompt) + 3] != (
        prompt + reply_ids
    )
    new = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Summary: item 1 costs 3 euros."},
    ]
    trimmer = Trimmer(engine, "keeps-nothing", kv, "separate")
    method, note, _, held = trimmer.fix_cache("splice", old, len(old), new, len(new))
    assert (method, note) == ("splice", "")
    head = engine.render(new, add_generation_prompt=False)
    assert engine.cached_token_ids("keeps-nothing") == head and held == len(head)


def test_a_cache_that_cannot_be_spliced_is_rebuilt_and_says_so(
    engine, store, tiny_model_dir, monkeypatch
):
    from app.core.engine.cache.conversation_cache import ConversationCache

    # Models with recurrent or sliding-window layers have caches splicing cannot handle.
    monkeypatch.setattr(ConversationCache, "can_splice", lambda self: False)
    # Recall off: at 400 tokens its reserve drops whole random replies, whose
    # generated tokens may not re-tokenize the same (another reason to rebuild).
    session = start(engine, store, tiny_model_dir, max_context=400, recall=False)
    trimmed = [
        r
        for r in (session.send(user_turn(i)).wait() for i in range(1, 12))
        if r.trimmed
    ]
    assert trimmed
    for report in trimmed:
        assert report.trim_method == "rebuild"
        assert (
            "splice not possible" in report.trim_note
            and "rebuilt instead" in report.trim_note
        )
        assert report.context_tokens <= 400


def test_splices_stop_before_positions_pass_the_trained_context(
    engine, store, tiny_model_dir, monkeypatch
):
    # The tiny model was trained for 16K tokens; pretend it was 900 so that after a few
    # splices the running rotary position would pass it.
    monkeypatch.setattr(engine, "trained_context", lambda: 900)
    session = start(engine, store, tiny_model_dir, max_context=400, recall=False)
    methods = []
    for i in range(1, 25):
        report = session.send(user_turn(i)).wait()
        state = engine.cache_state(session.cache_key)
        assert state.next_position <= 900
        if report.trimmed:
            methods.append(report.trim_method)
            if report.trim_method == "rebuild":
                assert "trained context" in report.trim_note
                assert state.next_position == state.tokens  # positions start again
    assert "splice" in methods and "rebuild" in methods


def test_an_aged_cache_is_spliced_by_auto_trim_and_keeps_its_tiers(
    engine, store, tiny_model_dir
):
    session = start(
        engine,
        store,
        tiny_model_dir,
        max_context=768,
        keep_ratio=0.6,
        kv_bits=4,
        kv_recent_tokens=128,
        kv_band_tokens=128,
        kv_age_block=64,
    )
    trims = 0
    for i in range(1, 31):
        report = session.send(user_turn(i)).wait()
        held = engine.cache_state(session.cache_key)
        assert held.tokens <= 768 and report.context_tokens == held.tokens
        tiers = [g for g in held.kv_layers if g.tier]
        assert sum(g.nbytes for g in tiers) == held.kv_bytes
        # Every layer holds the same tokens; per tier they add up to what is held.
        per_layer = {g.tier: g.tokens for g in tiers}
        assert sum(per_layer.values()) == held.tokens
        if report.trimmed:
            trims += 1
            assert report.trim_method == "splice", report.trim_note
            assert report.reused_tokens > 0.5 * report.prompt_tokens
    assert trims >= 2
    assert {"recent", "band", "floor"} == set(per_layer)
