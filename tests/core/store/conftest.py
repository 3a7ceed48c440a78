"""Fixtures for the store tests: a fake clock and an open store in a temp folder."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.core.store import Store


class FakeClock:
    """A clock that moves one second forward every time it is read.

    Timestamps are then distinct and predictable, so "newest first" ordering can be
    tested without sleeping.
    """

    def __init__(
        self, start: datetime = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    ) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def new_clock() -> type[FakeClock]:
    """The `FakeClock` class, for tests that need a second clock from the start."""
    return FakeClock


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "store" / "swapless.db"


@pytest.fixture
def store(db_path, clock):
    with Store.open(db_path, clock=clock) as opened:
        yield opened


@pytest.fixture
def conversation_id(store) -> int:
    return store.create_conversation(
        "Test chat",
        model="mlx-community/tiny",
        preset="Balanced",
        settings={"temperature": 0.7},
        system_prompt="Be brief.",
    )
