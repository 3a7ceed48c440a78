"""Fixtures of the chat tests (the tiny model's ``engine`` is in tests/conftest.py)."""

from __future__ import annotations

import pytest

from app.core.store import Store


@pytest.fixture
def store(tmp_path):
    """A store in this test's temporary folder."""
    store = Store.open(tmp_path / "chat.db")
    yield store
    store.close()


@pytest.fixture(scope="module")
def tool_engine(thinking_model_dir):
    """An engine whose model speaks the reference tool-call format (random weights).

    When the reference model calls tools by itself, load it here instead and let
    `tool_choices` answer ``auto``: the tool tests need no other change.
    """
    from app.core.engine.engine import Engine

    engine = Engine()
    engine.load(thinking_model_dir())
    yield engine
    engine.shutdown()


@pytest.fixture
def tool_choices():
    """How a turn makes the model call a tool: ``choose(name)`` → (first, later).

    The random-weight model cannot choose a tool, so its first reply is constrained
    (llguidance, through the engine's own tool hooks) to call the named tool and
    later replies may not call any. A model that calls tools by itself returns
    ``ToolChoice("auto")`` for both.
    """
    from app.core.tools.tool_specs import ToolChoice

    def choose(name: str) -> tuple[ToolChoice, ToolChoice]:
        return ToolChoice("named", name), ToolChoice("none")

    return choose
