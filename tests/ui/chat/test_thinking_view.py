"""The Thinking block: live while the model thinks, then one line that expands."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from PySide6.QtGui import QGuiApplication

from app.core.store.records import Message, ReplyStats
from app.core.text.markdown_html import LIGHT_THEME
from app.ui.chat.message_view import MessageView
from app.ui.chat.thinking_view import ThinkingView, thinking_words


def _reply(reasoning: str) -> Message:
    return Message(
        id=7,
        conversation_id=1,
        role="assistant",
        content="Rayleigh scattering.",
        created_at=datetime.now(UTC),
        token_count=4,
        state="complete",
        stats=ReplyStats(generated_tokens=816, reasoning_tokens=812, reasoning_s=14.2),
        summary_id=None,
        error=None,
        reasoning=reasoning,
    )


def test_a_stored_reply_shows_its_thought_collapsed_and_copy_copies_the_answer(qtbot):
    view = MessageView.from_message(_reply("Blue light scatters more."), LIGHT_THEME)
    qtbot.addWidget(view)
    view.show()
    thinking = view.thinking
    assert thinking.isVisible() and not thinking.expanded
    assert thinking.toggle.text() == "Thought for 14 s · 812 tokens"
    thinking.toggle.click()
    assert thinking.expanded and thinking.text == "Blue light scatters more."
    view.copy_button.click()
    assert QGuiApplication.clipboard().text() == "Rayleigh scattering."
    assert "812 reasoning tokens" in view.footer_label.text()


def test_a_reply_without_reasoning_has_no_block(qtbot):
    view = MessageView.from_message(_reply(""), LIGHT_THEME)
    qtbot.addWidget(view)
    view.show()
    assert not view.thinking.isVisible()


def test_the_live_block_grows_open_then_collapses(qtbot):
    block = ThinkingView()
    qtbot.addWidget(block)
    block.show()
    block.show_live("First, ", 3, 0.4)
    assert block.expanded and block.toggle.text() == "Thinking… 0 s · 3 tokens"
    block.show_live("First, light.", 5, 1.2)
    assert block.text == "First, light."
    block.show_done("First, light.", 5, 1.2)
    assert not block.expanded and block.toggle.text() == thinking_words(5, 1.2, False)


@pytest.mark.parametrize("line", ["x" * 1_000_000, "word " * 200_000])
def test_a_huge_thought_line_is_laid_out_in_pieces_between_events(qtbot, line):
    """#31 point 7: one 1 MB reasoning line was one block of the Thinking area, laid
    out at once (minutes of frozen window); now a few pieces go per event-loop turn
    and no line of the document passes a piece."""
    from app.core.text.qt_html_renderer import PIECE_CHARS
    from app.ui.chat.thinking_view import PIECES_PER_TURN

    view = ThinkingView()
    qtbot.addWidget(view)
    view.show()
    view.show_done(line, 250_000, 30.0)
    view.toggle.click()  # expanded: the whole thought is laid out
    assert view.pending > 0  # returned to the event loop with most still to come
    assert (
        view.thought.document().characterCount()
        <= PIECES_PER_TURN * (PIECE_CHARS + 1) + 1
    )
    qtbot.waitUntil(lambda: view.pending == 0, timeout=120_000)
    assert view.turns >= len(line) // (PIECES_PER_TURN * PIECE_CHARS)
    document = view.thought.document()
    longest = max(
        len(document.findBlockByNumber(i).text()) for i in range(document.blockCount())
    )
    assert longest <= PIECE_CHARS
    assert view.text == line  # the thought as written
    assert view.thought.toPlainText().replace("\n", "") == line.replace("\n", "")


def test_a_live_thought_grows_by_its_end_only(qtbot):
    view = ThinkingView()
    qtbot.addWidget(view)
    view.show()
    view.show_live("First step.", 3, 1.0)
    document = view.thought.document()
    view.show_live("First step. Second step.", 6, 2.0)
    assert view.thought.document() is document
    assert view.thought.toPlainText() == "First step. Second step."
    view.show_live("Another thought.", 3, 3.0)  # not a continuation: shown anew
    assert view.thought.toPlainText() == view.text == "Another thought."
