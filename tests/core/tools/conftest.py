"""The tool-calling tiny model, built once per session, and its llguidance tokenizer."""

from __future__ import annotations

import llguidance
import pytest

from app.core.tools.grammar import Marker
from tests.core.tools.tool_model import make_tool_model


@pytest.fixture(scope="session")
def tool_model_dir(tmp_path_factory):
    """A tiny random-weight qwen2 model with a Qwen3-style tool template."""
    return make_tool_model(tmp_path_factory.mktemp("models") / "tiny-tools")


@pytest.fixture(scope="module")
def lltok(tool_model_dir):
    """The tiny tool model's tokenizer, as llguidance reads it."""
    text = (tool_model_dir / "tokenizer.json").read_text(encoding="utf-8")
    return llguidance.LLTokenizer(text)


@pytest.fixture(scope="module")
def markers(lltok):
    """``<tool_call>`` and ``</tool_call>`` as markers (tokens of their own)."""
    # The tiny tool model's two special tokens, standing for each format's markers.
    start, end = (lltok.tokenize_str(t) for t in ("<tool_call>", "</tool_call>"))
    assert len(start) == len(end) == 1
    return Marker("<tool_call>", start[0]), Marker("</tool_call>", end[0])
