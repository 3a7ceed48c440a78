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
