"""A tool call in the real window: the card asks, the user allows, the result is kept.

The real worker and engine with the tiny random-weight model in the reference format,
made to call ``secret_word`` through the engine's constraint (the `tool_choices`
fixture); the real SDK server over stdio; the real store. With a model that calls
tools by itself, only the fixture changes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication, QEvent

from app.core.mcp.config import ServerConfig, save_config
from app.core.mcp.consent import Decision
from app.core.mcp.tool_prefs import ToolPrefs, save_prefs
from app.ui.chat.tools.tool_call_card import ToolCallCard

SERVER = Path(__file__).resolve().parents[2] / "core" / "mcp" / "tool_server.py"


@pytest.fixture
def tool_choices():
    from app.core.tools.tool_specs import ToolChoice

    return lambda name: (ToolChoice("named", name), ToolChoice("none"))


@pytest.fixture
def tool_window(make_window, qtbot, thinking_model_dir, quick_preset, tool_choices):
    save_config(
        {"tools": ServerConfig("tools", command=sys.executable, args=(str(SERVER),))}
    )
    save_prefs(ToolPrefs(new_chats=("tools",)))
    window = make_window()
    with qtbot.waitSignal(window.models.loaded, timeout=60_000):
        window.models.load(str(thinking_model_dir()))
    window.current.set_preset(quick_preset(max_tokens=48, thinking=False))
    window.worker.tools.choices = tool_choices("secret_word")
    return window


def _shots(tmp_path: Path) -> Path:
    """Where the cards' pictures go: $SWAPLESS_SCREENSHOTS (for a closing note) or tmp."""
    folder = Path(os.environ.get("SWAPLESS_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _asking_card(window) -> ToolCallCard | None:
    return next((c for c in window.tool_cards.cards.values() if c.asking), None)


def _wait_for_question(qtbot, window) -> ToolCallCard:
    """The card that asks; fails at once (with the notices) if the turn ends first."""
    notices: list[str] = []
    window.worker.tool_notice.connect(lambda _cid, text: notices.append(text))
    qtbot.waitUntil(
        lambda: _asking_card(window) is not None or window.turns.live is None,
        timeout=150_000,
    )
    card = _asking_card(window)
    assert card is not None, f"the turn ended without a question: {notices}"
    return card


def test_the_card_asks_and_an_allowed_call_is_shown_again_collapsed(
    qtbot, tool_window, tmp_path
):
    window = tool_window
    with qtbot.waitSignal(window.turns.reply_finished, timeout=180_000) as blocker:
        assert window.turns.send("What is the secret word?")
        card = _wait_for_question(qtbot, window)
        assert sys.executable in card.question.text()
        card.grab().save(str(_shots(tmp_path) / "card-asking.png"))
        card.buttons[Decision.ALLOW_ONCE].click()
    conversation_id, report = blocker.args
    assert report.tool_calls == 1
    # The stored turn replaces the live one: the card is there, answered, one line.
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    cards = window.chat_view.findChildren(ToolCallCard)
    assert len(cards) == 1 and cards[0].collapsed and cards[0].call is not None
    assert "secret_word — result" in cards[0].header.text()
    assert "periwinkle" in cards[0].details.text()
    (call,) = window.store.tool_calls(conversation_id)[cards[0].call.message_id]
    assert call.decision == "once" and "periwinkle" in call.result
    cards[0].grab().save(str(_shots(tmp_path) / "card-answered.png"))


def test_a_question_not_answered_before_stop_is_denied(qtbot, tool_window):
    window = tool_window
    with qtbot.waitSignal(window.turns.reply_finished, timeout=180_000) as blocker:
        assert window.turns.send("Secret?")
        _wait_for_question(qtbot, window)
        window.turns.stop()
    conversation_id, report = blocker.args
    calls = [
        c for made in window.store.tool_calls(conversation_id).values() for c in made
    ]
    assert [c.decision for c in calls] == ["deny"] and calls[0].is_error
    assert report.finish_reason == "cancelled"


def test_the_reference_model_calls_the_tool_by_itself_and_answers_with_its_word(
    make_window, qtbot, quick_preset, tmp_path
):
    """Nothing forced: the shipped model chooses the call, the user allows it."""
    from app.core.modelkit.reference.install import install_reference_model

    save_config(
        {"tools": ServerConfig("tools", command=sys.executable, args=(str(SERVER),))}
    )
    save_prefs(ToolPrefs(new_chats=("tools",)))
    window = make_window()
    with qtbot.waitSignal(window.models.loaded, timeout=60_000):
        window.models.load(str(install_reference_model(tmp_path / "reference")))
    window.current.set_preset(quick_preset(max_tokens=60, thinking=False))
    with qtbot.waitSignal(window.turns.reply_finished, timeout=180_000) as blocker:
        assert window.turns.send("What is the secret word?")
        card = _wait_for_question(qtbot, window)
        assert "'secret_word'" in card.question.text()
        card.buttons[Decision.ALLOW_ONCE].click()
    conversation_id, report = blocker.args
    assert report.tool_calls == 1
    (call,) = [
        c for made in window.store.tool_calls(conversation_id).values() for c in made
    ]
    assert call.tool == "secret_word" and "periwinkle" in call.result
    reply = window.store.messages(conversation_id)[-1]
    assert reply.role == "assistant" and "periwinkle" in reply.content
    window.grab().save(str(_shots(tmp_path) / "reference-model-answered.png"))


def test_always_still_holds_for_the_conversation_after_a_restart(qtbot, tool_window):
    """ "Always for this tool in this conversation" is read back from the stored calls."""
    window = tool_window
    with qtbot.waitSignal(window.turns.reply_finished, timeout=180_000) as blocker:
        assert window.turns.send("What is the secret word?")
        _wait_for_question(qtbot, window).buttons[Decision.ALLOW_ALWAYS].click()
    conversation_id, _ = blocker.args
    # What a restart leaves: the servers stopped, no consent held in memory.
    window.worker.tools.close()
    setup = window.worker.tools.setup_for(conversation_id)
    assert setup is not None and not setup.policy.needs_asking("tools", "secret_word")
    other = window.store.create_conversation("Another chat")
    fresh = window.worker.tools.setup_for(other)
    assert fresh is not None and fresh.policy.needs_asking("tools", "secret_word")
