"""Chat in the real window on the tiny model: stream, stop, regenerate, edit, presets."""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import Qt

from app.core.store import Store
from app.ui.message_view import MessageView


def test_a_reply_streams_in_pieces_and_is_saved(qtbot, window, store, send):
    pieces, threads = [], []

    def on_chunk(_cid, text):
        pieces.append(text)
        threads.append(threading.current_thread())

    window.worker.chunk_received.connect(on_chunk, Qt.ConnectionType.DirectConnection)
    conversation_id, report = send(window, "Hello there, how are you today?")

    assert len(pieces) > 1, "the reply should arrive token by token"
    assert all(t is not threading.main_thread() for t in threads)
    messages = store.messages(conversation_id)
    assert [(m.role, m.state) for m in messages] == [
        ("user", "complete"),
        ("assistant", "complete"),
    ]
    assert messages[1].content == report.reply == "".join(pieces)
    shown = window.chat_view.message_views()
    assert [v.role for v in shown] == ["user", "assistant"]
    assert shown[1].text == report.reply
    footer = shown[1].footer_label.text()
    assert "tok/s" in footer and "TTFT" in footer and "KV 8-bit" in footer
    assert f"{report.generated_tokens} tokens" in footer
    assert window.current_conversation_id == conversation_id
    assert window.list_view.conversation_ids() == [conversation_id]
    assert (
        store.get_conversation(conversation_id).title
        == "Hello there, how are you today?"
    )
    assert window.composer.button.text() == "Send" and window.composer.edit.isEnabled()


def test_enter_sends_and_shift_enter_adds_a_line(qtbot, window):
    edit = window.composer.edit
    qtbot.keyClicks(edit, "first line")
    qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(edit, "second line")
    assert edit.toPlainText() == "first line\nsecond line"
    with qtbot.waitSignal(window.reply_finished, timeout=30_000) as blocker:
        qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert edit.toPlainText() == ""
    conversation_id, _ = blocker.args
    assert (
        window.store.messages(conversation_id)[0].content == "first line\nsecond line"
    )


def test_escape_stops_a_reply_and_keeps_the_partial_text(
    qtbot, window, store, quick_preset
):
    window.set_preset(quick_preset(max_tokens=4000))
    with qtbot.waitSignal(window.reply_chunk_received, timeout=30_000):
        window.send_message("Write a very long story please.")
    assert window.busy and window.composer.button.text() == "Stop"
    window.activateWindow()  # window shortcuts need the active window
    qtbot.waitUntil(window.isActiveWindow, timeout=2000)
    with qtbot.waitSignal(window.reply_finished, timeout=30_000) as blocker:
        qtbot.keyClick(window, Qt.Key.Key_Escape)
    conversation_id, report = blocker.args
    assert report.finish_reason == "cancelled"
    assert 0 < report.generated_tokens < 4000
    reply = store.messages(conversation_id)[-1]
    assert reply.state == "interrupted" and reply.content == report.reply
    assert (
        window.chat_view.message_views()[-1].footer_label.text().startswith("Stopped")
    )
    assert not window.busy


def test_regenerate_replaces_the_last_reply(qtbot, window, store, send):
    conversation_id, _ = send(window, "Tell me something.")
    last = window.chat_view.message_views()[-1]
    assert last.regenerate_button.isVisibleTo(window)
    assert not window.chat_view.message_views()[0].regenerate_button.isVisibleTo(window)
    with qtbot.waitSignal(window.reply_finished, timeout=30_000) as blocker:
        qtbot.mouseClick(last.regenerate_button, Qt.MouseButton.LeftButton)
    _, second = blocker.args
    messages = store.messages(conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].id == second.message_id
    assert messages[1].content == second.reply and messages[1].state == "complete"
    assert (
        second.reused_tokens > 0
    )  # the prompt came from the cache, only the reply is new
    assert window.chat_view.message_views()[-1].text == second.reply


def test_edit_and_resend_replaces_the_message_and_what_followed(
    qtbot, window, store, send
):
    conversation_id, _ = send(window, "First question")
    send(window, "Second question")
    first_user = window.chat_view.message_views()[0]
    qtbot.mouseClick(first_user.edit_button, Qt.MouseButton.LeftButton)
    assert first_user.editor.isVisibleTo(window)
    assert first_user.editor.toPlainText() == "First question"
    first_user.editor.setPlainText("A better first question")
    with qtbot.waitSignal(window.reply_finished, timeout=30_000):
        qtbot.mouseClick(first_user.send_edit_button, Qt.MouseButton.LeftButton)
    messages = store.messages(conversation_id)
    assert [(m.role, m.content) for m in messages][:1] == [
        ("user", "A better first question")
    ]
    assert len(messages) == 2
    assert [v.text for v in window.chat_view.message_views()][
        0
    ] == "A better first question"


def test_switching_preset_is_saved_and_used_by_the_next_turn(
    qtbot, window, store, send
):
    conversation_id, report = send(window, "Hello")
    assert report.kv_bits == 8
    combo = window.preset_combo
    index = combo.findData("precise")
    combo.setCurrentIndex(index)
    with qtbot.waitSignal(window.preset_applied, timeout=10_000):
        combo.activated.emit(index)
    conversation = store.get_conversation(conversation_id)
    assert conversation.preset == "precise" and conversation.settings["kv_bits"] == 16
    _, report = send(window, "And now precisely")
    assert report.kv_bits == 16
    assert store.messages(conversation_id)[-1].stats.kv_bits == 16
    assert "KV 16-bit" in window.chat_view.message_views()[-1].footer_label.text()
    # Reopening the conversation shows its own preset.
    window.new_chat()
    assert window.preset_combo.currentData() == "chat"
    window.open_conversation(conversation_id)
    assert window.preset_combo.currentData() == "precise"


def test_a_forced_trim_shows_a_card_with_the_summary_and_the_originals(
    qtbot, window, store, send, quick_preset
):
    window.set_preset(quick_preset(max_context=512, keep_ratio=0.5))
    long_turn = (
        "Please remember this detail number {i}: the blue box on shelf {i} holds "
        "{i} apples, {i} pears and a note saying hello from the archive."
    )
    trims = []
    window.trim_happened.connect(lambda cid, outcome: trims.append(outcome))
    conversation_id = None
    for i in range(1, 25):
        conversation_id, _ = send(window, long_turn.format(i=i))
        if trims:
            break
    assert trims, "a 512-token limit must trim within 24 turns"
    cards = window.chat_view.trim_cards()
    assert len(cards) == 1
    card = cards[0]
    summary = store.summaries(conversation_id)[0]
    covered = [
        m for m in store.messages(conversation_id, include_trimmed=True) if m.summary_id
    ]
    assert card.message_ids == [m.id for m in covered]
    assert f"{len(covered)} earlier messages summarised" in card.title_label.text()
    assert not card.summary_view.isVisibleTo(window)
    qtbot.mouseClick(card.summary_button, Qt.MouseButton.LeftButton)
    assert card.summary_view.isVisibleTo(window)
    assert card.summary_view.toPlainText().split()[:3] == summary.content.split()[:3]
    qtbot.mouseClick(card.originals_button, Qt.MouseButton.LeftButton)
    assert [v.text for v in card.original_views] == [m.content for m in covered]
    assert all(not v.edit_button.isVisibleTo(window) for v in card.original_views)
    # The newest turns stay outside the card; the meter counts the trim.
    outside = [v.message_id for v in window.chat_view.message_views()]
    assert outside and not set(outside) & set(card.message_ids)
    qtbot.waitUntil(
        lambda: (
            window.context_meter.state is not None
            and window.context_meter.state.trims >= 1
        ),
        timeout=5_000,
    )
    assert window.banners.banner("trim") is not None


def test_a_refused_message_is_given_back(qtbot, window, quick_preset):
    # A reply longer than the whole limit cannot fit: the session refuses in words.
    window.set_preset(quick_preset(max_context=256, max_tokens=300))
    with qtbot.waitSignal(window.reply_failed, timeout=30_000) as blocker:
        window.send_message("This cannot fit")
    _, error = blocker.args
    assert error.known and "limit" in error.message
    assert window.composer.text() == "This cannot fit"
    banner = window.banners.banner("refused")
    assert banner is not None and error.message in banner.label.text()
    assert not window.busy and window.composer.button.isEnabled()


def test_closing_mid_reply_saves_the_partial_reply_and_exits_quickly(
    qtbot, make_window, tiny_model_dir, store, quick_preset
):
    window = make_window()
    with qtbot.waitSignal(window.model_loaded, timeout=30_000):
        window.load_model(str(tiny_model_dir))
    window.set_preset(quick_preset(max_tokens=4000))
    with qtbot.waitSignal(window.reply_chunk_received, timeout=30_000) as blocker:
        window.send_message("A long answer please")
    conversation_id = blocker.args[0]
    started = time.monotonic()
    window.close()
    assert time.monotonic() - started < 2.0
    assert not window._worker_thread.isRunning()
    # Stopped threads and their objects now belong to the window (deleted with it).
    assert window.worker.parent() is window and window.sampler.parent() is window
    with Store.open() as reopened:  # the window closed the store it was given
        reply = reopened.messages(conversation_id)[-1]
    assert reply.role == "assistant" and reply.state == "interrupted"
    assert reply.content


def test_code_block_copy_link_copies_the_code(qtbot, window):
    view = MessageView("assistant", "Here:\n\n```python\nprint('hi')\n```\n")
    qtbot.addWidget(view)
    assert view.body.code_blocks == ("print('hi')",)
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QGuiApplication

    with qtbot.waitSignal(view.body.code_copied, timeout=1000):
        view.body.anchorClicked.emit(QUrl("copy-code:0"))
    assert QGuiApplication.clipboard().text() == "print('hi')"
    qtbot.mouseClick(view.copy_button, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == view.text
