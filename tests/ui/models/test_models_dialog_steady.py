"""The Models dialog holds still while a quality check runs (#28 point 20).

The progress bar appeared and vanished, and the status line went from two lines to
one, so the table, the buttons and the dialog itself moved under the mouse at the start,
during and at the end of a check. A real check runs here on the tiny model; the dialog's
geometry and its parts' are recorded at every step and must not change.
"""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.ui.models.test_quality_ui import CHECK_TIMEOUT_MS, SMALL


def _geometry(dialog) -> dict[str, tuple[int, int, int, int]]:
    panel = dialog.quality_panel
    parts = {
        "dialog": dialog,
        "models table": dialog.table,
        "quality panel": panel,
        "quality table": panel.table,
        "check button": panel.check_button,
        "load button": dialog.load_button,
    }
    shown = {}
    for name, widget in parts.items():
        rect = widget.geometry() if widget is dialog else widget.rect()
        corner = widget.mapTo(dialog, rect.topLeft()) if widget is not dialog else None
        shown[name] = (
            (corner or rect.topLeft()).x(),
            (corner or rect.topLeft()).y(),
            rect.width(),
            rect.height(),
        )
    return shown


def test_the_models_dialog_keeps_its_geometry_through_a_check(qtbot, qapp, window):
    window.quality.sizes = SMALL
    window.quality.only = ["kv:8:64", "trim:splice"]
    window.model_picker.open_manager()
    dialog = window.model_picker.manager
    qtbot.waitExposed(dialog)
    qapp.processEvents()
    before = _geometry(dialog)
    seen: list[dict] = []

    def record(*_args) -> None:
        qapp.processEvents()
        seen.append(_geometry(dialog))

    window.quality.check_progressed.connect(record)
    with qtbot.waitSignal(window.quality.check_finished, timeout=CHECK_TIMEOUT_MS):
        qtbot.mouseClick(dialog.quality_panel.check_button, Qt.MouseButton.LeftButton)
        qapp.processEvents()
        seen.append(_geometry(dialog))  # running, before the first progress
    qapp.processEvents()
    seen.append(_geometry(dialog))  # finished: rows in the table, the summary line
    assert len(seen) >= 3
    assert dialog.quality_panel.row_texts()  # the check did fill the table
    for step, shown in enumerate(seen):
        moved = {k: (before[k], v) for k, v in shown.items() if v != before[k]}
        assert moved == {}, f"step {step}: {moved}"
