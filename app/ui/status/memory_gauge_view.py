"""The memory gauge: where the machine's RAM is going, live, coloured by pressure.

A bar split into model weights / KV cache / everything else / free, a line of numbers
(free memory, swap, pressure level; elided, never widening the window), and a sparkline of the last three minutes of used
memory with the memory cap drawn in. The tooltip explains every number and where it
comes from. Snapshots arrive from the sampler thread twice a second; the view only
stores and paints them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPalette, QPen
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QWidget

from app.core.memory.snapshot import MemorySnapshot
from app.core.text.display_numbers import format_bytes
from app.ui.common.elided_label import ElidedLabel
from app.ui.common.theme import PRESSURE_COLOURS, SEGMENT_COLOURS, muted_colour

HISTORY_SAMPLES = 360  # three minutes at one sample per 500 ms


@dataclass(frozen=True)
class MemorySegments:
    """The four parts of the bar, in bytes; they add up to total RAM."""

    weights: int
    kv: int
    other: int
    free: int

    @property
    def total(self) -> int:
        """Total RAM."""
        return self.weights + self.kv + self.other + self.free


def split_memory(snapshot: MemorySnapshot, weights_bytes: int) -> MemorySegments:
    """Split total RAM into weights, KV cache, everything else, and free.

    Used memory is total − available; the model's weights and the KV cache are taken out
    of it (never more than there is), the rest is other apps, the system and the UI.
    """
    used = max(0, snapshot.total_bytes - snapshot.available_bytes)
    weights = min(max(weights_bytes, 0), used)
    kv = min(max(snapshot.kv_bytes or 0, 0), used - weights)
    return MemorySegments(weights, kv, used - weights - kv, snapshot.available_bytes)


def gauge_tooltip(snapshot: MemorySnapshot, weights_bytes: int) -> str:
    """Explain each number of the gauge and its source, as rich text."""
    parts = split_memory(snapshot, weights_bytes)
    if snapshot.swap_total:
        swap = (
            f"{format_bytes(snapshot.swap_used)} of {format_bytes(snapshot.swap_total)} in "
            f"use; now {format_bytes(snapshot.swap_in_rate)}/s in, "
            f"{format_bytes(snapshot.swap_out_rate)}/s out"
        )
    else:
        swap = "none configured"
    rows = [
        (
            "Model weights",
            format_bytes(parts.weights),
            "parameters of the loaded model as MLX holds them (measured when it loaded)",
        ),
        (
            "KV cache",
            format_bytes(parts.kv),
            "bytes held by the conversation caches (the engine's cache arrays)",
        ),
        (
            "Other",
            format_bytes(parts.other),
            "other apps, the system and this window: used memory (total − available, "
            "from the OS) minus the two above",
        ),
        (
            "Free",
            format_bytes(parts.free),
            "memory the OS can hand out without swapping (psutil “available”)",
        ),
        ("Swap", swap, "the OS swap counters; Swapless exists to keep this at zero"),
        ("Pressure", snapshot.pressure.value, snapshot.pressure_source),
    ]
    if snapshot.mlx_active is not None:
        rows.append(
            (
                "MLX",
                f"{format_bytes(snapshot.mlx_active)} active, "
                f"{format_bytes(snapshot.mlx_cache)} cached, peak {format_bytes(snapshot.mlx_peak)}",
                "MLX's own allocator counters",
            )
        )
    rows.append(
        ("This process", format_bytes(snapshot.process_rss), "resident memory (RSS)")
    )
    body = "".join(
        f"<tr><td><b>{name}</b></td><td>&nbsp;{value}&nbsp;</td>"
        f"<td style='color: {muted_colour()}'>{why}</td></tr>"
        for name, value, why in rows
    )
    return (
        f"<p><b>Memory</b> — {format_bytes(snapshot.total_bytes)} in all, sampled every "
        f"0.5 s off the UI thread.</p><table>{body}</table>"
    )


class _MemoryBar(QWidget):
    def __init__(self, parent: QWidget):
        super().__init__(parent)
        self.segments: MemorySegments | None = None
        self.pressure = "normal"
        self.setMinimumSize(120, 14)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = QRectF(self.rect()).adjusted(1, 1, -1, -1)
        path = QPainterPath()
        path.addRoundedRect(rect, 4, 4)
        painter.fillPath(path, self.palette().color(QPalette.ColorRole.Base))
        if self.segments and self.segments.total:
            painter.setClipPath(path)
            x = rect.left()
            for name in ("weights", "kv", "other"):
                width = (
                    rect.width() * getattr(self.segments, name) / self.segments.total
                )
                if name != "other" and getattr(self.segments, name) > 0:
                    width = max(width, 2.0)  # a small model's share stays visible
                painter.fillRect(
                    QRectF(x, rect.top(), width, rect.height()),
                    QColor(SEGMENT_COLOURS[name]),
                )
                x += width
            painter.setClipping(False)
        painter.setPen(QPen(QColor(PRESSURE_COLOURS[self.pressure]), 1.5))
        painter.drawPath(path)


class _Sparkline(QWidget):
    def __init__(self, parent: QWidget):
        super().__init__(parent)
        self.values: deque[float] = deque(maxlen=HISTORY_SAMPLES)
        self.cap: float | None = None
        self.pressure = "normal"
        self.setFixedSize(110, 22)

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = QRectF(self.rect()).adjusted(1, 1, -1, -1)
        painter.fillRect(rect, self.palette().color(QPalette.ColorRole.Base))
        if self.cap is not None:
            y = rect.bottom() - rect.height() * self.cap
            pen = QPen(
                self.palette().color(QPalette.ColorRole.Mid), 1, Qt.PenStyle.DashLine
            )
            painter.setPen(pen)
            painter.drawLine(QPointF(rect.left(), y), QPointF(rect.right(), y))
        if len(self.values) >= 2:
            step = rect.width() / (HISTORY_SAMPLES - 1)
            start = rect.right() - step * (len(self.values) - 1)
            path = QPainterPath()
            for i, value in enumerate(self.values):
                point = QPointF(start + i * step, rect.bottom() - rect.height() * value)
                if i == 0:
                    path.moveTo(point)
                else:
                    path.lineTo(point)
            painter.setPen(QPen(QColor(PRESSURE_COLOURS[self.pressure]), 1.4))
            painter.drawPath(path)


class MemoryGaugeView(QWidget):
    """Live memory bar, numbers and sparkline."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("memoryGauge")
        self.snapshot: MemorySnapshot | None = None
        self.weights_bytes = 0
        self.samples = 0
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(8)
        self.title_label = QLabel("<b>Memory</b>")
        layout.addWidget(self.title_label)
        self.bar = _MemoryBar(self)
        # The numbers come first: the bar takes what they leave, up to this.
        self.bar.setMaximumWidth(100)
        layout.addWidget(self.bar, 1)
        self.text_label = ElidedLabel("sampling…")
        # Room for "■ model 4.2 GiB ■ all KV 300 MiB" whatever else the row holds.
        self.text_label.setMinimumWidth(
            self.text_label.fontMetrics().horizontalAdvance(
                "■ model 14.0 GiB ■ all KV 300.0 MiB"
            )
        )
        layout.addWidget(self.text_label)
        self.sparkline = _Sparkline(self)
        layout.addWidget(self.sparkline)

    @property
    def segments(self) -> MemorySegments | None:
        """The bar's parts for the newest snapshot."""
        return self.bar.segments

    def set_weights_bytes(self, weights_bytes: int) -> None:
        """The loaded model's weights (0 when none is loaded)."""
        self.weights_bytes = weights_bytes
        if self.snapshot is not None:
            self.update_snapshot(self.snapshot, record=False)

    def set_cap_fraction(self, fraction: float) -> None:
        """Draw the memory cap (share of RAM Swapless plans to use) on the sparkline."""
        self.sparkline.cap = fraction
        self.sparkline.update()

    def update_snapshot(self, snapshot: MemorySnapshot, record: bool = True) -> None:
        """Show a new sample."""
        self.snapshot = snapshot
        level = snapshot.pressure.value
        segments = split_memory(snapshot, self.weights_bytes)
        self.bar.segments = segments
        self.bar.pressure = level
        self.sparkline.pressure = level
        if record:
            self.samples += 1
            used = 1 - snapshot.available_fraction
            self.sparkline.values.append(min(max(used, 0.0), 1.0))
        # The total and an unused swap are in the tooltip: the line keeps what changes.
        swap = (
            f"swap {format_bytes(snapshot.swap_used)} · " if snapshot.swap_used else ""
        )
        parts: list[tuple[str, str | None]] = []
        # "all KV": every cache in memory (the context meter shows one chat's).
        for key, name in (("weights", "model"), ("kv", "all KV"), ("other", "other")):
            parts += [
                ("■", SEGMENT_COLOURS[key]),
                (f" {name} {format_bytes(getattr(segments, key))} ", None),
            ]
        parts += [
            (f"· {format_bytes(segments.free)} free · {swap}", None),
            (f"● {level}", PRESSURE_COLOURS[level]),
        ]
        self.text_label.set_parts(parts)
        self.setToolTip(gauge_tooltip(snapshot, self.weights_bytes))
        self.bar.update()
        self.sparkline.update()
