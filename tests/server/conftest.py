"""A real engine on the tiny model, and real servers on free loopback ports."""

from __future__ import annotations

import contextlib

import pytest

from app.core.engine.engine import Engine
from app.core.presets.presets import get_preset
from app.server.config import ServerConfig
from app.server.local_server import LocalServer

SYSTEM = "You are Swapless test bot. Always answer briefly."


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    engine = Engine()
    engine.load(tiny_model_dir)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def model_id(tiny_model_dir):
    return tiny_model_dir.name


def _preset(**changes):
    return get_preset("chat").with_changes(
        **{
            "temperature": 0.0,
            "max_tokens": 16,
            "summary_mode": "extractive",
            **changes,
        }
    )


@pytest.fixture
def make_preset():
    """Builds the chat preset with greedy, short replies and extractive summaries."""
    return _preset


@pytest.fixture
def serve(engine):
    """Start a `LocalServer` on a free loopback port; stopped after the test."""
    servers = []

    def start(preset=None, pressure=lambda: "normal", **config):
        server = LocalServer(
            engine,
            ServerConfig(preset=preset or _preset(), port=0, **config),
            pressure=pressure,
        )
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        with contextlib.suppress(Exception):
            server.forget_conversations()
        server.stop()
