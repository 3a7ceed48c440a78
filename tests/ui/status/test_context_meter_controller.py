"""The context meter follows the open conversation, also while the model works elsewhere."""

from __future__ import annotations

import pytest

from app.core.budget.context_state import ContextState
from app.ui.status.context_meter_controller import LAST_KNOWN
from app.ui.status.context_meter_view import meter_text


def test_the_context_meter_follows_the_conversation(qtbot, window, send, quick_preset):
    window.current.set_preset(quick_preset(max_context=2048))
    conversation_id, report = send(window, "How full is the context now?")
    meter = window.context_meter
    qtbot.waitUntil(
        lambda: (
            meter.state is not None and meter.state.conversation_id == conversation_id
        ),
        timeout=5000,
    )
    state = meter.state
    assert state.exact
    assert state.tokens == report.context_tokens
    assert state.kv_bytes == report.kv_bytes and state.kv_bits == 8
    assert state.effective_limit == 2048 and state.preset_limit == 2048
    assert state.next_trim_at == 2048 - 16
    assert state.trims == 0
    text = meter.text_label.full_text
    assert text.startswith(f"{report.context_tokens:,} / 2,048 tokens")
    assert "trim" not in text and text.endswith("8-bit")  # none yet: the tooltip says
    assert meter.bar.mark == (2048 - 16) / 2048


def test_the_context_meter_estimates_a_reopened_conversation(qtbot, window, send):
    conversation_id, report = send(window, "Remember me")
    window.current.new_chat()
    meter = window.context_meter
    qtbot.waitUntil(
        lambda: meter.state is not None and meter.state.conversation_id is None,
        timeout=5000,
    )
    window.current.open(conversation_id)
    qtbot.waitUntil(
        lambda: meter.state.conversation_id == conversation_id and not meter.note,
        timeout=5000,
    )
    assert meter.state.tokens == report.context_tokens  # its live cache, measured


def test_the_meter_shows_the_open_conversation_while_another_one_streams(
    qtbot, window, send, store, quick_preset
):
    first, _ = send(window, "A short first conversation")
    meter = window.context_meter
    # The worker's exact numbers after the turn (not the new chat's estimate).
    qtbot.waitUntil(
        lambda: (
            window.meter.state(first) is not None and window.meter.state(first).exact
        ),
        timeout=5000,
    )
    first_state = window.meter.state(first)
    never = store.create_conversation("never opened", model=window.models.info.folder)
    store.add_message(never, "user", "An old question")
    store.add_message(never, "assistant", "An old answer")
    window.current.new_chat()
    window.current.set_preset(quick_preset(max_tokens=4000))
    with qtbot.waitSignal(window.turns.live_text_changed, timeout=30_000) as blocker:
        window.turns.send("A long second one, please")
    streaming = blocker.args[0]
    window.current.open(first)
    # At once, while the model still writes the other reply: this conversation's own
    # numbers, said to be the last measurement, never the other one's.
    assert window.turns.live_conversation_id == streaming
    assert meter.state is first_state and meter.note == LAST_KNOWN
    assert meter.text_label.full_text.endswith(f"({LAST_KNOWN})")
    qtbot.waitUntil(lambda: meter.note == "", timeout=5000)  # measured afresh
    assert meter.state.conversation_id == first
    # A conversation never measured before is measured while the reply streams on.
    window.current.open(never)
    qtbot.waitUntil(
        lambda: meter.state is not None and meter.state.conversation_id == never,
        timeout=5000,
    )
    assert window.turns.busy and window.turns.live_conversation_id == streaming
    assert meter.state.tokens > 0 and not meter.state.exact
    assert meter.streamed == 0  # the other reply's tokens are not counted here
    with qtbot.waitSignal(window.turns.reply_finished, timeout=30_000):
        window.turns.stop()


def test_meter_text_marks_estimates_and_a_lower_device_limit():
    state = ContextState(
        conversation_id=1,
        tokens=1200,
        effective_limit=4096,
        preset_limit=10000,
        kv_bytes=3 * 1024 * 1024,
        kv_bits=4,
        trims=2,
        next_trim_at=3584,
        exact=False,
    )
    text = meter_text(state, streamed=10)
    assert text.startswith("≈1,210 / 4,096 (capped) tokens")
    assert "chat KV ≈3.0 MiB 4-bit · 2 trims" in text


def test_an_aged_cache_is_drawn_as_bands_with_tokens_and_bytes_per_tier(
    qtbot, window, send, quick_preset
):
    window.current.set_preset(
        quick_preset(
            kv_bits=4,
            kv_recent_tokens=64,
            kv_band_tokens=64,
            kv_age_block=64,
            max_context=4096,
        )
    )
    words = " ".join(f"word{i}" for i in range(300))
    conversation_id, report = send(window, f"Please read this: {words}")
    meter = window.context_meter
    qtbot.waitUntil(
        lambda: (
            meter.state is not None
            and meter.state.conversation_id == conversation_id
            and meter.state.exact
        ),
        timeout=5000,
    )
    tiers = {tier.name: tier for tier in meter.state.kv_tiers}
    assert set(tiers) == {"recent", "band", "floor"}
    assert sum(t.tokens for t in tiers.values()) == report.context_tokens
    assert sum(t.nbytes for t in tiers.values()) == report.kv_bytes
    assert tiers["band"].tokens == 64 and tiers["floor"].tokens > 0
    # Oldest (least precise) band on the left, shares of the filled part.
    assert [name for name, _ in meter.bar.bands] == ["floor", "band", "recent"]
    assert sum(share for _, share in meter.bar.bands) == pytest.approx(1.0)
    text = meter.text_label.full_text
    assert "64 8-bit" in text and f"{tiers['floor'].tokens:,} 4-bit" in text
    assert "aged (" in text
    assert "recent" in meter.toolTip() and "floor" in meter.toolTip()
    meter.grab()  # paints the bands without a Qt warning
