"""Turns in the real window on the tiny model: stream, stop, regenerate, edit, refusals."""

from __future__ import annotations

import threading

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.ui.chat.message_view import MessageView


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
    count = report.generated_tokens
    assert f"{count} token{'' if count == 1 else 's'}" in footer
    assert window.current.conversation_id == conversation_id
    assert window.list_view.conversation_ids() == [conversation_id]
    assert window.windowTitle() == "Hello there, how are you today? — Swapless"
    assert window.composer.button.text() == "Send" and window.composer.edit.isEnabled()
    assert not window.turns.busy and window.turns.live is None


def test_enter_sends_and_shift_enter_adds_a_line(qtbot, window):
    edit = window.composer.edit
    qtbot.keyClicks(edit, "first line")
    qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(edit, "second line")
    assert edit.toPlainText() == "first line\nsecond line"
    with qtbot.waitSignal(window.turns.reply_finished, timeout=30_000) as blocker:
        qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert edit.toPlainText() == ""
    conversation_id, _ = blocker.args
    assert (
        window.store.messages(conversation_id)[0].content == "first line\nsecond line"
    )


def test_escape_stops_a_reply_and_keeps_the_partial_text(
    qtbot, window, store, quick_preset
):
    window.current.set_preset(quick_preset(max_tokens=4000))
    with qtbot.waitSignal(window.turns.live_text_changed, timeout=30_000):
        window.turns.send("Write a very long story please.")
    assert window.turns.busy and window.composer.button.text() == "Stop"
    window.activateWindow()  # window shortcuts need the active window
    qtbot.waitUntil(window.isActiveWindow, timeout=2000)
    with qtbot.waitSignal(window.turns.reply_finished, timeout=30_000) as blocker:
        qtbot.keyClick(window, Qt.Key.Key_Escape)
    conversation_id, report = blocker.args
    assert report.finish_reason == "cancelled"
    assert 0 < report.generated_tokens < 4000
    reply = store.messages(conversation_id)[-1]
    assert reply.state == "interrupted" and reply.content == report.reply
    assert (
        window.chat_view.message_views()[-1].footer_label.text().startswith("Stopped")
    )
    assert not window.turns.busy


def test_the_live_reply_survives_looking_at_another_conversation(
    qtbot, window, send, quick_preset
):
    other, _ = send(window, "An older conversation")
    window.current.new_chat()
    window.current.set_preset(quick_preset(max_tokens=4000))
    with qtbot.waitSignal(window.turns.live_text_changed, timeout=30_000) as blocker:
        window.turns.send("A long one, please")
    live_id = blocker.args[0]
    window.current.open(other)
    assert window.chat_view.live_reply is None  # the other conversation has none
    qtbot.waitUntil(lambda: len(window.turns.live.reply_text) > 20, timeout=30_000)
    window.current.open(live_id)
    live = window.chat_view.live_reply
    assert live is not None
    qtbot.waitUntil(
        lambda: live.text and window.turns.live.reply_text.startswith(live.text),
        timeout=5000,
    )
    with qtbot.waitSignal(window.turns.reply_finished, timeout=30_000) as blocker:
        window.turns.stop()
    _, report = blocker.args
    assert window.chat_view.message_views()[-1].text == report.reply


def test_regenerate_replaces_the_last_reply(qtbot, window, store, send):
    conversation_id, _ = send(window, "Tell me something.")
    last = window.chat_view.message_views()[-1]
    assert last.regenerate_button.isVisibleTo(window)
    assert not window.chat_view.message_views()[0].regenerate_button.isVisibleTo(window)
    with qtbot.waitSignal(window.turns.reply_finished, timeout=30_000) as blocker:
        qtbot.mouseClick(last.regenerate_button, Qt.MouseButton.LeftButton)
    _, second = blocker.args
    messages = store.messages(conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].id == second.message_id
    assert messages[1].content == second.reply and messages[1].state == "complete"
    assert second.reused_tokens > 0  # the prompt came from the cache
    assert window.chat_view.message_views()[-1].text == second.reply


def test_edit_and_resend_with_enter_replaces_what_followed_and_the_title(
    qtbot, window, store, send
):
    conversation_id, _ = send(window, "First question")
    send(window, "Second question")
    first_user = window.chat_view.message_views()[0]
    qtbot.mouseClick(first_user.edit_button, Qt.MouseButton.LeftButton)
    assert first_user.editor.isVisibleTo(window)
    assert first_user.editor.toPlainText() == "First question"
    first_user.editor.selectAll()
    qtbot.keyClicks(first_user.editor, "A better")
    qtbot.keyClick(
        first_user.editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier
    )
    qtbot.keyClicks(first_user.editor, "first question")
    with qtbot.waitSignal(window.turns.reply_finished, timeout=30_000):
        qtbot.keyClick(first_user.editor, Qt.Key.Key_Return)  # Enter sends the edit
    messages = store.messages(conversation_id)
    assert messages[0].content == "A better\nfirst question" and len(messages) == 2
    assert window.chat_view.message_views()[0].text == "A better\nfirst question"
    # The title was made from the first message, so it follows the edit.
    assert store.get_conversation(conversation_id).title == "A better first question"
    assert window.list_view.list.item(0).text() == "A better first question"
    assert window.windowTitle() == "A better first question — Swapless"


def test_a_title_typed_by_hand_survives_an_edit(qtbot, window, store, send):
    conversation_id, _ = send(window, "Original text")
    store.rename_conversation(conversation_id, "My own title")
    first = window.chat_view.message_views()[0]
    with qtbot.waitSignal(window.turns.reply_finished, timeout=30_000):
        window.turns.edit_and_resend(first.message_id, "Edited text")
    assert store.get_conversation(conversation_id).title == "My own title"


def test_a_forced_trim_shows_a_card_that_says_how_the_summary_was_made(
    qtbot, window, store, send, quick_preset
):
    window.current.set_preset(quick_preset(max_context=512, keep_ratio=0.5))
    long_turn = (
        "Please remember this detail number {i}: the blue box on shelf {i} holds "
        "{i} apples, {i} pears and a note saying hello from the archive."
    )
    trims = []
    window.turns.trimmed.connect(lambda cid, outcome: trims.append(outcome))
    conversation_id = None
    for i in range(1, 25):
        conversation_id, _ = send(window, long_turn.format(i=i))
        if trims:
            break
    assert trims, "a 512-token limit must trim within 24 turns"
    (card,) = window.chat_view.trim_cards()
    summary = store.summaries(conversation_id)[0]
    covered = [
        m for m in store.messages(conversation_id, include_trimmed=True) if m.summary_id
    ]
    assert card.message_ids == [m.id for m in covered]
    # The trim came because the turn would pass the 512-token limit, and says so.
    assert (summary.cause, summary.limit_tokens) == ("limit", 512)
    assert card.title_label.text() == (
        f"{len(covered)} earlier messages summarised to stay within the limit of 512 "
        "tokens"
    )
    # The preset asks for extractive summaries, and the card says so in words.
    assert card.origin_label.text() == (
        "Summary picked from the messages (extractive): this conversation's preset "
        "asks for that."
    )
    assert summary.content.strip() != "Summary of the earlier conversation:"
    assert not card.summary_view.isVisibleTo(window)
    bar = window.chat_view.scroll_area.verticalScrollBar()
    bar.setValue(bar.maximum())  # the chat scrolled to its end, the card above it
    qtbot.mouseClick(card.summary_button, Qt.MouseButton.LeftButton)
    assert card.summary_view.isVisibleTo(window)
    # The opened summary is scrolled into view, not left above the viewport.
    viewport = window.chat_view.scroll_area.viewport()
    qtbot.waitUntil(
        lambda: viewport.rect().contains(
            card.summary_view.mapTo(viewport, card.summary_view.rect().topLeft())
        ),
        timeout=2000,
    )
    assert card.summary_view.toPlainText().split()[:3] == summary.content.split()[:3]
    qtbot.mouseClick(card.originals_button, Qt.MouseButton.LeftButton)
    assert [v.text for v in card.original_views] == [m.content for m in covered]
    assert all(not v.edit_button.isVisibleTo(window) for v in card.original_views)
    outside = [v.message_id for v in window.chat_view.message_views()]
    assert outside and not set(outside) & set(card.message_ids)
    notice = window.notices.notice("trim")
    assert notice is not None and "went into the summary at the top" in notice.text
    assert "splice" not in notice.text and "line up" not in notice.text


def test_a_demo_model_trim_card_says_why_the_model_did_not_summarise(
    qtbot, window, store, send, quick_preset
):
    window.current.set_preset(
        quick_preset(max_context=512, keep_ratio=0.5, summary_mode="model")
    )
    turn = "Detail {i}: shelf {i} holds {i} apples and a note from the archive, kept."
    for i in range(1, 25):
        conversation_id, report = send(window, turn.format(i=i))
        if report.trimmed:
            break
    assert report.summary_method == "extractive"
    (card,) = window.chat_view.trim_cards()
    assert card.origin_label.text().endswith(
        "the demo model's own summary would be noise."
    )


def test_a_refused_message_is_given_back(qtbot, window, quick_preset):
    # A reply longer than the whole limit cannot fit: the session refuses in words.
    window.current.set_preset(quick_preset(max_context=256, max_tokens=300))
    with qtbot.waitSignal(window.turns.reply_failed, timeout=30_000) as blocker:
        window.turns.send("This cannot fit")
    _, error = blocker.args
    assert error.known and "limit" in error.message
    assert window.composer.text() == "This cannot fit"
    notice = window.notices.notice("refused")
    assert notice is not None and notice.text == error.message
    assert notice.timeout_ms is None  # it matters: it stays until dismissed
    assert not window.turns.busy and window.composer.button.isEnabled()


def test_copy_says_copied_and_code_copies_the_code(qtbot, window):
    view = MessageView("assistant", "Here:\n\n```python\nprint('hi')\n```\n")
    qtbot.addWidget(view)
    assert view.body.code_blocks == ("print('hi')",)
    from PySide6.QtCore import QUrl

    with qtbot.waitSignal(view.body.code_copied, timeout=1000):
        view.body.anchorClicked.emit(QUrl("copy-code:0"))
    assert QApplication.clipboard().text() == "print('hi')"
    assert view.copy_button.text() == "Code copied ✓"
    qtbot.mouseClick(view.copy_button, Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == view.text
    assert view.copy_button.text() == "Copied ✓"
    qtbot.waitUntil(lambda: view.copy_button.text() == "Copy", timeout=3000)
