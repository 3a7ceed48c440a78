"""Segments follow the loaded model's trained context; refusals name the real limit.

The shipped reference model was trained for 4,096 tokens while the built-in presets
cut documents at up to 8,192: every preset must still read a long document with it,
and a reading that cannot fit says it is the model's context (not this machine's
memory) and names the controls of wherever the refusal is read.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.core.engine.engine import Engine
from app.core.errors import BudgetError
from app.core.longdoc import LongDocumentRunner
from app.core.longdoc.plan.mode import Controls
from app.core.longdoc.reading.reader import DocumentText
from app.core.presets.presets import builtin_presets, get_preset
from app.core.store import Store

TRAINED = 4096
WINDOW = Controls(
    segments="Read in segments on the card",
    segment_tokens="Segment size in Edit preset…",
    notes_tokens="Summary length in Edit preset…",
    max_tokens="Reply length in Edit preset…",
)


@pytest.fixture(scope="module")
def engine():
    from app.core.modelkit.reference.install import committed_folder

    engine = Engine()
    engine.load(committed_folder())
    return engine


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "swapless.db") as store:
        yield store


def _document(words: int) -> DocumentText:
    text = " ".join(f"the river {i} runs past the castle." for i in range(words // 7))
    return DocumentText(
        name="long.txt",
        path=None,
        size_bytes=len(text),
        sha256=f"{words:064x}",
        encoding="utf-8",
        text=text,
        kind="text",
    )


def _runner(engine, store, preset, controls=None) -> LongDocumentRunner:
    extra = {} if controls is None else {"controls": controls}
    return LongDocumentRunner(engine, store, preset, speeds=None, **extra)


@pytest.mark.parametrize("name", sorted(builtin_presets()))
def test_every_built_in_preset_reads_a_long_document_with_the_reference_model(
    engine, store, name
):
    preset = get_preset(name)
    assert engine.trained_context() == TRAINED
    # "auto", as the app and the command read by default.
    plan = _runner(engine, store, preset).plan(_document(30_000))
    assert plan.mode == "segments" and len(plan.segments) > 1
    # Every step (prompt, notes, segment, new notes) stays inside the trained context.
    assert plan.choice.context_tokens <= TRAINED
    assert max(s.tokens for s in plan.segments) <= plan.preset_segment_tokens
    if preset.segment_tokens > plan.preset_segment_tokens:
        assert "not the preset's" in plan.choice.reason
        assert "the 4,096 tokens the model was trained for" in plan.choice.reason


def test_a_segment_size_that_fits_is_kept(engine, store):
    preset = replace(get_preset("chat"), segment_tokens=1024)
    plan = _runner(engine, store, preset).plan(_document(12_000), mode="segments")
    assert plan.preset_segment_tokens == 1024
    assert "not the preset's" not in plan.choice.reason


def test_a_refusal_names_the_models_context_and_the_windows_controls(engine, store):
    # Notes this long leave no room for any segment inside 4,096 tokens.
    preset = replace(get_preset("chat"), summary_max_tokens=2000)
    with pytest.raises(BudgetError) as info:
        _runner(engine, store, preset, WINDOW).plan(_document(12_000), mode="segments")
    message = str(info.value)
    assert "does not fit in the model's context" in message
    assert "the 4,096 tokens the model was trained for" in message
    assert "this machine" not in message
    assert "Summary length in Edit preset…" in message
    assert "--" not in message
    # Segments are already used: the advice does not say to use them.
    assert "Read in segments" not in message


def test_a_whole_read_refusal_from_the_command_names_its_options(engine, store):
    preset = get_preset("chat")
    with pytest.raises(BudgetError) as info:
        _runner(engine, store, preset).plan(_document(12_000), mode="whole")
    message = str(info.value)
    assert message.startswith("Reading it whole does not fit in the model's context")
    assert "--mode segments" in message and "--max-tokens" in message
