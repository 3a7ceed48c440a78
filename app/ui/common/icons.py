"""Icons from resources/icons (Lucide, ISC), drawn in the theme's colours.

The SVGs are stroked in ``currentColor``; an icon is rendered with that replaced by
the palette's button text colour, so it reads on light and dark alike. `set_icon`
remembers the icon's name on the button, and `refresh_icons` draws every remembered
icon again after a theme switch.
"""

from __future__ import annotations

from functools import cache

from PySide6.QtCore import QByteArray, QRectF, QSize, Qt
from PySide6.QtGui import QAction, QIcon, QPainter, QPalette, QPixmap
from PySide6.QtSvg import QSvgRenderer
from PySide6.QtWidgets import QAbstractButton, QApplication, QPushButton, QWidget

from app.core.files import paths
from app.ui.common.look import ICON_SIZE

ICON_PROPERTY = "swaplessIcon"
ACCENT_PROPERTY = "swaplessIconOnAccent"
_RENDERED_SIZES = (16, 20, 24, 32, 48)
TEXT_GAP = 0.375
"""Room between a push button's icon and its words, as a share of the icon (6 px at 16)."""


def icon_colour(palette: QPalette | None = None, *, on_accent: bool = False) -> str:
    """The colour icons are drawn in: the palette's button text (or the text on the accent)."""
    palette = palette or QApplication.palette()
    role = (
        QPalette.ColorRole.HighlightedText
        if on_accent
        else QPalette.ColorRole.ButtonText
    )
    return palette.color(role).name()


@cache
def _svg(name: str) -> str:
    return (paths.resources_dir() / "icons" / f"{name}.svg").read_text(encoding="utf-8")


@cache
def themed_icon(name: str, colour: str, gap: float = 0.0) -> QIcon:
    """The icon ``name`` (a file in resources/icons, without .svg) drawn in ``colour``.

    ``gap`` (a share of the icon's size) is left empty on its right: Qt puts a button's
    text nearly against its icon, and this is the room between them.

    Raises:
        FileNotFoundError: There is no such icon (a programming error).
    """
    data = QByteArray(_svg(name).replace("currentColor", colour).encode("utf-8"))
    renderer = QSvgRenderer(data)
    icon = QIcon()
    for size in _RENDERED_SIZES:
        pixmap = QPixmap(round(size * (1 + gap)), size)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter, QRectF(0, 0, size, size))
        painter.end()
        icon.addPixmap(pixmap)
    return icon


def icon(name: str, *, on_accent: bool = False, gap: float = 0.0) -> QIcon:
    """The icon ``name`` in the application palette's colour (for a button, or on the accent)."""
    return themed_icon(name, icon_colour(on_accent=on_accent), gap)


def _gap(button: QAbstractButton) -> float:
    """Room after the icon of a push button with words; none for an icon alone."""
    return TEXT_GAP if isinstance(button, QPushButton) and button.text() else 0.0


def set_icon(
    button: QAbstractButton,
    name: str,
    size: int = ICON_SIZE,
    *,
    on_accent: bool = False,
) -> None:
    """Give ``button`` the icon ``name``, redrawn by `refresh_icons` after a theme switch.

    Args:
        button: The button.
        name: A file in resources/icons, without .svg.
        size: Pixels.
        on_accent: Drawn on the accent colour (a primary button) rather than a button's.
    """
    button.setProperty(ICON_PROPERTY, name)
    button.setProperty(ACCENT_PROPERTY, on_accent)
    gap = _gap(button)
    button.setIcon(icon(name, on_accent=on_accent, gap=gap))
    button.setIconSize(QSize(round(size * (1 + gap)), size))


def set_action_icon(action: QAction, name: str) -> None:
    """Give ``action`` the icon ``name``, redrawn by `refresh_icons` after a theme switch."""
    action.setProperty(ICON_PROPERTY, name)
    action.setIcon(icon(name))


def refresh_icons(root: QWidget) -> int:
    """Draw every icon set by `set_icon` under ``root`` in the current palette's colour.

    Returns:
        How many buttons had one.
    """
    refreshed = 0
    for button in root.findChildren(QAbstractButton):
        name = button.property(ICON_PROPERTY)
        if name:
            on_accent = bool(button.property(ACCENT_PROPERTY))
            button.setIcon(icon(str(name), on_accent=on_accent, gap=_gap(button)))
            refreshed += 1
    for action in root.findChildren(QAction):
        name = action.property(ICON_PROPERTY)
        if name:
            action.setIcon(icon(str(name)))
            refreshed += 1
    return refreshed
