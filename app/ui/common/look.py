"""The window's visual design: a spacing scale, a type scale and the style sheet that uses them.

Every margin and gap in the views comes from `SPACE` (a 4 px grid), every font size
from `TYPE` (steps relative to the desktop's body font, so a user's larger font still
scales the whole window). `application_style_sheet` gives buttons, fields, lists and
scroll bars one shape (rounded corners, the same paddings) in light, dark and the
desktop's own palette alike: its colours are ``palette(...)`` roles or colours derived
from the palette here, never fixed greys. The chat's own look (user bubbles, the
assistant's plain column, actions on hover) is in `app.ui.chat`.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QApplication, QWidget

SPACE = {"xxs": 2, "xs": 4, "s": 8, "m": 12, "l": 16, "xl": 24, "xxl": 32}
"""The spacing scale (px): margins, gaps and paddings take one of these."""

TYPE = {
    "caption": 0.85,  # footers, stats, hints
    "body": 1.0,  # messages, fields
    "label": 1.0,  # role names, card titles (semibold)
    "title": 1.25,  # dialog headings, the welcome screen's lines
    "display": 1.7,  # the welcome screen's heading
}
"""The type scale: each step's size relative to the application's body font."""

RADIUS = {"control": 6, "card": 10, "bubble": 14}
"""Corner radii (px): buttons and fields, cards, the user's message bubble."""

ICON_SIZE = 16
"""Icons in buttons and toolbars (px)."""


def type_font(step: str, base: QFont | None = None, *, weight: int = 0) -> QFont:
    """The font of a step of `TYPE` (``weight`` 600 for semibold; 0 keeps the base's)."""
    font = QFont(base or QApplication.font())
    size = font.pointSizeF()
    if size > 0:
        font.setPointSizeF(round(size * TYPE[step], 1))
    else:
        font.setPixelSize(max(1, round(font.pixelSize() * TYPE[step])))
    if weight:
        font.setWeight(QFont.Weight(weight))
    return font


def set_type(widget: QWidget, step: str, *, weight: int = 0) -> None:
    """Give ``widget`` the font of a step of `TYPE`."""
    widget.setFont(type_font(step, widget.font(), weight=weight))


def mix(a: QColor, b: QColor, share_of_b: float) -> QColor:
    """``a`` with ``share_of_b`` of ``b`` blended in."""
    keep = 1.0 - share_of_b
    return QColor(
        round(a.red() * keep + b.red() * share_of_b),
        round(a.green() * keep + b.green() * share_of_b),
        round(a.blue() * keep + b.blue() * share_of_b),
    )


def _is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def _tint(
    palette: QPalette | None,
    over: QPalette.ColorRole,
    toward: QPalette.ColorRole,
    light: float,
    dark: float,
) -> str:
    """``over`` with a share of ``toward`` blended in (a larger share when dark)."""
    palette = palette or QApplication.palette()
    share = dark if _is_dark(palette) else light
    return mix(palette.color(over), palette.color(toward), share).name()


def user_bubble_colour(palette: QPalette | None = None) -> str:
    """The tint behind the user's messages: the accent blended into the chat's background."""
    role = QPalette.ColorRole
    return _tint(palette, role.Base, role.Highlight, light=0.10, dark=0.22)


def hover_colour(palette: QPalette | None = None) -> str:
    """The background of a flat button or list row under the mouse."""
    role = QPalette.ColorRole
    return _tint(palette, role.Window, role.WindowText, light=0.06, dark=0.10)


def selected_row_colour(palette: QPalette | None = None) -> str:
    """The background of the chosen conversation: the accent, lightly."""
    role = QPalette.ColorRole
    return _tint(palette, role.Window, role.Highlight, light=0.16, dark=0.30)


def application_style_sheet(palette: QPalette | None = None) -> str:
    """The style sheet of the whole application for ``palette`` (the current one)."""
    palette = palette or QApplication.palette()
    s, r = SPACE, RADIUS
    hover = hover_colour(palette)
    selected = selected_row_colour(palette)
    return f"""
QPushButton {{
    background: palette(button); color: palette(button-text);
    border: 1px solid palette(mid); border-radius: {r["control"]}px;
    padding: {s["xs"]}px {s["m"]}px; min-height: 18px;
}}
QPushButton:hover {{ background: {hover}; }}
QPushButton:pressed, QPushButton:checked {{ background: {selected}; }}
QPushButton:default {{ border: 1px solid palette(highlight); }}
QPushButton:disabled {{ color: palette(placeholder-text); }}
QPushButton#primary {{
    background: palette(highlight); color: palette(highlighted-text);
    border: 1px solid palette(highlight);
}}
QPushButton#primary:disabled {{ background: palette(mid); border-color: palette(mid); }}
QToolButton[autoRaise="true"] {{
    border: none; border-radius: {r["control"]}px; padding: {s["xs"]}px;
}}
QToolButton[autoRaise="true"]:hover {{ background: {hover}; }}
QToolButton#messageAction:checked {{ background: {selected}; }}
QLineEdit {{
    border: 1px solid palette(mid); border-radius: {r["control"]}px;
    padding: {s["xs"]}px {s["s"]}px; background: palette(base);
}}
QLineEdit:focus {{ border: 1px solid palette(highlight); }}
QListView#conversations, QListView#searchResults {{
    border: none; background: transparent; outline: none;
}}
QListView#conversations::item {{
    border-radius: {r["control"]}px; padding: {s["s"]}px {s["s"]}px;
    color: palette(window-text);
}}
QListView#searchResults::item {{ border-radius: {r["control"]}px; }}
QListView#conversations::item:hover, QListView#searchResults::item:hover {{
    background: {hover};
}}
QListView#conversations::item:selected, QListView#searchResults::item:selected {{
    background: {selected}; color: palette(window-text);
}}
QToolBar#mainToolbar {{
    border: none; border-bottom: 1px solid palette(mid);
    padding: {s["xs"]}px {s["s"]}px; spacing: {s["xs"]}px;
}}
QFrame#statusArea {{ border: none; border-top: 1px solid palette(mid); }}
QScrollBar:vertical {{ background: transparent; width: 10px; margin: 0px; }}
QScrollBar::handle:vertical {{
    background: palette(mid); border-radius: 4px; min-height: 32px; margin: 1px 2px;
}}
QScrollBar::handle:vertical:hover {{ background: palette(dark); }}
QScrollBar::add-line:vertical, QScrollBar::sub-line:vertical {{ height: 0px; }}
QScrollBar::add-page:vertical, QScrollBar::sub-page:vertical {{ background: none; }}
QScrollBar:horizontal {{ background: transparent; height: 10px; margin: 0px; }}
QScrollBar::handle:horizontal {{
    background: palette(mid); border-radius: 4px; min-width: 32px; margin: 2px 1px;
}}
QScrollBar::add-line:horizontal, QScrollBar::sub-line:horizontal {{ width: 0px; }}
QScrollBar::add-page:horizontal, QScrollBar::sub-page:horizontal {{ background: none; }}
QToolTip {{
    background: palette(tool-tip-base); color: palette(tool-tip-text);
    border: 1px solid palette(mid); padding: {s["xs"]}px;
}}
"""
