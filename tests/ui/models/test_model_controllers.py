"""Models in the window: welcome, loading, a broken folder, the picker and the model manager."""

from __future__ import annotations

import json
import shutil

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QMessageBox

from app.core.settings import AppSettings
from app.ui.chat.turn_controller import NO_MODEL_REASON
from app.ui.models.model_manager_dialog import ModelManagerDialog


def _error_boxes(window) -> list[QMessageBox]:
    return [
        b for b in window.findChildren(QMessageBox) if b.objectName() == "errorDialog"
    ]


def test_first_start_shows_the_welcome_panel_and_a_disabled_composer(
    qtbot, make_window
):
    window = make_window()
    assert window.main_stack.currentWidget() is window.welcome_view
    assert not window.composer.button.isEnabled()
    assert not window.composer.edit.isEnabled()
    assert window.composer.reason_label.text() == NO_MODEL_REASON
    explanation = window.welcome_view.findChild(QLabel, "demoExplanation")
    assert "noise" in explanation.text()
    assert window.toolbar.model_combo.currentText() == "No model loaded"
    assert not window.turns.send("ignored without a model")
    assert not window.turns.busy


def test_loading_a_model_enables_the_chat(qtbot, make_window, tiny_model_dir):
    window = make_window()
    # Read the toolbar when loading starts: the tiny model may be loaded (and the
    # toolbar enabled again) before waitSignal returns.
    seen = []
    window.models.loading_started.connect(
        lambda *_: seen.append(
            (window.toolbar.loading, window.toolbar.model_combo.isEnabled())
        )
    )
    with qtbot.waitSignal(window.models.loading_started, timeout=30_000):
        window.models.load(str(tiny_model_dir))
    assert seen == [(True, False)]
    qtbot.waitUntil(lambda: window.models.info is not None, timeout=30_000)
    qtbot.waitUntil(lambda: not window.models.loading, timeout=5000)
    assert window.main_stack.currentWidget() is window.chat_view
    assert window.composer.button.isEnabled() and window.composer.edit.isEnabled()
    assert not window.toolbar.loading
    # The tiny model has random weights: the window says its replies are noise.
    demo = window.notices.notice("demo")
    assert (
        demo is not None and "noise" in demo.text and demo.action[0] == "Open models…"
    )
    assert window.memory_gauge.weights_bytes == window.models.info.weights_bytes
    from app.core.settings import load_settings

    assert load_settings().last_model == str(tiny_model_dir)


def test_a_broken_model_folder_shows_an_error_not_a_crash(
    qtbot, window, tmp_path, tiny_model_dir, send
):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{ this is not json")
    with qtbot.waitSignal(window.models.load_failed, timeout=30_000) as blocker:
        window.models.load(str(broken))
    error = blocker.args[0]
    assert error.known and str(broken) in error.message
    boxes = _error_boxes(window)
    assert boxes and boxes[-1].isVisible()
    assert "config.json" in boxes[-1].text()
    boxes[-1].accept()
    with qtbot.waitSignal(window.models.loaded, timeout=30_000):
        window.models.load(str(tiny_model_dir))
    _, report = send(window, "still alive?")
    assert report.generated_tokens > 0


def test_a_folder_with_unknown_architecture_is_refused_in_words(
    qtbot, window, tmp_path, tiny_model_dir
):
    odd = tmp_path / "odd-model"
    shutil.copytree(tiny_model_dir, odd)
    config = json.loads((odd / "config.json").read_text())
    config["model_type"] = "no-such-architecture"
    (odd / "config.json").write_text(json.dumps(config))
    with qtbot.waitSignal(window.models.load_failed, timeout=30_000) as blocker:
        window.models.load(str(odd))
    assert blocker.args[0].known
    assert _error_boxes(window)[-1].isVisible()


def test_changing_the_model_mid_reply_is_refused_in_the_notice_area(
    qtbot, window, tiny_model_dir, quick_preset
):
    window.current.set_preset(quick_preset(max_tokens=4000))
    with qtbot.waitSignal(window.turns.live_text_changed, timeout=30_000):
        window.turns.send("A long one")
    with qtbot.waitSignal(window.models.load_refused, timeout=1000):
        assert not window.models.load(str(tiny_model_dir))
    assert window.notices.notice("refused").text.startswith("Stop the reply first")
    with qtbot.waitSignal(window.turns.reply_finished, timeout=30_000):
        window.turns.stop()


def _fake_hub_layout(home, tiny_model_dir):
    """An HF cache and an LM Studio folder holding copies of the tiny model."""
    snapshot = home / "hf" / "hub" / "models--acme--tiny-chat" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for file in tiny_model_dir.iterdir():
        (snapshot / file.name).symlink_to(file)
    refs = snapshot.parents[1] / "refs"
    refs.mkdir()
    (refs / "main").write_text("abc123")
    studio = home / "user" / ".lmstudio" / "models" / "acme" / "studio-tiny"
    shutil.copytree(tiny_model_dir, studio)
    return snapshot, studio


def test_the_model_manager_lists_models_with_their_verdict_and_loads_one(
    qtbot, make_window, tiny_model_dir, tmp_path, monkeypatch
):
    snapshot, studio = _fake_hub_layout(tmp_path, tiny_model_dir)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    window = make_window()
    picker = window.model_picker
    # The two found here, after the reference model that ships with Swapless.
    qtbot.waitUntil(lambda: len(picker.found) == 3, timeout=15_000)
    combo = window.toolbar.model_combo
    labels = [combo.itemText(i) for i in range(combo.count())]
    assert any("acme/tiny-chat" in label for label in labels)
    assert any("acme/studio-tiny" in label for label in labels)

    picker.open_manager()
    dialog = window.findChild(ModelManagerDialog)
    assert dialog.isVisible() and dialog.table.rowCount() == 3
    names = [dialog.table.item(r, 0).text() for r in range(1, 3)]
    assert names == ["acme/tiny-chat", "acme/studio-tiny"]
    qtbot.waitUntil(lambda: dialog.verdict(snapshot) is not None, timeout=10_000)
    verdict = dialog.verdict(snapshot)
    assert verdict.fits and set(verdict.max_safe_context) == {"16", "8", "4"}
    # The tiny model was trained for 16K tokens: more memory would not help.
    assert verdict.trained_context == 16384
    assert verdict.max_safe_context["16"] > 16384
    verdict_text = dialog.table.item(1, 3).text()
    assert verdict_text == (
        "Fits. Usable context: 16K tokens at 16/8/4-bit, the context the model was "
        "trained for (memory would allow more)."
    )
    dialog.select_path(snapshot)
    details = dialog.details.toPlainText()
    assert "usable context 16K tokens (the trained context; memory allows" in details
    with qtbot.waitSignal(window.models.loaded, timeout=30_000) as blocker:
        qtbot.mouseClick(dialog.load_button, Qt.MouseButton.LeftButton)
    assert blocker.args[0].folder == str(snapshot)
    assert not dialog.isVisible()
    assert combo.currentData() == str(snapshot)


def test_the_loaded_model_is_listed_on_first_open(qtbot, window, tiny_model_dir):
    window.model_picker.open_manager()
    dialog = window.model_picker.manager
    rows = [dialog.table.item(r, 0).text() for r in range(dialog.table.rowCount())]
    assert "tiny  · loaded" in rows  # the tiny model lives outside every searched place
    assert str(dialog.selected_model().path) == str(tiny_model_dir)
    assert dialog.table.item(rows.index("tiny  · loaded"), 1).text() == (
        "Loaded from its folder"
    )


def test_the_demo_is_listed_on_first_open_after_building_it(qtbot, make_window):
    window = make_window(AppSettings())
    with qtbot.waitSignal(window.models.loaded, timeout=120_000) as blocker:
        qtbot.mouseClick(window.welcome_view.demo_button, Qt.MouseButton.LeftButton)
    info = blocker.args[0]
    assert info.random_weights
    assert window.toolbar.model_combo.currentData() == "demo"
    assert "noise" in window.notices.notice("demo").text
    window.model_picker.open_manager()
    dialog = window.model_picker.manager
    rows = [dialog.table.item(r, 0).text() for r in range(dialog.table.rowCount())]
    assert any(row.startswith("demo  (demo)  · loaded") for row in rows), rows


def test_the_reference_model_is_offered_on_the_welcome_screen_and_listed(
    qtbot, make_window
):
    window = make_window(AppSettings())
    line = window.welcome_view.findChild(QLabel, "referenceExplanation")
    assert "answers offline" in line.text() and "no assistant" in line.text()
    with qtbot.waitSignal(window.models.loaded, timeout=120_000) as blocker:
        qtbot.mouseClick(
            window.welcome_view.reference_button, Qt.MouseButton.LeftButton
        )
    info = blocker.args[0]
    assert not info.random_weights  # trained: no "its replies are noise" notice
    assert window.notices.notice("demo") is None
    window.model_picker.open_manager()
    dialog = window.model_picker.manager
    rows = [dialog.table.item(r, 0).text() for r in range(dialog.table.rowCount())]
    assert rows[0] == "Reference model  · tiny, answers offline  · loaded", rows
    assert dialog.table.item(0, 1).text() == "Ships with Swapless"
    dialog.table.selectRow(0)
    assert "no assistant" in dialog.details.toPlainText()


@pytest.fixture
def folder_of_models(make_window, tiny_model_dir, tmp_path, monkeypatch):
    """A window with its model manager open, a folder with one model, no other models
    than the reference model (always listed first).

    Returns:
        (window, dialog, folder); the folder is not added yet.
    """
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("HOME", str(tmp_path / "nobody"))
    mine = tmp_path / "my-models"
    shutil.copytree(tiny_model_dir, mine / "tiny-copy")
    window = make_window()
    window.model_picker.open_manager()
    return window, window.findChild(ModelManagerDialog), mine


def test_added_folders_are_searched_and_saved(qtbot, folder_of_models):
    _window, dialog, mine = folder_of_models
    dialog.add_folder(str(mine))
    qtbot.waitUntil(lambda: dialog.table.rowCount() == 2, timeout=15_000)
    assert dialog.table.item(1, 1).text() == "Added folder"
    from app.core.settings import load_settings

    assert load_settings().model_folders == (str(mine),)
    dialog.table.selectRow(1)
    assert dialog.remove_folder_button.isEnabled()
    qtbot.mouseClick(dialog.remove_folder_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.table.rowCount() == 1, timeout=15_000)
    assert load_settings().model_folders == ()


def test_a_search_that_ends_after_a_newer_one_does_not_hide_its_models(
    qtbot, folder_of_models, monkeypatch
):
    # The race a busy machine produced: the window's first search (no folders yet)
    # finished after the one started by adding a folder, and emptied the list.
    import threading

    from app.core.models import model_catalog

    window, dialog, mine = folder_of_models
    real_find = model_catalog.find_models
    release, old_done = threading.Event(), threading.Event()

    def find_models(folders):
        if not folders:  # the older search: held until the newer one is shown
            release.wait(30)
            try:
                return real_find(folders)
            finally:
                old_done.set()
        return real_find(folders)

    monkeypatch.setattr(model_catalog, "find_models", find_models)
    window.model_picker.refresh()  # the older search, with no folders
    dialog.add_folder(str(mine))  # the newer one
    qtbot.waitUntil(lambda: dialog.table.rowCount() == 2, timeout=15_000)
    release.set()
    assert old_done.wait(30)
    qtbot.wait(300)  # the older result's queued callback, if any, has run
    assert dialog.table.rowCount() == 2
    assert dialog.table.item(1, 1).text() == "Added folder"


def test_a_download_without_internet_says_so(qtbot, make_window):
    window = make_window()
    window.model_picker.open_manager()
    dialog = window.findChild(ModelManagerDialog)
    dialog.hub_endpoint = "http://127.0.0.1:9"  # nothing listens there: offline
    dialog.repo_edit.setText("mlx-community/Qwen2.5-0.5B-Instruct-4bit")
    with qtbot.waitSignal(dialog.download_failed, timeout=30_000) as blocker:
        qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    message = blocker.args[0]
    assert "Cannot reach the Hugging Face hub" in message
    assert dialog.download_status.text() == message
    assert dialog.download_button.isEnabled() and not dialog.cancel_button.isEnabled()
    assert not dialog.downloading


def test_a_malformed_repo_id_is_explained(qtbot, make_window):
    window = make_window()
    window.model_picker.open_manager()
    dialog = window.findChild(ModelManagerDialog)
    with qtbot.waitSignal(dialog.download_failed, timeout=2000) as blocker:
        dialog.start_download("not a repo id")
    assert "org/name" in blocker.args[0]
