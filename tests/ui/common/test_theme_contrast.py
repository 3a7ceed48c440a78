"""Every muted text reads in both themes: WCAG AA contrast (4.5:1), computed.

The dark theme's quality hint beside the preset picker was dark grey on near-black.
Muted text now comes from the palette (placeholder-text) or `theme.muted_colour`; this
checks those colours against every background they are drawn on, and that no view
hard-codes a grey of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication

from app.ui.common import theme
from app.ui.common.elided_label import MUTED, WARNING, ElidedLabel

AA = 4.5
UI = Path(__file__).resolve().parents[3] / "app" / "ui"
ROLE = QPalette.ColorRole
BACKGROUNDS = (
    ROLE.Window,
    ROLE.Base,
    ROLE.AlternateBase,
    ROLE.Button,
    ROLE.ToolTipBase,
)


def luminance(colour: str) -> float:
    """WCAG 2 relative luminance of ``#rrggbb``."""
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [
        c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels
    ]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_the_contrast_formula_matches_wcags_reference_values():
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)
    assert contrast("#ffffff", "#ffffff") == pytest.approx(1.0)


@pytest.fixture(params=["light", "dark"])
def themed(request, qapp):
    theme.apply_theme(qapp, request.param)
    yield request.param
    theme.apply_theme(qapp, "system")


def test_muted_warning_and_error_text_pass_aa_on_every_background(themed):
    palette = QApplication.palette()
    muted = theme.muted_colour(palette)
    warning = theme.warning_colour(palette)
    error = theme.error_colour(palette)
    assert muted == theme.MUTED_TEXT[themed]
    for role in BACKGROUNDS:
        background = palette.color(role).name()
        for name, colour in (("muted", muted), ("warning", warning), ("error", error)):
            ratio = contrast(colour, background)
            assert ratio >= AA, (
                f"{themed} {name} {colour} on {role.name} {background}: {ratio:.2f}"
            )
    # The main text, for comparison, passes by far.
    text = palette.color(ROLE.WindowText).name()
    assert contrast(text, palette.color(ROLE.Window).name()) >= 7


def test_a_muted_label_follows_a_theme_switch(qtbot, qapp):
    label = ElidedLabel()
    qtbot.addWidget(label)
    label.set_parts([("not measured on this model", MUTED), (" ⚠", WARNING)])
    for name in ("light", "dark", "light"):
        theme.apply_theme(qapp, name)
        qapp.processEvents()
        assert theme.MUTED_TEXT[name] in label.text()
        assert theme.WARNING_TEXT[name] in label.text()
    theme.apply_theme(qapp, "system")


def test_no_view_hard_codes_a_grey_for_text():
    offenders = []
    for path in UI.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        for match in re.finditer(r"color:\s*(gray|grey|#[0-9a-fA-F]{3,6})", source):
            line = source.count("\n", 0, match.start()) + 1
            offenders.append(f"{path.relative_to(UI)}:{line}: {match.group(0)}")
    assert offenders == []
