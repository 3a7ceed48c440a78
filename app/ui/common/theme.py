"""Light, dark or the desktop's own look, and the colours derived from it.

"system" keeps the platform's style and palette (and tells Qt to follow the desktop's
colour scheme where it can); "light" and "dark" use Fusion with a fixed palette so they
look the same everywhere. Widgets that draw their own colours (the memory gauge, the
Markdown of replies) ask here instead of hard-coding them.

Switching while the app runs needs one more step: a widget with a style sheet resolves
``palette(...)`` colours when it is polished and keeps them, so the chat used to stay
light (with light text from the new palette, nearly invisible) until a restart.
`refresh_style_sheets` re-applies every style sheet under a window after a switch.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QWidget

from app.core.text.markdown_html import DARK_THEME, LIGHT_THEME, MarkdownTheme
from app.ui.common.look import application_style_sheet

_original: dict[str, object] = {}

# Pressure colours: readable on both light and dark backgrounds.
PRESSURE_COLOURS = {
    "normal": "#2da44e",
    "warning": "#d4a72c",
    "critical": "#cf222e",
}
SEGMENT_COLOURS = {
    "weights": "#4f7dd9",
    "kv": "#a371f7",
    "other": "#8c959f",
}


# Secondary text (hints, footers, "not measured"), chosen for WCAG AA (4.5:1) on every
# background it is drawn on in that theme: window, text fields, list rows, buttons and
# tooltips (tests/ui/common/test_theme_contrast.py computes it).
MUTED_TEXT = {"light": "#59636e", "dark": "#959da5"}
# Warnings written as text (a preset whose compression fails on this model).
WARNING_TEXT = {"light": "#8a5a00", "dark": "#e3b341"}
# Errors written as text (a refused setting, a failed download).
ERROR_TEXT = {"light": "#cf222e", "dark": "#ff7b72"}


def muted_colour(palette: QPalette | None = None) -> str:
    """The colour of secondary text in ``palette`` (the application's by default)."""
    palette = palette or QApplication.palette()
    return palette.color(QPalette.ColorRole.PlaceholderText).name()


def warning_colour(palette: QPalette | None = None) -> str:
    """The colour of warning text that reads on ``palette``'s background."""
    palette = palette or QApplication.palette()
    return WARNING_TEXT["dark" if is_dark(palette) else "light"]


def error_colour(palette: QPalette | None = None) -> str:
    """The colour of error text that reads on ``palette``'s background."""
    palette = palette or QApplication.palette()
    return ERROR_TEXT["dark" if is_dark(palette) else "light"]


def apply_theme(app: QApplication, name: str) -> None:
    """Switch the whole application to ``system``, ``light`` or ``dark``."""
    if not _original:
        _original["style"] = app.style().name()
        _original["palette"] = QPalette(app.palette())
    hints = app.styleHints()
    if name == "system":
        app.setStyle(str(_original["style"]))
        palette = _original["palette"]
        assert isinstance(palette, QPalette), "saved by the first call"
        app.setPalette(palette)
        hints.setColorScheme(Qt.ColorScheme.Unknown)
    else:
        app.setStyle("Fusion")
        hints.setColorScheme(
            Qt.ColorScheme.Dark if name == "dark" else Qt.ColorScheme.Light
        )
        app.setPalette(_dark_palette() if name == "dark" else _light_palette())
    # The design (`look`) in the palette just set: its derived colours are fixed
    # into the sheet, so it is written again at every switch.
    app.setStyleSheet(application_style_sheet(app.palette()))


def refresh_style_sheets(root: QWidget) -> int:
    """Re-apply the style sheets of ``root`` and its descendants to the current palette.

    Returns:
        How many widgets had a style sheet.
    """
    refreshed = 0
    for widget in [root, *root.findChildren(QWidget)]:
        sheet = widget.styleSheet()
        if sheet:
            widget.setStyleSheet(sheet)
            refreshed += 1
    return refreshed


def is_dark(palette: QPalette) -> bool:
    """True when the window background is dark."""
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def markdown_theme(palette: QPalette) -> MarkdownTheme:
    """Markdown colours that suit ``palette``."""
    return DARK_THEME if is_dark(palette) else LIGHT_THEME


def _palette(colours: dict[QPalette.ColorRole, str], disabled_text: str) -> QPalette:
    palette = QPalette()
    for role, colour in colours.items():
        palette.setColor(role, QColor(colour))
    for role in (
        QPalette.ColorRole.Text,
        QPalette.ColorRole.WindowText,
        QPalette.ColorRole.ButtonText,
    ):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor(disabled_text))
    return palette


def _dark_palette() -> QPalette:
    role = QPalette.ColorRole
    return _palette(
        {
            role.Window: "#1f2328",
            role.WindowText: "#e6edf3",
            role.Base: "#0d1117",
            role.AlternateBase: "#18304f",
            role.ToolTipBase: "#2d333b",
            role.ToolTipText: "#e6edf3",
            role.PlaceholderText: MUTED_TEXT["dark"],
            role.Text: "#e6edf3",
            role.Button: "#2d333b",
            role.ButtonText: "#e6edf3",
            role.BrightText: "#ffffff",
            role.Highlight: "#1f6feb",
            role.HighlightedText: "#ffffff",
            role.Link: "#4493f8",
            role.Mid: "#3d444d",
            role.Dark: "#161b22",
            role.Light: "#3d444d",
        },
        disabled_text="#6e7681",
    )


def _light_palette() -> QPalette:
    role = QPalette.ColorRole
    return _palette(
        {
            role.Window: "#f6f8fa",
            role.WindowText: "#1f2328",
            role.Base: "#ffffff",
            role.AlternateBase: "#e3eefb",
            role.ToolTipBase: "#ffffff",
            role.ToolTipText: "#1f2328",
            role.PlaceholderText: MUTED_TEXT["light"],
            role.Text: "#1f2328",
            role.Button: "#f0f3f6",
            role.ButtonText: "#1f2328",
            role.BrightText: "#000000",
            role.Highlight: "#0969da",
            role.HighlightedText: "#ffffff",
            role.Link: "#0969da",
            role.Mid: "#d1d9e0",
            role.Dark: "#afb8c1",
            role.Light: "#ffffff",
        },
        disabled_text="#8c959f",
    )
