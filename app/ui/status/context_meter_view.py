"""The context meter: how full the conversation's context is, and when it will be trimmed.

It shows tokens held against the effective limit (and the preset's own limit when the
device's is smaller), the KV cache bytes at the conversation's precision, how many
trims happened, and a mark on the bar where the next trim comes. With an aged KV cache
the filled part of the bar is drawn as bands, oldest (least precise) on the left, and
the text and tooltip give each tier's tokens and bytes. While a reply streams
the count grows with the tokens (marked "≈"); the worker's measurement after the turn
makes it exact again. The line of numbers elides rather than widen the window.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPalette, QPen
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QWidget

from app.core.text.display_numbers import format_bytes, format_count
from app.ui.common.elided_label import ElidedLabel
from app.ui.common.theme import PRESSURE_COLOURS, muted_colour

NO_MODEL = "no model loaded"


# Opacity of a tier's band: the less precise, the paler (recent, band, floor).
TIER_OPACITY = {"recent": 1.0, "band": 0.65, "floor": 0.4}


def _tiers(state) -> tuple:
    return tuple(getattr(state, "kv_tiers", ()) or ())


def tier_counts(state, streamed: int = 0) -> list[tuple[str, int]]:
    """(tier name, tokens) per tier, oldest first; streamed tokens join the newest."""
    tiers = list(reversed(_tiers(state)))
    counts = [(tier.name, tier.tokens) for tier in tiers]
    if counts and streamed:
        name, tokens = counts[-1]
        counts[-1] = (name, tokens + streamed)
    return counts


def meter_text(state, streamed: int = 0) -> str:
    """The meter's line of text for a `ContextState` (plus tokens streamed since)."""
    tokens = state.tokens + streamed
    approx = "" if state.exact and not streamed else "≈"
    limit = f"{format_count(state.effective_limit)}"
    if state.preset_limit > state.effective_limit:
        # The tooltip says why (the model's trained context or this machine's memory).
        limit += " (capped)"
    tiers = _tiers(state)
    if tiers:
        held = " · ".join(
            f"{format_count(t.tokens)} {t.precision}" for t in tiers if t.tokens
        )
        precision = f"aged ({held})" if held else "aged"
    else:
        precision = f"{state.kv_bits}-bit"
    # No trims yet is the usual case: said in the tooltip, not on the line.
    trims = (
        ""
        if not state.trims
        else (" · 1 trim" if state.trims == 1 else f" · {state.trims} trims")
    )
    # "chat KV": this conversation's cache, where the memory gauge counts every one.
    return (
        f"{approx}{format_count(tokens)} / {limit} tokens · chat KV "
        f"{approx}{format_bytes(state.kv_bytes)} {precision}{trims}"
    )


def _tier_rows(state) -> str:
    rows = []
    for tier in _tiers(state):
        rows.append(
            f"<tr><td>&nbsp;&nbsp;{tier.name}</td><td>&nbsp;"
            f"{format_count(tier.tokens)} tokens, {format_bytes(tier.nbytes)}</td>"
            f"<td style='color: {muted_colour()}'>{tier.precision}</td></tr>"
        )
    return "".join(rows)


def meter_tooltip(state) -> str:
    """What each number of the meter means."""
    return (
        "<p><b>Context</b></p><table>"
        f"<tr><td><b>Held</b></td><td>&nbsp;{format_count(state.tokens)} tokens</td>"
        f"<td style='color: {muted_colour()}'>tokens of this conversation in the KV cache "
        f"({'measured on the cache' if state.exact else 'estimated from the prompt'})</td></tr>"
        f"<tr><td><b>Limit</b></td><td>&nbsp;{format_count(state.effective_limit)}</td>"
        f"<td style='color: {muted_colour()}'>the smaller of the preset's max_context "
        f"({format_count(state.preset_limit)}), the model's trained context and this device's "
        "max safe context</td></tr>"
        f"<tr><td><b>Next trim</b></td><td>&nbsp;{format_count(state.next_trim_at)}</td>"
        f"<td style='color: {muted_colour()}'>once this many tokens are held, the next message first "
        "summarises the oldest turns (room is kept for a whole reply); earlier under "
        "memory pressure</td></tr>"
        f"<tr><td><b>KV cache</b></td><td>&nbsp;{format_bytes(state.kv_bytes)}</td>"
        + (
            f"<td style='color: {muted_colour()}'>aged: the newest tokens exact, older ones less "
            f"precise ({getattr(state, 'kv_aging', '')}); per tier, newest first:"
            "</td></tr>" + _tier_rows(state)
            if _tiers(state)
            else f"<td style='color: {muted_colour()}'>bytes at {state.kv_bits}-bit precision"
            "</td></tr>"
        )
        + f"<tr><td><b>Trims</b></td><td>&nbsp;{state.trims}</td>"
        f"<td style='color: {muted_colour()}'>summaries written for this conversation so far</td></tr>"
        "</table>"
    )


class _MeterBar(QWidget):
    def __init__(self, parent: QWidget):
        super().__init__(parent)
        self.fraction = 0.0
        self.mark: float | None = None
        # (tier name, share of the filled part), oldest first; empty: one fill.
        self.bands: list[tuple[str, float]] = []
        self.setMinimumSize(80, 14)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = QRectF(self.rect()).adjusted(1, 1, -1, -1)
        path = QPainterPath()
        path.addRoundedRect(rect, 4, 4)
        painter.fillPath(path, self.palette().color(QPalette.ColorRole.Base))
        fill = rect.adjusted(0, 0, -rect.width() * (1 - min(self.fraction, 1.0)), 0)
        if self.mark is not None and self.fraction >= self.mark:
            colour = QColor(PRESSURE_COLOURS["warning"])
        else:
            colour = self.palette().color(QPalette.ColorRole.Highlight)
        painter.setClipPath(path)
        if self.bands:
            left = fill.left()
            for name, share in self.bands:
                band = QRectF(left, fill.top(), fill.width() * share, fill.height())
                tinted = QColor(colour)
                tinted.setAlphaF(TIER_OPACITY.get(name, 1.0))
                painter.fillRect(band, tinted)
                left += band.width()
        else:
            painter.fillRect(fill, colour)
        painter.setClipping(False)
        painter.setPen(QPen(self.palette().color(QPalette.ColorRole.Mid), 1))
        painter.drawPath(path)
        if self.mark is not None:
            x = rect.left() + rect.width() * min(self.mark, 1.0)
            painter.setPen(QPen(self.palette().color(QPalette.ColorRole.WindowText), 2))
            painter.drawLine(
                int(x), int(rect.top()) - 1, int(x), int(rect.bottom()) + 1
            )


class ContextMeterView(QWidget):
    """Tokens held / limit, KV bytes, trims, and the next trim's mark."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("contextMeter")
        self.state = None
        self.note = ""
        self.streamed = 0
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(8)
        self.title_label = QLabel("<b>Context</b>")
        layout.addWidget(self.title_label)
        self.bar = _MeterBar(self)
        self.bar.setMaximumWidth(120)
        layout.addWidget(self.bar, 1)
        self.text_label = ElidedLabel(NO_MODEL)
        # Room for "≈1,234 / 4,096 tokens · chat KV …" however the row is shared.
        self.text_label.setMinimumWidth(
            self.text_label.fontMetrics().horizontalAdvance(
                "≈12,345 / 32,768 tokens · chat KV"
            )
        )
        layout.addWidget(self.text_label)

    def set_state(self, state, note: str = "") -> None:
        """Show a `ContextState` (None: nothing to measure yet).

        Args:
            state: The measurement.
            note: Said after the numbers (or instead of them when ``state`` is None),
                e.g. that it is the last measurement while the model works elsewhere.
        """
        self.state = state
        self.note = note
        self.streamed = 0
        self._refresh()

    def add_streamed_tokens(self, count: int) -> None:
        """Count tokens of the reply being written until the next measurement."""
        if self.state is not None:
            self.streamed += count
            self._refresh()

    def _refresh(self) -> None:
        state = self.state
        if state is None:
            self.text_label.set_plain(self.note or NO_MODEL)
            self.bar.fraction, self.bar.mark, self.bar.bands = 0.0, None, []
            self.setToolTip("")
        else:
            limit = max(state.effective_limit, 1)
            self.bar.fraction = (state.tokens + self.streamed) / limit
            self.bar.mark = state.next_trim_at / limit
            counts = tier_counts(state, self.streamed)
            total = sum(tokens for _, tokens in counts)
            self.bar.bands = (
                [(name, tokens / total) for name, tokens in counts if tokens]
                if total
                else []
            )
            note = f" ({self.note})" if self.note else ""
            self.text_label.set_plain(meter_text(state, self.streamed) + note)
            self.setToolTip(meter_tooltip(state))
        self.bar.update()
