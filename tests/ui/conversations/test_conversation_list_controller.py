"""The conversation list: order, titles, rename, delete with undo in a toast, search."""

from __future__ import annotations

import json

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QMessageBox

from app.core.store import Store
from app.ui.conversations import conversation_list_controller


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
    window.current.new_chat()
    assert window.current.conversation_id is None
    assert window.chat_view.message_views() == []
    second, _ = send(window, "Recipe ideas for dinner")
    assert window.list_view.conversation_ids() == [second, first]
    titles = [window.list_view.list.item(i).text() for i in range(2)]
    assert titles == ["Recipe ideas for dinner", "Planning a trip to Lisbon in May"]
    window.list_view.list.setCurrentRow(1)  # clicking the older one opens it
    assert window.current.conversation_id == first
    assert (
        window.chat_view.message_views()[0].text == "Planning a trip to Lisbon in May"
    )
    assert window.windowTitle().startswith("Planning a trip")


def test_rename_in_place_is_saved(qtbot, window, store, send):
    conversation_id, _ = send(window, "Untitled thoughts")
    item = window.list_view.list.item(0)
    assert item.flags() & Qt.ItemFlag.ItemIsEditable
    with qtbot.waitSignal(window.conversation_list.renamed, timeout=1000):
        item.setText("My renamed chat")  # what the in-place editor commits
    assert store.get_conversation(conversation_id).title == "My renamed chat"
    assert window.windowTitle() == "My renamed chat — Swapless"


def test_delete_asks_and_can_be_undone_in_a_toast_that_moves_nothing(
    qtbot, window, store, send
):
    conversation_id, _ = send(window, "Keep me please")
    window.conversation_list.delete(conversation_id)
    # Enter answers the safe way: the default button is Cancel.
    assert _confirm_dialog(window).defaultButton().text() == "Cancel"
    _press(_confirm_dialog(window), "Cancel")
    assert window.list_view.conversation_ids() == [conversation_id]

    chat_geometry = window.main_stack.geometry()
    list_geometry = window.list_view.geometry()
    window.conversation_list.delete(conversation_id)
    _press(_confirm_dialog(window), "Delete")
    assert window.list_view.conversation_ids() == []
    assert window.current.conversation_id is None
    toast = window.toast
    assert toast.isVisible() and "Keep me please" in toast.label.text()
    assert toast.action_button.text() == "Undo (10 s)"
    assert toast.parent() is window.main_stack and toast.geometry().bottom() < (
        window.main_stack.height()
    )
    # Floating over the chat: nothing else moved to make room for it.
    assert window.main_stack.geometry() == chat_geometry
    assert window.list_view.geometry() == list_geometry
    assert store.get_conversation(conversation_id)  # not deleted yet
    qtbot.mouseClick(toast.action_button, Qt.MouseButton.LeftButton)
    assert window.list_view.conversation_ids() == [conversation_id]
    assert not toast.isVisible()
    assert store.get_conversation(conversation_id)


def test_the_undo_offer_lasts_ten_seconds_then_the_delete_happens(
    qtbot, window, store, send, monkeypatch
):
    assert conversation_list_controller.UNDO_DELETE_MS >= 10_000
    monkeypatch.setattr(conversation_list_controller, "UNDO_DELETE_MS", 100)
    conversation_id, _ = send(window, "Delete me")
    with qtbot.waitSignal(window.conversation_list.delete_committed, timeout=3000):
        window.conversation_list.delete_with_undo(conversation_id)
    assert store.list_conversations() == []
    assert not window.toast.isVisible()


def test_pending_delete_is_committed_when_the_window_closes(qtbot, window, send):
    conversation_id, _ = send(window, "Delete me on close")
    window.conversation_list.delete_with_undo(conversation_id)
    window.close()
    with Store.open() as reopened:
        assert reopened.list_conversations() == []


def test_deleting_the_conversation_being_written_stops_it_first(
    qtbot, window, store, send, quick_preset
):
    window.current.set_preset(quick_preset(max_tokens=4000))
    with qtbot.waitSignal(window.turns.live_text_changed, timeout=30_000) as blocker:
        window.turns.send("A long reply to delete")
    conversation_id = blocker.args[0]
    with qtbot.waitSignal(window.turns.reply_finished, timeout=30_000):
        window.conversation_list.delete_with_undo(conversation_id)
    window.conversation_list.commit(conversation_id)
    assert store.list_conversations() == []


def test_search_finds_a_message_and_opens_it(qtbot, window, send):
    zebra, _ = send(window, "Tell me about the zebra crossing rules")
    window.current.new_chat()
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
    assert window.current.conversation_id == zebra
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


def test_the_search_box_is_usable_from_the_keyboard(qtbot, window, send):
    zebra, _ = send(window, "Tell me about the zebra crossing rules")
    window.current.new_chat()
    send(window, "Something else entirely")
    view = window.list_view
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=2000)
    view.focus_search()
    qtbot.keyClicks(view.search_edit, "zebra")
    # Down goes into the results at once (no wait for the typing pause).
    qtbot.keyClick(view.search_edit, Qt.Key.Key_Down)
    assert view.stack.currentIndex() == 1 and view.results.count() > 0
    assert QApplication.focusWidget() is view.results
    assert view.results.currentRow() == 0
    # Enter in the box opens the first hit.
    view.focus_search()
    qtbot.keyClick(view.search_edit, Qt.Key.Key_Return)
    assert window.current.conversation_id == zebra
    # Esc clears the search and shows the conversations again.
    view.focus_search()
    qtbot.keyClick(view.search_edit, Qt.Key.Key_Escape)
    assert view.search_edit.text() == "" and view.stack.currentIndex() == 0


def test_search_results_keep_their_whole_text_when_the_list_narrows(
    qtbot, window, send
):
    send(window, "zebra " * 60 + "crossing rules for a long message")
    view = window.list_view
    with qtbot.waitSignal(view.search_changed, timeout=2000):
        qtbot.keyClicks(view.search_edit, "zebra")
    results = view.results
    window.splitter.setSizes([400, 900])
    qtbot.wait(50)
    window.splitter.setSizes([200, 1100])  # narrower: every result grows taller
    qtbot.wait(50)
    width = results.viewport().width() - 8
    for row in range(results.count()):
        item = results.item(row)
        label = results.itemWidget(item)
        assert item.sizeHint().height() >= label.heightForWidth(width)


def test_a_conversation_imported_in_the_window_says_so_in_its_title(
    qtbot, window, store, send, tmp_path
):
    # The CLI's import titles the copy '… (imported)'; the window's does the same
    # (#28 point 20), so the copy is told apart from its original in the list.
    original, _ = send(window, "Planning a trip to Lisbon in May")
    export = tmp_path / "trip.json"
    export.write_text(json.dumps(store.export_json(original)), encoding="utf-8")
    window.list_view.import_requested.disconnect()  # no file dialog in a test
    copy = window.conversation_list.import_file(str(export))
    assert copy is not None and copy != original
    title = store.get_conversation(copy).title
    assert title == store.get_conversation(original).title + " (imported)"
    assert window.list_view.conversation_ids()[:2] == [copy, original]
    assert window.list_view.list.item(0).text() == title
    assert window.current.conversation_id == copy  # opened
    assert [v.text for v in window.chat_view.message_views()][0] == (
        "Planning a trip to Lisbon in May"
    )


def test_a_file_that_is_not_an_export_is_refused_in_words(window, store, tmp_path):
    before = [c.id for c in store.list_conversations()]
    bad = tmp_path / "notes.json"
    bad.write_text('{"hello": 1}', encoding="utf-8")
    assert window.conversation_list.import_file(str(bad)) is None
    assert window.conversation_list.import_file(str(tmp_path / "missing.json")) is None
    errors = [
        b for b in window.findChildren(QMessageBox) if b.objectName() == "errorDialog"
    ]
    assert len(errors) == 2
    assert "notes.json" in errors[0].text() and "missing.json" in errors[1].text()
    assert [c.id for c in store.list_conversations()] == before
