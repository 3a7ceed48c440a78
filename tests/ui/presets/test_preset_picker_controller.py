"""The preset picker and the preset editor: saved with the conversation, checked while typing."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.core.presets.presets import user_presets
from app.ui.presets.preset_editor_dialog import PresetEditorDialog
from app.ui.presets.preset_picker_controller import CHANGED, OWN

KEY_NAMES = ("max_tokens", "max_context", "keep_ratio", "summary_max_tokens")


def test_switching_preset_is_saved_and_used_by_the_next_turn(
    qtbot, window, store, send
):
    conversation_id, report = send(window, "Hello")
    assert report.kv_bits == 8
    combo = window.toolbar.preset_combo
    index = combo.findData("precise")
    combo.setCurrentIndex(index)
    with qtbot.waitSignal(window.current.preset_changed, timeout=10_000):
        combo.activated.emit(index)
    conversation = store.get_conversation(conversation_id)
    assert conversation.preset == "precise" and conversation.settings["kv_bits"] == 16
    assert window.current.preset().name == "precise"  # read back from the store
    _, report = send(window, "And now precisely")
    assert report.kv_bits == 16
    assert store.messages(conversation_id)[-1].stats.kv_bits == 16
    assert "KV 16-bit" in window.chat_view.message_views()[-1].footer_label.text()
    # Reopening the conversation shows its own preset.
    window.current.new_chat()
    assert combo.currentData() == "chat"
    window.current.open(conversation_id)
    assert combo.currentData() == "precise"


def test_the_preset_label_is_never_cut(qtbot, window):
    combo = window.toolbar.preset_combo
    # The window fixture changed the chat preset for this chat: a longer entry.
    assert combo.currentText() == "chat" + CHANGED
    metrics = combo.fontMetrics()
    for index in range(combo.count()):
        needed = metrics.horizontalAdvance(combo.itemText(index))
        assert combo.width() >= needed + 20, combo.itemText(index)


def test_the_preset_editor_checks_in_the_words_of_the_form(qtbot, window):
    window.preset_picker.open_editor()
    dialog = window.findChild(PresetEditorDialog)
    assert dialog.editors["name"].text() == "my-chat"  # built-ins are saved as a copy
    dialog.set_value("max_context", "12x")
    assert dialog.error_label.text() == "Context limit must be a whole number."
    assert dialog.editors["max_context"].styleSheet()  # the field is marked
    assert not dialog.apply_button.isEnabled() and not dialog.save_button.isEnabled()
    dialog.set_value("max_context", "100")
    assert dialog.error_label.text() == (
        "Context limit must be between 256 and 1,048,576."
    )
    dialog.set_value("max_context", "4096")
    assert not dialog.editors["max_context"].styleSheet()
    dialog.set_value("max_tokens", "4096")
    assert dialog.error_label.text() == (
        "Reply length must be smaller than the context limit (4,096 tokens)."
    )
    assert dialog.editors["max_tokens"].styleSheet()
    assert not dialog.apply_button.isEnabled()
    dialog.set_value("max_tokens", "512")
    dialog.set_value("keep_ratio", "1.5")
    assert dialog.error_label.text() == (
        "Share kept when trimming must be between 0.1 and 0.9."
    )
    dialog.set_value("keep_ratio", "0.5")
    dialog.set_value("name", "Bad Name")
    assert "lowercase letters" in dialog.error_label.text()
    for text in (dialog.error_label.text(),):
        assert not any(key in text for key in KEY_NAMES)
    dialog.set_value("name", "chat")
    assert dialog.preset is not None
    qtbot.mouseClick(dialog.save_button, Qt.MouseButton.LeftButton)
    assert "built-in preset" in dialog.error_label.text()
    dialog.set_value("name", "short-chats")
    dialog.set_value("kv_bits", "4")
    with qtbot.waitSignal(dialog.preset_saved, timeout=2000):
        qtbot.mouseClick(dialog.save_button, Qt.MouseButton.LeftButton)
    saved = user_presets()["short-chats"]
    assert (saved.max_context, saved.keep_ratio, saved.kv_bits) == (4096, 0.5, 4)
    assert window.toolbar.preset_combo.findData("short-chats") >= 0


def test_a_warning_does_not_block_the_preset(qtbot, window):
    window.preset_picker.open_editor()
    dialog = window.findChild(PresetEditorDialog)
    dialog.set_value("max_context", "2048")
    dialog.set_value("max_tokens", "1500")
    assert dialog.apply_button.isEnabled()
    assert "more than half of the context limit" in dialog.error_label.text()


def test_a_preset_from_the_editor_applies_to_the_conversation(
    qtbot, window, store, send
):
    conversation_id, _ = send(window, "Before the change")
    window.preset_picker.open_editor()
    dialog = window.findChild(PresetEditorDialog)
    dialog.set_value("kv_bits", "16")
    dialog.set_value("max_tokens", "8")
    with qtbot.waitSignal(window.current.preset_changed, timeout=10_000):
        qtbot.mouseClick(dialog.apply_button, Qt.MouseButton.LeftButton)
    settings = store.get_conversation(conversation_id).settings
    assert (settings["kv_bits"], settings["max_tokens"]) == (16, 8)
    _, report = send(window, "After the change")
    assert report.kv_bits == 16 and report.generated_tokens <= 8
    assert window.toolbar.preset_combo.currentText() == "my-chat" + OWN
