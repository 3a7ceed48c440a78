"""The memory gauge: live, sampled off the UI thread, its numbers adding up."""

from __future__ import annotations

import threading

from PySide6.QtCore import Qt

from app.core.memory.snapshot import MemorySnapshot, PressureLevel
from app.ui.status.memory_gauge_view import split_memory

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
    assert snapshot.pressure_signals  # what the level was decided from
    parts = gauge.segments
    assert parts.total == snapshot.total_bytes
    assert parts.weights == min(
        window.models.info.weights_bytes, parts.total - parts.free
    )
    text = gauge.text_label.full_text
    assert " free · " in text and "normal" in text and "■ model " in text
    # The gauge's KV is every cache in memory; the meter's is one chat's.
    assert "■ all KV " in text
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
