"""How the preset picker's list shows each preset with its measured quality beside it.

The closed picker shows only the preset's name (it is as wide as its longest name);
the open list adds the phrase the core wrote for that preset on the loaded model
("chat — 8-bit KV on this model: 99 % top-1, recall 3/4, measured 1 Dec"), and a
preset whose KV precision fails a threshold there is drawn in the warning colour. Only
the text and palette of the standard item change: the style paints it, and the list
widens to fit because the size hint is computed from the same text.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QStyledItemDelegate

from app.ui.common.theme import warning_colour

QUALITY_ROLE = Qt.ItemDataRole.UserRole + 1  # the phrase beside the preset, or None
WARNING_ROLE = Qt.ItemDataRole.UserRole + 2  # the warning text, or None
WARNING_COLOUR = "#cf222e"
"""The warning icon's colour (text uses `theme.warning_colour`, readable per theme)."""
SEPARATOR = "  —  "


class PresetItemDelegate(QStyledItemDelegate):
    """Adds the quality phrase to each preset in the picker's list."""

    def initStyleOption(self, option, index) -> None:
        super().initStyleOption(option, index)
        line = index.data(QUALITY_ROLE)
        if line:
            option.text = f"{option.text}{SEPARATOR}{line}"
        if index.data(WARNING_ROLE):
            colour = warning_colour(option.palette)
            option.palette.setColor(QPalette.ColorRole.Text, QColor(colour))
