"""The conversation list: order, titles, rename, delete with undo, search, shortcuts, restore."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QMessageBox

from app.core.store import Store
from app.ui import main_window
from app.ui.settings_dialog import SettingsDialog


def _confirm_dialog(window) -> QMessageBox:
    boxes = [
        b for b in window.findChildren(QMessageBox) if b.objectName() == "confirmDialog"
    ]
    assert boxes, "a confirmation should be open"
    return boxes[-1]


def _press(box: QMessageBox, text: str) -> None:
    button = next(b for b in box.buttons() if b.text() == text)
    button.click()


def test_newest_first_with_titles_from_the_first_message(qtbot, window, send):
    first, _ = send(window, "Planning a trip to Lisbon in May")
    window.new_chat()
    assert window.current_conversation_id is None
    assert window.chat_view.message_views() == []
    second, _ = send(window, "Recipe ideas for dinner")
    assert window.list_view.conversation_ids() == [second, first]
    titles = [window.list_view.list.item(i).text() for i in range(2)]
    assert titles == ["Recipe ideas for dinner", "Planning a trip to Lisbon in May"]
    # Clicking the older one opens it.
    window.list_view.list.setCurrentRow(1)
    assert window.current_conversation_id == first
    assert (
        window.chat_view.message_views()[0].text == "Planning a trip to Lisbon in May"
    )
    assert window.windowTitle().startswith("Planning a trip")


def test_rename_in_place_is_saved(qtbot, window, store, send):
    conversation_id, _ = send(window, "Untitled thoughts")
    item = window.list_view.list.item(0)
    assert item.flags() & Qt.ItemFlag.ItemIsEditable
    item.setText("My renamed chat")  # what the in-place editor commits
    assert store.get_conversation(conversation_id).title == "My renamed chat"
    assert window.windowTitle() == "My renamed chat — Swapless"


def test_delete_asks_and_can_be_undone(qtbot, window, store, send):
    conversation_id, _ = send(window, "Keep me please")
    window.delete_conversation(conversation_id)
    _press(_confirm_dialog(window), "Cancel")
    assert window.list_view.conversation_ids() == [conversation_id]

    window.delete_conversation(conversation_id)
    _press(_confirm_dialog(window), "Delete")
    assert window.list_view.conversation_ids() == []
    assert window.current_conversation_id is None
    banner = window.banners.banner(f"delete-{conversation_id}")
    assert banner is not None and "Keep me please" in banner.label.text()
    assert store.get_conversation(conversation_id)  # not deleted yet
    qtbot.mouseClick(banner.action_button, Qt.MouseButton.LeftButton)
    assert window.list_view.conversation_ids() == [conversation_id]
    assert store.get_conversation(conversation_id)


def test_delete_happens_after_the_undo_period(qtbot, window, store, send, monkeypatch):
    monkeypatch.setattr(main_window, "UNDO_DELETE_MS", 100)
    conversation_id, _ = send(window, "Delete me")
    window.delete_with_undo(conversation_id)
    qtbot.waitUntil(lambda: not store.list_conversations(), timeout=3000)
    assert window.banners.banner(f"delete-{conversation_id}") is None


def test_pending_delete_is_committed_when_the_window_closes(qtbot, window, store, send):
    conversation_id, _ = send(window, "Delete me on close")
    window.delete_with_undo(conversation_id)
    window.close()
    with Store.open() as reopened:
        assert reopened.list_conversations() == []


def test_search_finds_a_message_and_opens_it(qtbot, window, send):
    zebra, _ = send(window, "Tell me about the zebra crossing rules")
    window.new_chat()
    send(window, "Something else entirely")
    with qtbot.waitSignal(window.list_view.search_changed, timeout=2000):
        qtbot.keyClicks(window.list_view.search_edit, "zebra")
    results = window.list_view.results
    assert window.list_view.stack.currentIndex() == 1
    items = [results.item(i) for i in range(results.count())]
    assert items and all(i.data(Qt.ItemDataRole.UserRole) == zebra for i in items)
    # The title matches too; the message hit is the one that points at a message.
    item = next(i for i in items if i.data(Qt.ItemDataRole.UserRole + 1) is not None)
    label = results.itemWidget(item)
    assert "<b>zebra</b>" in label.text() and "(you)" in label.text()
    results.itemClicked.emit(item)
    assert window.current_conversation_id == zebra
    message_id = item.data(Qt.ItemDataRole.UserRole + 1)
    view = next(
        v for v in window.chat_view.message_views() if v.message_id == message_id
    )
    assert view.property("highlighted") is True
    window.list_view.clear_search()
    assert window.list_view.stack.currentIndex() == 0


def test_search_with_no_hits_says_so(qtbot, window):
    with qtbot.waitSignal(window.list_view.search_changed, timeout=2000):
        window.list_view.search_edit.setText("nothing-like-this")
    assert window.list_view.results.count() == 0
    assert "Nothing found" in window.list_view.results_label.text()


def test_keyboard_shortcuts(qtbot, window, send):
    send(window, "Hello")
    assert window.current_conversation_id is not None
    window.activateWindow()  # window shortcuts need the active window
    qtbot.waitUntil(window.isActiveWindow, timeout=2000)
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert window.current_conversation_id is None
    qtbot.keyClick(window, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert QApplication.focusWidget() is window.list_view.search_edit
    qtbot.keyClick(window, Qt.Key.Key_Comma, Qt.KeyboardModifier.ControlModifier)
    dialogs = window.findChildren(SettingsDialog)
    assert dialogs and dialogs[-1].isVisible()
    dialogs[-1].reject()


def test_geometry_and_last_conversation_are_restored(
    qtbot, make_window, window, send, swapless_home
):
    conversation_id, _ = send(window, "Remember where I was")
    # The offscreen screen is 800x600: a restored width is clamped to it, the height not.
    window.resize(820, 520)
    window.close()
    assert (swapless_home / "window-state.ini").is_file()
    with Store.open() as store:
        from app.ui.main_window import MainWindow

        again = MainWindow(store, restore_state=True, load_last_model=False)
        qtbot.addWidget(again)
        assert again.current_conversation_id == conversation_id
        assert again.size().height() == 520
        assert again.chat_view.message_views()[0].text == "Remember where I was"
        again.close()


@pytest.mark.parametrize("level", ["warning", "critical"])
def test_memory_pressure_shows_what_swapless_does(qtbot, window, level):
    from dataclasses import replace

    from app.core.memory.snapshot import PressureLevel

    qtbot.waitUntil(lambda: window.memory_gauge.snapshot is not None, timeout=3000)
    tight = replace(
        window.memory_gauge.snapshot,
        pressure=PressureLevel(level),
        pressure_source="test: PSI some avg10=50",
    )
    window._on_sampler_snapshot_taken(tight)
    banner = window.banners.banner("pressure")
    assert banner is not None and "test: PSI some avg10=50" in banner.label.text()
    expected = "trims conversations earlier" if level == "warning" else "will not start"
    assert expected in banner.label.text()
    window._on_sampler_snapshot_taken(replace(tight, pressure=PressureLevel.NORMAL))
    assert window.banners.banner("pressure") is None
