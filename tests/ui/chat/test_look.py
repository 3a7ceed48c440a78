"""The chat's design (#28 point 21): who said what at a glance, actions on hover, icons.

Real views in a real layout: a user's short message is a bubble on the right as wide
as its words, a reply spans the column, message actions are drawn only with the mouse
over the message (or on the last reply) without moving anything, icons follow the
theme, and a one-line code reply gets no scroll bar of its own.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QPointF, QSize
from PySide6.QtGui import QColor, QEnterEvent
from PySide6.QtWidgets import (
    QApplication,
    QPushButton,
    QScrollBar,
    QVBoxLayout,
    QWidget,
)

from app.core.text.markdown_theme import LIGHT_THEME
from app.ui.chat.message_view import MessageView
from app.ui.chat.rich_text_view import RichTextView
from app.ui.common import icons, theme

COLUMN = 800
ICONS = Path(__file__).resolve().parents[3] / "resources" / "icons"


def _column(qtbot, *views: QWidget) -> QWidget:
    column = QWidget()
    layout = QVBoxLayout(column)
    for view in views:
        layout.addWidget(view)
    column.resize(COLUMN, 600)
    qtbot.addWidget(column)
    column.show()
    qtbot.waitExposed(column)
    QApplication.processEvents()
    return column


def test_a_short_user_message_is_a_bubble_on_the_right_and_a_reply_spans_the_column(
    qtbot,
):
    user = MessageView("user", "Short question?", message_id=1)
    reply = MessageView("assistant", "A reply " * 40, LIGHT_THEME, message_id=2)
    column = _column(qtbot, user, reply)
    assert column.isVisible()
    bubble_left = user.bubble.mapTo(user, user.bubble.rect().topLeft()).x()
    bubble_right = bubble_left + user.bubble.width()
    assert user.bubble.width() < user.width() / 2  # as wide as its words
    assert bubble_right >= user.width() - 2  # against the right edge
    assert bubble_left > user.width() / 2
    assert not user.role_label.isVisible()  # the bubble says who wrote it
    assert reply.bubble.width() >= reply.width() - 2  # the whole column
    assert reply.role_label.isVisible()
    # A long message is capped, so a bubble never fills the row.
    long = MessageView("user", "word " * 400, message_id=3)
    column = _column(qtbot, long)
    assert long.bubble.width() <= int(long.width() * 0.8)


def _hover(view: MessageView, inside: bool) -> None:
    if inside:
        point = QPointF(5, 5)
        QApplication.sendEvent(view, QEnterEvent(point, point, point))
    else:
        QApplication.sendEvent(view, QEvent(QEvent.Type.Leave))


def test_actions_show_on_hover_without_moving_anything(qtbot):
    view = MessageView("assistant", "A reply.", LIGHT_THEME, message_id=7)
    column = _column(qtbot, view)
    assert column.isVisible()
    place = view.copy_button.mapTo(view, view.copy_button.rect().topLeft())
    height = view.height()
    if view.copy_button.hasFocus():  # the window's first focus: shown, for keyboards
        assert view.actions_shown
        view.copy_button.clearFocus()
    assert not view.actions_shown
    _hover(view, True)
    assert view.actions_shown
    assert view.copy_button.mapTo(view, view.copy_button.rect().topLeft()) == place
    assert view.height() == height
    _hover(view, False)
    assert not view.actions_shown
    # The last reply keeps its actions (Regenerate is there to be found).
    view.set_regenerate_visible(True)
    assert view.actions_shown
    # An icon, not a text link; the words stay as its tooltip and accessible name.
    assert not view.copy_button.icon().isNull()
    assert view.copy_button.accessibleName() == "Copy"


def test_icons_exist_and_take_the_themes_colour(qtbot, qapp):
    for name in ("copy", "pencil", "refresh-cw", "pin", "send", "settings"):
        assert (ICONS / f"{name}.svg").is_file()
    assert (ICONS / "LICENSE").is_file()
    holder = QWidget()
    qtbot.addWidget(holder)
    button = QPushButton(holder)

    def drawn_colour() -> QColor:
        image = button.icon().pixmap(QSize(48, 48)).toImage()
        pixels = (image.pixelColor(x, y) for x in range(48) for y in range(48))
        return max(pixels, key=lambda c: c.alpha())

    try:
        theme.apply_theme(qapp, "light")
        icons.set_icon(button, "copy")
        light = drawn_colour()
        theme.apply_theme(qapp, "dark")
        assert icons.refresh_icons(holder) == 1
        dark = drawn_colour()
    finally:
        theme.apply_theme(qapp, "system")
    assert light.lightness() < 100 < dark.lightness()


def test_a_one_line_code_reply_has_no_scroll_bar_of_its_own(qtbot):
    view = RichTextView()
    view.resize(500, 300)
    qtbot.addWidget(view)
    view.show()
    line = "result = compute(" + ", ".join(f"argument_{i}" for i in range(30)) + ")"
    view.set_markdown(f"```python\n{line}\n```\n", LIGHT_THEME)
    QApplication.processEvents()
    bars = [b for b in view.findChildren(QScrollBar) if b.isVisible()]
    assert bars == []
    assert view.code_blocks == (line,)
