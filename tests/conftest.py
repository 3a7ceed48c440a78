"""Fixtures shared by the whole suite.

Every test runs with ``SWAPLESS_HOME`` pointed at its own temporary folder, so no test
ever reads or writes a real user's data. Models are built once per session, with the
same code as ``swapless make-model``.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def swapless_home(tmp_path, monkeypatch):
    """Point all Swapless data at a fresh temporary folder for this test."""
    home = tmp_path / "swapless-home"
    home.mkdir()
    monkeypatch.setenv("SWAPLESS_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny llama-architecture model in real mlx-lm format (random weights)."""
    from app.core.engine.model_builder import build_model

    folder = tmp_path_factory.mktemp("models") / "tiny"
    build_model(folder, shape="tiny", bits=16, seed=0)
    return folder


@pytest.fixture(scope="session")
def tiny_qwen2_model_dir(tmp_path_factory):
    """The tiny shape with the qwen2 architecture (q/k/v biases, Qwen2 tokenizer)."""
    from app.core.engine.model_builder import build_model

    folder = tmp_path_factory.mktemp("models") / "tiny-qwen2"
    build_model(folder, shape="tiny", bits=16, seed=0, arch="qwen2")
    return folder


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    """A real engine with the tiny model loaded, shared by one test module."""
    from app.core.engine.engine import Engine

    engine = Engine()
    engine.load(tiny_model_dir)
    yield engine
    engine.shutdown()
