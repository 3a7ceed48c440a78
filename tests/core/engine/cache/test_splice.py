"""Splicing a live cache: exact where it must be, consistent positions, both architectures."""

from __future__ import annotations

import copy

import mlx.core as mx
import pytest

from app.core.engine.cache.conversation_cache import (
    ConversationCache,
    SpliceUnsupported,
)
from app.core.engine.loader import load_model_folder
from app.core.presets.generation_settings import KVSettings


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def loaded(request, tiny_model_dir, tiny_qwen2_model_dir):
    folder = tiny_model_dir if request.param == "llama" else tiny_qwen2_model_dir
    return load_model_folder(folder)


def encode(loaded, text):
    return list(loaded.tokenizer.encode(text, add_special_tokens=False))


def fill(loaded, cache, ids):
    loaded.model(mx.array(ids)[None], cache=cache.layers)
    cache.token_ids = cache.token_ids + list(ids)
    cache.sync_positions()


def next_logits(loaded, cache, token):
    return loaded.model(mx.array([token])[None], cache=cache.layers)[0, -1]


def build(loaded, bits, parts):
    cache = ConversationCache(loaded.model, KVSettings(bits=bits))
    fill(loaded, cache, parts[0])
    if bits != 16:
        cache.layers = [
            layer.to_quantized(group_size=64, bits=bits) for layer in cache.layers
        ]
    for part in parts[1:]:
        fill(loaded, cache, part)
    return cache


@pytest.mark.parametrize("bits", [16, 8, 4])
def test_splicing_the_same_tokens_back_is_exact(loaded, bits):
    system = encode(loaded, "<|im_start|>system\nYou are terse.<|im_end|>\n")
    dropped = encode(
        loaded, "<|im_start|>user\nTell me about lists and tuples.<|im_end|>\n"
    )
    kept = encode(
        loaded, "<|im_start|>user\nAnd dicts?<|im_end|>\n<|im_start|>assistant\n"
    )
    cache = build(loaded, bits, [system, dropped + kept[:-1]])
    reference = copy.deepcopy(cache.layers)
    expected = loaded.model(mx.array(kept[-1:])[None], cache=reference)[0, -1]

    computed = cache.splice(len(system), len(system) + len(dropped), dropped)
    assert computed == len(dropped)
    assert cache.offset == len(system) + len(dropped) + len(kept) - 1
    assert mx.abs(next_logits(loaded, cache, kept[-1]) - expected).max().item() < 1e-5


@pytest.mark.parametrize("bits", [16, 8])
def test_a_shorter_summary_keeps_positions_and_the_cache_keeps_working(loaded, bits):
    system = encode(loaded, "<|im_start|>system\nYou are terse.<|im_end|>\n")
    dropped = encode(loaded, "<|im_start|>user\n" + "word " * 60 + "<|im_end|>\n")
    kept = encode(
        loaded, "<|im_start|>user\nAnd dicts?<|im_end|>\n<|im_start|>assistant\n"
    )
    summary = encode(loaded, "<|im_start|>system\nSummary: words.<|im_end|>\n")
    cache = build(loaded, bits, [system, dropped + kept])
    next_position = cache.next_position

    cache.splice(len(system), len(system) + len(dropped), summary)
    assert cache.offset == len(system) + len(summary) + len(kept)
    assert cache.next_position == next_position  # later tokens keep counting from there
    assert cache.token_ids == system + summary + kept
    first_kept = len(system) + len(summary)
    assert cache.positions[first_kept] == len(system) + len(dropped)
    assert (
        cache.positions[first_kept - 1] == cache.positions[first_kept] - 1
    )  # adjacent
    assert cache.positions[: len(system)] == list(range(len(system)))
    assert cache.layers[0].gap == len(dropped) - len(summary)

    # Generation continues on the spliced cache, and a second trim works as well.
    token = int(mx.argmax(next_logits(loaded, cache, kept[-1])).item())
    assert 0 <= token < loaded.model.args.vocab_size
    cache.trim_to(cache.offset - 1)  # drop what we just fed, as the next turn would
    more = encode(loaded, "<|im_start|>user\nMore?<|im_end|>\n")
    fill(loaded, cache, more)
    cache.splice(len(system), first_kept + 3, summary[:5])
    assert cache.offset == len(system) + 5 + len(kept) - 3 + len(more)
    assert sorted(cache.positions) == cache.positions  # positions stay increasing


def test_a_summary_longer_than_the_dropped_span_is_refused(loaded):
    system = encode(loaded, "<|im_start|>system\nHi.<|im_end|>\n")
    dropped = encode(loaded, "<|im_start|>user\nA<|im_end|>\n")
    cache = build(loaded, 16, [system, dropped + encode(loaded, "x y z")])
    with pytest.raises(SpliceUnsupported, match="longer than the span"):
        cache.splice(len(system), len(system) + len(dropped), dropped * 3)


def test_trimming_back_across_a_splice_restarts_positions_so_a_rebuild_is_exact(loaded):
    system = encode(loaded, "<|im_start|>system\nYou are terse.<|im_end|>\n")
    dropped = encode(loaded, "<|im_start|>user\n" + "word " * 40 + "<|im_end|>\n")
    kept = encode(loaded, "<|im_start|>user\nAnd dicts?<|im_end|>\n")
    summary = encode(loaded, "<|im_start|>system\nSummary: words.<|im_end|>\n")
    cache = build(loaded, 16, [system, dropped + kept])
    cache.splice(len(system), len(system) + len(dropped), summary)
    assert cache.next_position > cache.offset  # a gap after the splice

    cache.trim_to(len(system))  # what a rebuild does: keep the system prompt only
    assert cache.next_position == len(system)
    rest = summary + kept
    fill(loaded, cache, rest[:-1])
    rebuilt = next_logits(loaded, cache, rest[-1])
    fresh = build(loaded, 16, [system, rest[:-1]])
    assert mx.abs(rebuilt - next_logits(loaded, fresh, rest[-1])).max().item() < 1e-5
