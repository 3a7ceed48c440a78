"""The tool-calling tiny model, built once per session."""

from __future__ import annotations

import pytest

from tests.core.tools.tool_model import make_tool_model


@pytest.fixture(scope="session")
def tool_model_dir(tmp_path_factory):
    """A tiny random-weight qwen2 model with a Qwen3-style tool template."""
    return make_tool_model(tmp_path_factory.mktemp("models") / "tiny-tools")
