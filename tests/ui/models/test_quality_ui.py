"""Quality where choices are made: Check quality in Models…, the picker's lines, warnings.

The checks run for real on the session's tiny model (the engine's thread, the store),
with small probes so that a test takes seconds; the failing preset is stored as a
report the way `swapless check-quality` stores one, since a random-weight model does
not fail on demand.
"""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.core.models.model_identity import folder_identity
from app.core.quality.cells import kv_cell
from app.core.quality.events import QualityReport
from app.core.quality.metrics import CellResult
from app.core.quality.preset_quality import NOT_MEASURED
from app.core.quality.probes import ProbeSizes
from app.core.store import Store
from app.ui.common import theme
from app.ui.presets.preset_editor_dialog import PresetEditorDialog
from app.ui.presets.preset_item_delegate import QUALITY_ROLE, WARNING_ROLE

SMALL = ProbeSizes(
    name="test",
    text_tokens=48,
    pass_key_distances=(32,),
    pass_keys_per_distance=1,
    trim_cases=1,
    dropped_tokens=48,
    kept_tokens=32,
)
SLOWER = ProbeSizes(
    name="test",
    text_tokens=192,
    pass_key_distances=(96,),
    pass_keys_per_distance=2,
    trim_cases=0,
    dropped_tokens=0,
    kept_tokens=0,
)
CHECK_TIMEOUT_MS = 120_000
LOAD_TIMEOUT_MS = 30_000


def _item(window, name: str, role):
    combo = window.toolbar.preset_combo
    return combo.itemData(combo.findData(name), role)


def _open_quality_panel(window, only):
    window.quality.sizes = SMALL
    window.quality.only = only
    window.model_picker.open_manager()
    return window.model_picker.manager.quality_panel


def _store_failing_four_bit(store, folder) -> CellResult:
    failing = CellResult(
        cell=kv_cell(4, 64),
        positions=500,
        top1_agreement=0.62,
        mean_kl=0.41,
        perplexity_ratio=1.31,
        recall_hits=2,
        recall_total=10,
        reference_hits=9,
    )
    store.save_quality_report(
        QualityReport(
            model_identity=folder_identity(folder),
            model_folder=str(folder),
            settings_key="probes-v1:full",
            quick=False,
            results=(failing,),
            measured_at="2026-12-03T10:00:00Z",
        )
    )
    return failing


def test_nothing_is_shown_without_a_model_and_a_muted_line_when_unmeasured(
    qtbot, make_window, tiny_model_dir
):
    window = make_window()
    label = window.toolbar.preset_quality_label
    assert label.full_text == ""
    assert _item(window, "chat", QUALITY_ROLE) is None
    with qtbot.waitSignal(window.models.loaded, timeout=LOAD_TIMEOUT_MS):
        window.models.load(str(tiny_model_dir))
    assert label.full_text == NOT_MEASURED
    assert _item(window, "chat", QUALITY_ROLE) is None  # nothing beside the presets
    assert _item(window, "chat", WARNING_ROLE) is None


def test_check_quality_in_models_runs_saves_and_annotates_the_picker(
    qtbot, window, store, make_window, tiny_model_dir
):
    panel = _open_quality_panel(window, ["kv:8:64", "kv:4:64", "trim:splice"])
    assert panel.check_button.isEnabled() and not panel.stop_button.isEnabled()
    assert "not measured yet" in panel.status_label.text()
    progressed = []
    window.quality.check_progressed.connect(progressed.append)
    with qtbot.waitSignal(
        window.quality.check_finished, timeout=CHECK_TIMEOUT_MS
    ) as finished:
        qtbot.mouseClick(panel.check_button, Qt.MouseButton.LeftButton)
        assert panel.stop_button.isEnabled() and panel.progress.isVisible()
        assert not panel.check_button.isEnabled()
    report = finished.args[0]
    assert not report.cancelled
    assert [r.cell.key for r in report.results] == ["kv:8:64", "kv:4:64", "trim:splice"]
    done = [event.done for event in progressed]
    assert done and done == sorted(done) and done[-1] <= progressed[-1].total
    assert not panel.progress.isVisible()
    # The table shows every cell, the panel is idle again.
    rows = panel.row_texts()
    assert [row[0] for row in rows] == [
        "8-bit KV, group 64",
        "4-bit KV, group 64",
        "splice trim",
    ]
    eight = report.results[0]
    assert rows[0][1] == f"{eight.top1_agreement * 100:.1f} %"
    assert panel.check_button.isEnabled() and not panel.stop_button.isEnabled()
    assert "done" in panel.status_label.text()
    # Saved for this model, under its identity.
    identity = window.models.info.identity
    stored = store.latest_quality(identity)
    assert set(stored) == {"kv:8:64", "kv:4:64", "trim:splice"}
    # The picker annotates each preset with its own precision's result.
    chat = _item(window, "chat", QUALITY_ROLE)  # 8-bit KV, group 64
    assert chat.startswith("8-bit KV on this model: ")
    assert "top-1" in chat and "measured" in chat
    assert _item(window, "long-document", QUALITY_ROLE).startswith(
        "4-bit KV on this model: "
    )
    # precise is 16-bit with a rebuild trim: nothing of it was measured.
    assert _item(window, "precise", QUALITY_ROLE) is None
    tooltip = _item(window, "chat", Qt.ItemDataRole.ToolTipRole)
    assert "8-bit KV, group 64: " in tooltip
    # The open conversation's preset (chat, changed here) has its line beside the picker.
    assert window.toolbar.preset_quality_label.full_text.startswith("8-bit KV on this")
    # Persisted: a new window on the same store shows it once the model is loaded.
    second = make_window()
    with qtbot.waitSignal(second.models.loaded, timeout=LOAD_TIMEOUT_MS):
        second.models.load(str(tiny_model_dir))
    assert _item(second, "chat", QUALITY_ROLE) == chat
    second.model_picker.open_manager()
    assert [
        row[0] for row in second.model_picker.manager.quality_panel.row_texts()
    ] == [row[0] for row in rows]


def test_stop_keeps_the_cells_measured_and_saves_them(qtbot, window, store):
    six = [f"kv:{bits}:{group}" for bits in (8, 4) for group in (32, 64, 128)]
    panel = _open_quality_panel(window, six)
    # Cells long enough (a few hundred ms each) that Stop lands before the last one.
    window.quality.sizes = SLOWER
    quality = window.quality
    quality.cell_measured.connect(lambda _result: panel.stop_button.click())
    with qtbot.waitSignal(quality.check_finished, timeout=CHECK_TIMEOUT_MS) as done:
        assert quality.start()
    report = done.args[0]
    assert report.cancelled
    assert report.results[0].cell.key == "kv:8:32" and report.results[0].complete
    assert len(report.results) < len(six)
    assert "stopped" in panel.status_label.text()
    assert len(panel.row_texts()) == len(report.results)
    assert panel.row_texts()[0][0] == "8-bit KV, group 32"
    stored = store.latest_quality(window.models.info.identity)
    assert stored["kv:8:32"].result.complete
    (check,) = store.quality_checks(window.models.info.identity)
    assert check["cancelled"] is True
    assert set(stored) == {r.cell.key for r in report.results}


def test_closing_the_window_mid_check_saves_the_cells_measured(qtbot, window, store):
    six = [f"kv:{bits}:{group}" for bits in (8, 4) for group in (32, 64, 128)]
    _open_quality_panel(window, six)
    window.quality.sizes = SLOWER
    identity = window.models.info.identity
    with qtbot.waitSignal(window.quality.cell_measured, timeout=CHECK_TIMEOUT_MS):
        assert window.quality.start()
    window.close()  # as a user quitting while the check runs
    window.shutdown()
    with Store.open(store.path) as reopened:
        stored = reopened.latest_quality(identity)
        (check,) = reopened.quality_checks(identity)
    assert "kv:8:32" in stored and stored["kv:8:32"].result.complete
    assert len(stored) < len(six) and check["cancelled"] is True


def test_a_second_check_is_refused_while_one_runs(qtbot, window):
    panel = _open_quality_panel(window, ["kv:8:64", "kv:4:64"])
    with qtbot.waitSignal(window.quality.check_finished, timeout=CHECK_TIMEOUT_MS):
        assert window.quality.start()
        with qtbot.waitSignal(window.quality.check_refused) as refused:
            assert not window.quality.start()
        assert "already running" in refused.args[0]
        assert "already running" in panel.status_label.text()


def test_a_preset_that_fails_here_shows_a_warning_in_the_picker_and_the_editor(
    qtbot, window, store, tiny_model_dir
):
    failing = _store_failing_four_bit(store, tiny_model_dir)
    window.quality.results_changed.emit(window.models.info.identity)
    combo = window.toolbar.preset_combo
    index = combo.findData("long-document")  # 4-bit KV, group 64
    warning = combo.itemData(index, WARNING_ROLE)
    assert "fails a quality threshold" in warning
    assert not combo.itemIcon(index).isNull()  # the warning icon
    assert "Warning: " + warning in combo.itemData(index, Qt.ItemDataRole.ToolTipRole)
    assert combo.itemData(index, QUALITY_ROLE) == (
        "4-bit KV on this model: 62 % top-1, recall 2/10, measured 3 Dec"
    )
    chat = combo.findData("chat")  # 8-bit: unmeasured, no warning
    assert combo.itemData(chat, WARNING_ROLE) is None and combo.itemIcon(chat).isNull()
    # Nothing was changed for the user: the conversation keeps its preset.
    assert window.current.preset().kv_bits == 8
    # Choosing it puts the warning beside the picker, in the warning colour.
    with qtbot.waitSignal(window.current.preset_changed, timeout=10_000):
        combo.setCurrentIndex(index)
        combo.activated.emit(index)
    label = window.toolbar.preset_quality_label
    assert label.full_text.startswith("⚠ 4-bit KV on this model: 62 % top-1")
    assert theme.warning_colour(label.palette()) in label.text()
    assert label.toolTip() == warning
    assert window.current.preset().kv_bits == 4  # the user's choice stands
    # The editor says the same, and follows the form's precision.
    window.preset_picker.open_editor()
    dialog = window.findChild(PresetEditorDialog)
    line = dialog.quality_label
    assert line.text().startswith("⚠ 4-bit KV on this model") and line.isVisible()
    assert "fails a quality threshold" in line.toolTip()
    dialog.set_value("kv_bits", "8")
    assert line.text() == NOT_MEASURED and "⚠" not in line.text()
    dialog.set_value("kv_bits", "4")
    assert failing.cell.label in line.toolTip()


def test_the_open_list_shows_the_whole_line_beside_each_preset(
    qtbot, window, store, tiny_model_dir
):
    _store_failing_four_bit(store, tiny_model_dir)
    window.quality.results_changed.emit(window.models.info.identity)
    combo = window.toolbar.preset_combo
    index = combo.findData("long-document")
    view = combo.view()
    option_text = "long-document  —  4-bit KV on this model: 62 % top-1"
    model_index = combo.model().index(index, 0)
    needed = view.fontMetrics().horizontalAdvance(option_text)
    assert view.sizeHintForIndex(model_index).width() > needed
    combo.showPopup()
    try:
        assert view.isVisible()
        assert view.width() >= view.sizeHintForColumn(0)
    finally:
        combo.hidePopup()


def test_a_message_sent_during_a_check_says_it_waits_and_is_answered_after(
    qtbot, window, store
):
    six = [f"kv:{bits}:{group}" for bits in (8, 4) for group in (32, 64, 128)]
    _open_quality_panel(window, six)
    window.quality.sizes = SLOWER
    order = []
    window.quality.check_finished.connect(lambda _report: order.append("check"))
    window.turns.reply_finished.connect(lambda _cid, _report: order.append("reply"))
    with qtbot.waitSignal(window.quality.cell_measured, timeout=CHECK_TIMEOUT_MS):
        assert window.quality.start()
    assert window.turns.send("Are you there?")
    footer = window.chat_view.live_reply.footer_label
    assert footer.text().startswith("Waiting for the quality check to finish (")
    assert "Stop in Models" in footer.text()
    qtbot.waitUntil(lambda: order == ["check", "reply"], timeout=CHECK_TIMEOUT_MS)
    messages = store.messages(window.current.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].state == "complete"
