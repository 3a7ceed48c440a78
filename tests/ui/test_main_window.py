"""The window as a whole: it fits laptop screens, its shortcuts, restore, close, plain text."""

from __future__ import annotations

import json
import time

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QLabel, QMessageBox

from app.core.store import Store
from app.ui.main_window import MainWindow
from app.ui.settings.settings_dialog import SettingsDialog

HOSTILE = "<h1>Big</h1><img src='file:///etc/passwd'>"


@pytest.mark.parametrize("size", [(1280, 800), (1366, 768)])
def test_the_window_keeps_a_laptop_size_after_loading_and_replying(
    qtbot, make_window, tiny_model_dir, send, quick_preset, size
):
    window = make_window()
    window.resize(*size)
    qtbot.wait(50)
    assert (window.width(), window.height()) == size
    with qtbot.waitSignal(window.models.loaded, timeout=30_000):
        window.models.load(str(tiny_model_dir))
    window.current.set_preset(quick_preset(max_tokens=48))
    send(window, "A reply that fills the status line with numbers " * 3)
    qtbot.wait(100)  # let the layout settle
    assert window.width() == size[0], "status text must elide, not widen the window"
    assert window.height() == size[1]
    hint = window.minimumSizeHint()
    assert hint.width() <= size[0] and hint.height() <= size[1] - 60
    # The long status lines are cut with an ellipsis, the whole text in reach.
    for label in (window.memory_gauge.text_label, window.context_meter.text_label):
        assert label.width() <= window.width()
        assert label.full_text


def test_keyboard_shortcuts(qtbot, window, send):
    send(window, "Hello")
    assert window.current.conversation_id is not None
    window.activateWindow()  # window shortcuts need the active window
    qtbot.waitUntil(window.isActiveWindow, timeout=2000)
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert window.current.conversation_id is None
    assert QApplication.focusWidget() is window.composer.edit  # ready to type
    qtbot.keyClick(window, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert QApplication.focusWidget() is window.list_view.search_edit
    qtbot.keyClick(window, Qt.Key.Key_Comma, Qt.KeyboardModifier.ControlModifier)
    dialogs = window.findChildren(SettingsDialog)
    assert dialogs and dialogs[-1].isVisible()
    dialogs[-1].reject()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=2000)
    qtbot.keyClick(window, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=3000)
    assert not window.threads.worker_thread.isRunning()


def test_geometry_and_last_conversation_are_restored(
    qtbot, make_window, window, send, swapless_home
):
    conversation_id, _ = send(window, "Remember where I was")
    # The offscreen screen is 800x600: a restored width is clamped to it, the height not.
    window.resize(820, 520)
    window.close()
    state = swapless_home / "window-state.ini"
    assert state.is_file()
    # Private from its first write: the next start finds nothing to tighten.
    assert state.stat().st_mode & 0o777 == 0o600
    with Store.open() as store:
        again = MainWindow(store, restore_state=True, load_last_model=False)
        qtbot.addWidget(again)
        assert again.current.conversation_id == conversation_id
        assert again.size().height() == 520
        assert again.chat_view.message_views()[0].text == "Remember where I was"
        again.close()


def test_closing_mid_reply_saves_the_partial_reply_and_exits_quickly(
    qtbot, make_window, tiny_model_dir, quick_preset
):
    window = make_window()
    with qtbot.waitSignal(window.models.loaded, timeout=30_000):
        window.models.load(str(tiny_model_dir))
    window.current.set_preset(quick_preset(max_tokens=4000))
    with qtbot.waitSignal(window.turns.live_text_changed, timeout=30_000) as blocker:
        window.turns.send("A long answer please")
    conversation_id = blocker.args[0]
    started = time.monotonic()
    window.close()
    assert time.monotonic() - started < 2.0
    assert not window.threads.worker_thread.isRunning()
    # Stopped threads and their objects now belong to the window (deleted with it).
    assert window.worker.parent() is window and window.sampler.parent() is window
    assert not window.turns.busy
    QApplication.processEvents()  # results queued before the stop reach nothing
    with Store.open() as reopened:  # the window closed the store it was given
        reply = reopened.messages(conversation_id)[-1]
    assert reply.role == "assistant" and reply.state == "interrupted"
    assert reply.content


def test_text_from_data_is_shown_literally(qtbot, make_window, store):
    source = store.create_conversation(HOSTILE)
    store.add_message(source, "user", f"Question {HOSTILE}")
    reply = store.begin_reply(source)
    store.fail_reply(reply, "partial", "placeholder")
    exported = json.loads(json.dumps(store.export_json(source)))
    exported["messages"][-1]["error"] = HOSTILE
    imported = store.import_json(exported)
    store.delete_conversation(source)

    window = make_window()
    window.current.open(imported)
    item = window.list_view.list.item(0)
    assert item.text() == HOSTILE
    assert "<h1>" not in item.toolTip() and "&lt;h1&gt;" in item.toolTip()
    assert window.windowTitle() == f"{HOSTILE} — Swapless"
    footer = window.chat_view.message_views()[-1].footer_label
    assert footer.textFormat() == Qt.TextFormat.PlainText
    assert footer.text() == f"Failed: {HOSTILE}"
    # Every label that shows it does so as plain text, never as a heading or image.
    for label in window.findChildren(QLabel):
        if HOSTILE in label.text() and label.textFormat() != Qt.TextFormat.PlainText:
            raise AssertionError(f"{label.objectName()} renders data as rich text")
    window.conversation_list.delete(imported)
    box = next(
        b for b in window.findChildren(QMessageBox) if b.objectName() == "confirmDialog"
    )
    assert box.textFormat() == Qt.TextFormat.PlainText and HOSTILE in box.text()
    box.reject()
