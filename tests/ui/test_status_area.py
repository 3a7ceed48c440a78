"""The memory gauge (live, off the UI thread) and the context meter."""

from __future__ import annotations

import threading

from PySide6.QtCore import Qt

from app.core.budget.context_state import ContextState
from app.core.memory.snapshot import MemorySnapshot, PressureLevel
from app.ui.context_meter_view import meter_text
from app.ui.memory_gauge_view import split_memory

GIB = 1024**3


def _snapshot(**changes) -> MemorySnapshot:
    values = {
        "time": 0.0,
        "total_bytes": 16 * GIB,
        "available_bytes": 10 * GIB,
        "swap_total": 0,
        "swap_used": 0,
        "swap_in_rate": 0.0,
        "swap_out_rate": 0.0,
        "pressure": PressureLevel.NORMAL,
        "pressure_source": "test",
        "kv_bytes": 1 * GIB,
    }
    values.update(changes)
    return MemorySnapshot(**values)


def test_split_memory_adds_up_to_total_ram():
    parts = split_memory(_snapshot(), weights_bytes=2 * GIB)
    assert (parts.weights, parts.kv, parts.other, parts.free) == (
        2 * GIB,
        GIB,
        3 * GIB,
        10 * GIB,
    )
    assert parts.total == 16 * GIB
    # Never more than is used, whatever the counters say.
    squeezed = split_memory(_snapshot(available_bytes=15 * GIB), weights_bytes=4 * GIB)
    assert (squeezed.weights, squeezed.kv, squeezed.other) == (GIB, 0, 0)


def test_the_gauge_samples_every_half_second_off_the_ui_thread(qtbot, window):
    threads = []
    window.sampler.snapshot_taken.connect(
        lambda _s: threads.append(threading.current_thread()),
        Qt.ConnectionType.DirectConnection,
    )
    gauge = window.memory_gauge
    start = gauge.samples
    qtbot.waitUntil(lambda: gauge.samples >= start + 2, timeout=3000)
    assert threads and all(t is not threading.main_thread() for t in threads)
    snapshot = gauge.snapshot
    assert snapshot.mlx_active is not None  # MLX counters once the model is loaded
    parts = gauge.segments
    assert parts.total == snapshot.total_bytes
    assert parts.weights == min(
        window.model_info.weights_bytes, parts.total - parts.free
    )
    text = gauge.text_label.text()
    assert "free of" in text and "normal" in text and "</span> model " in text
    tooltip = gauge.toolTip()
    for words in (
        "Model weights",
        "KV cache",
        "Other",
        "Free",
        "Swap",
        "Pressure",
        "MLX",
    ):
        assert words in tooltip
    assert snapshot.pressure_source in tooltip
    assert len(gauge.sparkline.values) >= 2


def test_the_context_meter_follows_the_conversation(qtbot, window, send, quick_preset):
    window.set_preset(quick_preset(max_context=2048))
    conversation_id, report = send(window, "How full is the context now?")
    qtbot.waitUntil(
        lambda: (
            window.context_meter.state is not None
            and window.context_meter.state.conversation_id == conversation_id
        ),
        timeout=5000,
    )
    state = window.context_meter.state
    assert state.exact
    assert state.tokens == report.context_tokens
    assert state.kv_bytes == report.kv_bytes and state.kv_bits == 8
    assert state.effective_limit == 2048 and state.preset_limit == 2048
    assert state.next_trim_at == 2048 - 16
    assert state.trims == 0
    text = window.context_meter.text_label.text()
    assert text.startswith(f"{report.context_tokens:,} / 2,048 tokens")
    assert "0 trims" in text
    assert window.context_meter.bar.mark == (2048 - 16) / 2048


def test_the_context_meter_estimates_a_reopened_conversation(qtbot, window, send):
    conversation_id, report = send(window, "Remember me")
    window.new_chat()
    with qtbot.waitSignal(
        window.context_measured,
        timeout=5000,
        check_params_cb=lambda state: state.conversation_id == conversation_id,
    ):
        window.open_conversation(conversation_id)
    assert window.context_meter.state.tokens > 0


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
