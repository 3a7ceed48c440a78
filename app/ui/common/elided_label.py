"""A one-line label that elides its end instead of widening the window.

A QLabel's minimum width is its whole text, so a long status line (the memory gauge's
legend, the context meter's numbers) used to set the window's minimum width and grow a
1280-px window past the screen after a model loaded. This label asks for its full width
when there is room and otherwise shows what fits, ending in "…", with the whole text as
its tooltip unless it was given another one. Its text is given as
plain parts, each with an optional colour: they are escaped here, so nothing from data
can turn into markup.
"""

from __future__ import annotations

import html
import re

from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QToolTip, QWidget

ELLIPSIS = "…"
MUTED = "palette:muted"
"""A part's colour: secondary text, resolved from the palette when drawn (themes)."""
WARNING = "palette:warning"
"""A part's colour: warning text that reads on the current theme's background."""
_WHITESPACE = re.compile(r"\s+")  # one line: newlines and tabs become spaces


class ElidedLabel(QLabel):
    """A label of coloured plain-text parts, elided at the right to fit its width."""

    def __init__(self, text: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setWordWrap(False)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self._parts: list[tuple[str, str | None]] = []
        self._shown = ""
        self.elided = False
        self.set_plain(text)

    def set_plain(self, text: str) -> None:
        """Show ``text`` (plain, one colour)."""
        self.set_parts([(text, None)])

    def set_parts(self, parts: list[tuple[str, str | None]]) -> None:
        """Show ``parts``: (plain text, CSS colour or None) in order."""
        parts = [(_WHITESPACE.sub(" ", text), colour) for text, colour in parts]
        if parts == self._parts:
            return
        self._parts = parts
        self.updateGeometry()
        self._fit()

    @property
    def full_text(self) -> str:
        """The whole text, as plain text."""
        return "".join(text for text, _ in self._parts)

    def sizeHint(self) -> QSize:
        margins = self.contentsMargins()
        width = self.fontMetrics().horizontalAdvance(self.full_text)
        return QSize(
            width + margins.left() + margins.right() + 2,
            self.fontMetrics().height() + margins.top() + margins.bottom(),
        )

    def minimumSizeHint(self) -> QSize:
        margins = self.contentsMargins()
        return QSize(
            self.fontMetrics().horizontalAdvance(ELLIPSIS * 3),
            self.fontMetrics().height() + margins.top() + margins.bottom(),
        )

    def event(self, event: QEvent) -> bool:
        # Cut text is never lost: hovering shows the whole of it (an explicit tooltip,
        # or the parent's, still wins when there is one).
        if (
            isinstance(event, QHelpEvent)
            and event.type() == QEvent.Type.ToolTip
            and self.elided
            and not self.toolTip()
            and not _has_tooltip_above(self)
        ):
            QToolTip.showText(event.globalPos(), self.full_text, self)
            return True
        return super().event(event)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._shown = ""  # palette colours are resolved again for the new theme
            self._fit()

    def _fit(self) -> None:
        metrics = self.fontMetrics()
        room = self.contentsRect().width()
        shown: list[str] = []
        used = 0
        elided = False
        for text, colour in self._parts:
            width = metrics.horizontalAdvance(text)
            if used + width > room:
                text = metrics.elidedText(
                    text, Qt.TextElideMode.ElideRight, room - used
                )
                if not text.endswith(ELLIPSIS):
                    text = (text + ELLIPSIS) if text else ELLIPSIS
                elided = True
            shown.append(_span(text, self._resolved(colour)))
            used += width
            if elided:
                break
        markup = "".join(shown)
        self.elided = elided
        if markup != self._shown:
            self._shown = markup
            self.setText(markup)

    def _resolved(self, colour: str | None) -> str | None:
        from app.ui.common.theme import muted_colour, warning_colour

        if colour == MUTED:
            return muted_colour(self.palette())
        if colour == WARNING:
            return warning_colour(self.palette())
        return colour


def _has_tooltip_above(widget: QWidget) -> bool:
    parent = widget.parentWidget()
    while parent is not None:
        if parent.toolTip():
            return True
        parent = parent.parentWidget()
    return False


def _span(text: str, colour: str | None) -> str:
    escaped = html.escape(text).replace(" ", "&nbsp;") if text else ""
    return f"<span style='color: {colour}'>{escaped}</span>" if colour else escaped
