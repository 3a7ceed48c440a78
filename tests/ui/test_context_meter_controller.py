"""The context meter follows the open conversation, also while the model works elsewhere."""

from __future__ import annotations

from app.ui.context_meter_controller import LAST_KNOWN, WAITING
from app.ui.context_meter_view import meter_text
from app.ui.generation_worker import ContextState


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
    assert "0 trims" in text
    assert meter.bar.mark == (2048 - 16) / 2048


def test_the_context_meter_estimates_a_reopened_conversation(qtbot, window, send):
    conversation_id, report = send(window, "Remember me")
    window.current.new_chat()
    with qtbot.waitSignal(
        window.worker.context_measured,
        timeout=5000,
        check_params_cb=lambda state: state.conversation_id == conversation_id,
    ):
        window.current.open(conversation_id)
    qtbot.waitUntil(lambda: window.context_meter.state is not None, timeout=2000)
    assert window.context_meter.state.tokens > 0


def test_the_meter_shows_the_open_conversation_while_another_one_streams(
    qtbot, window, send, quick_preset
):
    first, _ = send(window, "A short first conversation")
    meter = window.context_meter
    qtbot.waitUntil(lambda: window.meter.state(first) is not None, timeout=5000)
    first_state = window.meter.state(first)
    window.current.new_chat()
    window.current.set_preset(quick_preset(max_tokens=4000))
    with qtbot.waitSignal(window.turns.live_text_changed, timeout=30_000) as blocker:
        window.turns.send("A long second one, please")
    streaming = blocker.args[0]
    window.current.open(first)
    # At once, while the model still writes the other reply: this conversation's own
    # numbers, said to be the last measurement, never the other one's.
    assert window.turns.busy and window.turns.live_conversation_id == streaming
    assert meter.state is first_state and meter.note == LAST_KNOWN
    assert meter.text_label.full_text.endswith(f"({LAST_KNOWN})")
    streamed = meter.streamed
    qtbot.wait(300)
    assert meter.streamed == streamed  # the other reply's tokens are not counted here
    with qtbot.waitSignal(window.turns.reply_finished, timeout=30_000):
        window.turns.stop()
    qtbot.waitUntil(lambda: meter.note == "", timeout=5000)
    assert meter.state.conversation_id == first


def test_a_conversation_never_measured_says_it_waits(qtbot, window, send, store):
    other = store.create_conversation("never opened", model=window.models.info.folder)
    store.add_message(other, "user", "An old question")
    store.add_message(other, "assistant", "An old answer")
    window.current.new_chat()
    with qtbot.waitSignal(window.turns.live_text_changed, timeout=30_000):
        window.current.set_preset(window.current.preset().with_changes(max_tokens=4000))
        window.turns.send("Keep the model busy")
    window.current.open(other)
    assert window.context_meter.state is None
    assert window.context_meter.text_label.full_text == WAITING
    with qtbot.waitSignal(window.turns.reply_finished, timeout=30_000):
        window.turns.stop()
    qtbot.waitUntil(lambda: window.context_meter.state is not None, timeout=5000)
    assert window.context_meter.state.conversation_id == other


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
    assert text.startswith("≈1,210 / 4,096 (preset 10,000, device limit lower)")
    assert "KV 3.0 MiB at 4-bit" in text and "2 trims" in text
