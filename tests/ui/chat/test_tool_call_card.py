"""The tool-call card: asks with three buttons, then collapses to one line."""

from __future__ import annotations

import os
from pathlib import Path

from app.core.mcp.consent import Decision
from app.core.store.calls.tool_calls import StoredToolCall
from app.ui.chat.tools.tool_call_card import ToolCallCard

CALL = StoredToolCall(
    call_id="call_1",
    server="tools",
    tool="secret_word",
    arguments='{"topic": "x"}',
    result="The secret word is periwinkle.",
    decision="once",
    seconds=0.21,
)


def test_the_card_asks_and_gives_the_answer(qtbot):
    card = ToolCallCard("tools", "secret_word", '{"topic": "x"}', "python server.py")
    qtbot.addWidget(card)
    card.show()
    assert not card.asking
    card.ask()
    assert card.asking and "python server.py" in card.question.text()
    with qtbot.waitSignal(card.answered) as blocker:
        card.buttons[Decision.ALLOW_ALWAYS].click()
    assert blocker.args == [Decision.ALLOW_ALWAYS] and not card.asking
    assert "running" in card.header.text()


def test_an_answered_call_is_one_line_that_opens_its_details(qtbot):
    card = ToolCallCard.from_call(CALL)
    qtbot.addWidget(card)
    card.show()
    assert card.collapsed
    assert card.header.text() == "Tool call: tools · secret_word — result · 0.21 s"
    card.header.click()
    assert not card.collapsed and "periwinkle" in card.details.text()
    assert '{"topic": "x"}' in card.details.text()


def test_a_cut_result_shows_its_note_even_collapsed(qtbot, tmp_path):
    note = "[Swapless cut this tool result: it was 40,000 tokens …]"
    cut = StoredToolCall(**{**CALL.__dict__, "result": "Line 0\n\n" + note})
    cut = StoredToolCall(**{**cut.__dict__, "cut_note": note, "tool": "big_result"})
    card = ToolCallCard.from_call(cut)
    qtbot.addWidget(card)
    card.show()
    assert card.collapsed and card.note.isVisible() and card.note.text() == note
    assert "cut to fit" in card.header.text()
    shots = Path(os.environ.get("SWAPLESS_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    card.grab().save(str(shots / "card-cut.png"))


def test_a_denied_call_says_so(qtbot):
    denied = StoredToolCall(
        **{**CALL.__dict__, "decision": "deny", "is_error": True, "result": "no"}
    )
    card = ToolCallCard.from_call(denied)
    qtbot.addWidget(card)
    assert "— denied" in card.header.text()
