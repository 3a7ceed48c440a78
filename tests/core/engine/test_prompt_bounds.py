"""Bounds of the prompt tokenizer: a safe lower bound without tokenizing; huge texts
are never memoised (three 8 MiB requests left 3.8 GiB resident after their 400s)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlx_lm.tokenizer_utils import load as load_tokenizer

from app.core.engine.prompt_tokenizer import MAX_CACHED_CHARS, PromptTokenizer
from app.core.modelkit.tokenizer_training import corpus_files


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir) -> PromptTokenizer:
    return PromptTokenizer(load_tokenizer(Path(tiny_model_dir)))


def test_the_lower_bound_never_exceeds_the_real_count(tokenizer):
    texts = [
        path.read_text(encoding="utf-8", errors="replace") for path in corpus_files()
    ]
    texts += [
        "     " * 1000,
        "a" * 5000,
        "é" * 3000,
        "e\u0301" * 3000,
        "<|im_start|>" * 50,
    ]
    assert tokenizer.max_token_chars > 0
    for text in texts:
        assert tokenizer.fewest_tokens(text) <= len(tokenizer.encode(text))


def test_huge_texts_are_counted_but_not_kept(tokenizer):
    huge = "token " * (MAX_CACHED_CHARS // 5)
    assert len(huge) > MAX_CACHED_CHARS
    assert tokenizer.count(huge) > 0
    tokenizer.render([{"role": "user", "content": huge}])
    assert huge not in tokenizer._counts._items
    assert not any(huge in str(key) for key in tokenizer._renders._items)
    small = "a short message"
    tokenizer.count(small)
    assert small in tokenizer._counts._items


def test_counting_in_pieces_is_exact_when_short_and_a_lower_bound_when_long(
    tokenizer, monkeypatch
):
    from app.core.engine.prompt_tokenizer import COUNT_PIECE_CHARS

    short = "a short message of a few words"
    assert tokenizer.count_at_least(short, 1) == tokenizer.count(short)
    text = " ".join(f"word{i % 97}, and more" for i in range(20_000))
    assert len(text) > 3 * COUNT_PIECE_CHARS
    exact = len(tokenizer.encode(text))
    whole = tokenizer.count_at_least(text, 10**9)
    assert exact - 20 <= whole <= exact
    calls: list[int] = []
    real_encode = tokenizer.encode
    monkeypatch.setattr(
        tokenizer,
        "encode",
        lambda piece: calls.append(len(piece)) or real_encode(piece),
    )
    assert tokenizer.count_at_least(text, 100) > 100
    assert calls == [calls[0]] and calls[0] <= COUNT_PIECE_CHARS  # stopped at once
    assert text not in tokenizer._counts._items
