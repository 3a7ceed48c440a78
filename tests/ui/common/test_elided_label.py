"""A cut label keeps its whole text within reach: the tooltip shows it."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPoint
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QToolTip, QWidget

from app.ui.common.elided_label import ELLIPSIS, ElidedLabel

LONG = "One segment does not fit in the model's context: " + "numbers " * 40


def _hover(label: ElidedLabel) -> str:
    """The tooltip the label itself shows when hovered ("" for none)."""
    QToolTip.hideText()
    event = QHelpEvent(
        QEvent.Type.ToolTip, QPoint(2, 2), label.mapToGlobal(QPoint(2, 2))
    )
    label.event(event)
    return QToolTip.text() if QToolTip.isVisible() else ""


def test_a_cut_label_shows_its_whole_text_as_tooltip(qtbot):
    label = ElidedLabel(LONG)
    qtbot.addWidget(label)
    label.show()
    label.resize(120, 20)
    assert label.elided and label.text().endswith(ELLIPSIS)
    assert _hover(label) == label.full_text and label.full_text.startswith(
        "One segment"
    )
    QToolTip.hideText()


def test_an_uncut_label_or_one_with_its_own_tooltip_shows_no_extra_one(qtbot):
    short = ElidedLabel("fits")
    qtbot.addWidget(short)
    short.show()
    short.resize(200, 20)
    assert not short.elided and _hover(short) == ""
    parent = QWidget()
    qtbot.addWidget(parent)
    parent.setToolTip("the notice's own tooltip")
    inside = ElidedLabel(LONG, parent)
    parent.show()
    inside.resize(120, 20)
    assert inside.elided and _hover(inside) == ""  # the parent's tooltip shows instead
