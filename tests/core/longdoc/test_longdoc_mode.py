"""Whole or segments: every branch of the choice, from numbers alone, plus the KV sizing."""

from __future__ import annotations

import pytest

from app.core.budget import (
    BudgetSettings,
    kv_bytes_at,
    max_safe_context,
    read_geometry,
)
from app.core.errors import BudgetError
from app.core.longdoc.plan.mode import ContextNeeds, choose_mode
from app.core.longdoc.plan.sizing import kv_sizing


def needs(whole_tokens: int, segment_context: int = 1_000) -> ContextNeeds:
    return ContextNeeds(
        document_tokens=whole_tokens - 200,
        whole_tokens=whole_tokens,
        segment_tokens=512,
        segments=7,
        segment_context=segment_context,
    )


def choose(requested, whole_tokens, *, safe=100_000, max_context=32_768, **kwargs):
    return choose_mode(
        requested,
        needs(whole_tokens, **kwargs),
        max_safe_context=safe,
        max_context=max_context,
        segmenting=True,
        kv_bits=4,
        kv_bytes=lambda tokens: tokens * 1024,
    )


def test_auto_reads_whole_up_to_half_the_safe_context():
    at_half = choose("auto", 20_000, safe=40_000)
    assert at_half.mode == "whole"
    assert at_half.context_tokens == 20_000
    for number in ("20,000 tokens", "50%", "40,000", "32,768", "19.5 MiB", "4-bit"):
        assert number in at_half.reason
    past_half = choose("auto", 20_001, safe=40_000)
    assert past_half.mode == "segments"
    assert past_half.context_tokens == 1_000
    assert "more than 50% of the safe limit of 40,000" in past_half.reason
    assert "7 segment(s) of up to 512 tokens" in past_half.reason


def test_auto_reads_in_segments_past_the_presets_max_context():
    choice = choose("auto", 9_000, safe=10_000_000, max_context=8_192)
    assert choice.mode == "segments"
    assert "max_context of 8,192" in choice.reason
    assert "50%" not in choice.reason  # memory was not the reason
    assert choose("auto", 8_192, safe=10_000_000, max_context=8_192).mode == "whole"


def test_without_a_memory_limit_only_max_context_decides():
    whole = choose("auto", 30_000, safe=None)
    assert whole.mode == "whole"
    assert whole.reason.endswith("within the preset's max_context of 32,768.")
    segments = choose("auto", 40_000, safe=None)
    assert segments.mode == "segments"
    assert "more than the preset's max_context of 32,768;" in segments.reason
    assert "safe limit" not in whole.reason + segments.reason


def test_forced_modes_are_kept_when_they_fit_and_refused_when_they_do_not():
    whole = choose("whole", 30_000, safe=40_000)  # past the comfort share: still fits
    assert whole.mode == "whole" and "as asked" in whole.reason
    with pytest.raises(
        BudgetError, match="40,001 tokens of context.*safe limit of 40,000"
    ):
        choose("whole", 40_001, safe=40_000)
    assert choose("segments", 500).mode == "segments"
    with pytest.raises(BudgetError, match="--segment-tokens"):
        choose("segments", 500, safe=900, segment_context=1_000)
    with pytest.raises(BudgetError, match="safe limit of 900"):
        choose("auto", 5_000, safe=900, segment_context=1_000)


def test_a_preset_that_does_not_segment_reads_whole_when_it_can_else_in_segments():
    def no_segments(whole_tokens):
        return choose_mode(
            "auto",
            needs(whole_tokens),
            max_safe_context=40_000,
            max_context=8_192,
            segmenting=False,
            kv_bits=8,
            kv_bytes=lambda tokens: tokens,
        )

    choice = no_segments(30_000)
    assert choice.mode == "whole" and "does not segment" in choice.reason
    # Past the safe limit a whole read cannot be: segments are read instead of refusing.
    longer = no_segments(50_000)
    assert longer.mode == "segments" and "reads whole when it can" in longer.reason
    assert "more than the safe limit of 40,000 tokens" in longer.reason


def test_unknown_modes_are_refused():
    with pytest.raises(ValueError, match="auto, whole, segments"):
        choose("halves", 1_000)


def test_sizing_matches_the_budget_with_one_allocation_step_of_growth(tiny_model_dir):
    sizing = kv_sizing(
        tiny_model_dir,
        weights_bytes=10 * 2**20,
        activation_dtype="float32",
        bits=4,
        group=64,
        total_memory=8 * 2**30,
    )
    geometry = read_geometry(tiny_model_dir)
    # 2 layers x 2 KV heads x (K and V) x (128 x 4 bits + 2 fp32 per 64-group).
    assert kv_bytes_at(geometry, 256, 4, 64, act_dtype_bytes=4) == 256 * 640
    # Grown from a cached prefix of odd length, a cache allocates up to 255 tokens
    # past what it holds: a 1-token prefix plus a 300-token chunk allocates 1 + 512.
    assert sizing.kv_bytes(1) == 256 * 640
    assert sizing.kv_bytes(301) == 768 * 640 >= (1 + 512) * 640
    assert sizing.kv_bytes(257) == 512 * 640
    assert sizing.kv_bytes(0) == 0
    # Memory: (8 GiB x 0.75 - 2 GiB - 10 MiB) x 0.6 / 640 B, in whole 256-token steps;
    # the tiny model was trained for 16,384, which is the smaller.
    memory = max_safe_context(
        8 * 2**30, 10 * 2**20, geometry, 4, 64, BudgetSettings(), act_dtype_bytes=4
    )
    assert memory == 4_016_640
    assert geometry.max_position_embeddings == 16_384
    assert sizing.max_safe_context == 16_384
    with pytest.raises(ValueError, match="float32, float16, bfloat16"):
        kv_sizing(tiny_model_dir, 1, "int8", 4, 64, total_memory=2**33)


def test_sizing_stops_at_the_context_the_model_was_trained_for(
    tiny_model_dir, tmp_path
):
    import json
    import shutil

    folder = tmp_path / "short-trained"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = 4096
    (folder / "config.json").write_text(json.dumps(config))
    sizing = kv_sizing(folder, 10 * 2**20, "float32", 4, 64, total_memory=8 * 2**30)
    # Memory alone would allow 4,016,640 tokens (the test above); the chat stops at
    # the trained context, so a plan must too.
    assert sizing.max_safe_context == 4096
