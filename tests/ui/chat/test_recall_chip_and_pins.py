"""The recall chip on a user message, and pinning from the message's Pin button."""

from __future__ import annotations

import pytest

from app.core.presets.presets import get_preset
from app.core.store import Store
from app.core.store.records import RecalledMessage
from app.ui.chat.chat_view import ChatView
from app.ui.chat.message_view import MessageView
from app.ui.chat.pin_controller import PinController


@pytest.fixture
def store(tmp_path):
    store = Store.open(tmp_path / "ui.db")
    yield store
    store.close()


def _conversation(store, max_context=4096):
    preset = get_preset("chat").with_changes(max_context=max_context)
    return store.create_conversation(
        model="m", preset="chat", settings=preset.to_dict()
    )


def test_a_user_message_with_recalled_originals_shows_the_chip(qtbot, store):
    conversation = _conversation(store)
    first = store.add_message(conversation, "user", "My locker number is 4417.")
    reply = store.add_message(conversation, "assistant", "Noted: it is 4417.")
    recalled = (
        RecalledMessage(first, "user", "My locker number is 4417."),
        RecalledMessage(reply, "assistant", "Noted: it is 4417.", cut=True),
    )
    asked = store.add_message(conversation, "user", "Locker?", recalled=recalled)
    view = MessageView.from_message(store.get_message(asked), theme=_theme())
    qtbot.addWidget(view)
    view.show()
    chip = view.recall_chip
    assert chip is not None
    assert chip.button.text() == "Recalled 2 earlier messages (one cut to fit)"
    assert not chip.originals.isVisible()
    chip.button.click()
    assert chip.originals.isVisible()
    assert "My locker number is 4417." in chip.originals.text()
    plain = MessageView.from_message(store.get_message(first), theme=_theme())
    qtbot.addWidget(plain)
    assert plain.recall_chip is None


def _theme():
    from app.core.text.markdown_html import LIGHT_THEME

    return LIGHT_THEME


def test_the_pin_button_pins_and_a_pin_too_large_is_refused_in_words(qtbot, store):
    conversation = _conversation(store, max_context=1024)
    short = store.add_message(conversation, "user", "My locker is 4417.")
    long = store.add_message(conversation, "assistant", "word " * 2000)
    chat = ChatView()
    qtbot.addWidget(chat)
    pins = PinController(store, chat)
    chat.show_conversation(store.messages(conversation), [])
    views = {v.message_id: v for v in chat.message_views()}
    with qtbot.waitSignal(pins.pinned):
        views[short].pin_button.click()
    assert store.get_message(short).pinned
    assert views[short].pin_button.text() == "Pinned"
    with qtbot.waitSignal(pins.refused) as refused:
        views[long].pin_button.click()
    assert f"Message {long} cannot be pinned" in refused.args[0]
    assert not store.get_message(long).pinned
    assert not views[long].pin_button.isChecked()
