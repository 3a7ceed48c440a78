"""Switching conversations while long replies still render (#31 point 8)."""

from __future__ import annotations

from datetime import UTC, datetime

from PySide6.QtWidgets import QApplication

from app.core.store.records import Message, ReplyStats
from app.core.text.synthetic_text import long_markdown_reply
from app.ui.chat.chat_view import ChatView
from app.ui.chat.rich_text_view import SYNC_CHARS, RichTextView
from app.ui.common.background import TaskSet


def _conversation(cid: int, reply: str) -> list[Message]:
    def message(offset: int, role, content: str) -> Message:
        return Message(
            id=cid * 10 + offset,
            conversation_id=cid,
            role=role,
            content=content,
            created_at=datetime.now(UTC),
            token_count=None,
            state="complete",
            stats=ReplyStats(),
            summary_id=None,
            error=None,
        )

    return [message(1, "user", f"question {cid}"), message(2, "assistant", reply)]


def test_renders_landing_for_a_conversation_left_are_dropped_and_never_drawn(qtbot):
    view = ChatView()
    view.resize(900, 600)
    qtbot.addWidget(view)
    view.show()
    left: list[RichTextView] = []
    for cid in (1, 2, 3):
        reply = f"OLD{cid} " + long_markdown_reply(SYNC_CHARS * 6, seed=cid)
        view.show_conversation(_conversation(cid, reply), [])
        body = view.message_views()[-1].body
        assert body.busy  # rendering on the worker when the next one is opened
        left.append(body)
    view.show_conversation(_conversation(4, "The **open** one."), [])
    # The renders of the three replies left land now. Only events are processed,
    # not deferred deletions (a nested or busy event loop delays them): what was
    # left must be off the screen already, and what lands in it is dropped.
    assert TaskSet.wait(60_000)
    for _ in range(20):
        QApplication.processEvents()
    drawn = [
        w.toPlainText()
        for w in view.findChildren(RichTextView)
        if w.isVisibleTo(view) and w.toPlainText()
    ]
    assert drawn == ["question 4", "The open one."]
    assert all(not body.busy and body.pieces == 1 for body in left)
    assert not any("OLD" in body.toPlainText() for body in left)
