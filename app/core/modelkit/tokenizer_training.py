"""Train, offline, the tokenizer that locally built models ship with.

Swapless must build working models without a network (tests, benchmarks, a first run
with no model downloaded), and a model folder that ``mlx_lm.load`` accepts needs a real
Hugging Face tokenizer. This module trains a byte-level BPE with the ``tokenizers``
package on text every Python install has (the standard library's sources and the prose
of its ``pydoc`` topics) and writes ``tokenizer.json`` plus a ChatML
``tokenizer_config.json``. `model_builder` is its only caller.

The pre-tokenization pipeline is exactly the one transformers 5 imposes on
``model_type: qwen2`` (it rebuilds normalizer and pre-tokenizer as ``Qwen2Tokenizer``,
whatever ``tokenizer.json`` says; shared/NOTES-mlx.md). Using it for every architecture
means one trained tokenizer per vocabulary size serves llama and qwen2 alike, and
``tokenizer.json`` and the loaded tokenizer always agree.

Training is deterministic for a given Python version: the files are read in sorted
order and the text is capped at `CORPUS_CHAR_LIMIT` characters.
"""

from __future__ import annotations

import itertools
import json
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# Trained first, so they get ids 0, 1, 2 in every vocabulary.
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

# Qwen2's split regex, verbatim from transformers' ``tokenization_qwen2.py``: it must
# match character for character, or mlx_lm.load tokenizes qwen2 models differently.
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# transformers 5 imposes Qwen3.5's own split on ``qwen3_5*`` model types (its
# ``Qwen3_5Tokenizer``): letters absorb combining marks (``\p{M}``). Verbatim too.
QWEN3_5_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"""
    r""" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# ~4 MB: enough for 16K merges, and an 8K vocabulary trains in about a second on two
# cores. All of the prose and most of the top-level stdlib modules fit.
CORPUS_CHAR_LIMIT = 4_000_000

# ChatML as Qwen2.5 writes it. Roles are rendered one by one, so a system message in
# the middle of a conversation comes out like any other turn.
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

# (vocab size, split regex) -> serialized trained tokenizer. A string, not a Tokenizer,
# so no caller can mutate the cached copy; a test session trains each size once.
_TRAINED: dict[tuple[int, str], str] = {}


def corpus_files() -> list[Path]:
    """Return the standard library's top-level ``.py`` files in sorted order.

    Only the top level: ``site-packages`` lives under the same folder and differs from
    one machine to the next.
    """
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return sorted(stdlib.glob("*.py"))


def iter_corpus(limit: int = CORPUS_CHAR_LIMIT) -> Iterator[str]:
    """Yield training texts, prose first, until ``limit`` characters are reached.

    Args:
        limit: The maximum number of characters yielded in total.

    Yields:
        One document (a pydoc topic or a source file) at a time.
    """
    # Prose keeps the merges from being all about Python code.
    from pydoc_data.topics import topics

    documents = itertools.chain(
        (topics[key] for key in sorted(topics)),
        (path.read_text(encoding="utf-8", errors="replace") for path in corpus_files()),
    )
    remaining = limit
    for text in documents:
        if remaining <= 0:
            return
        yield text[:remaining]
        remaining -= len(text)


def _empty_tokenizer(split_regex: str = QWEN2_PRETOKENIZE_REGEX) -> Tokenizer:
    """Return an untrained BPE with Qwen2's normalizer, pre-tokenizer and decoder."""
    tokenizer = Tokenizer(BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split_regex), behavior="isolated", invert=False),
            # The split above already did the regex work; the ByteLevel step only maps
            # bytes to printable characters.
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def train_tokenizer(
    vocab_size: int, split_regex: str = QWEN2_PRETOKENIZE_REGEX
) -> Tokenizer:
    """Return a byte-level BPE tokenizer of ``vocab_size`` tokens, trained offline.

    The first call for a size trains (about a second for 8K tokens); later calls copy
    the cached result.

    Args:
        vocab_size: The number of tokens, special tokens and the 256 byte tokens
            included. At least 512.
        split_regex: The pre-tokenizer's split, the one transformers will impose for
            the model type (`QWEN2_PRETOKENIZE_REGEX` or `QWEN3_5_PRETOKENIZE_REGEX`).

    Returns:
        A fresh `tokenizers.Tokenizer` the caller may modify.

    Raises:
        ValueError: If ``vocab_size`` is too small to hold the byte alphabet.
    """
    if vocab_size < 512:
        raise ValueError(f"vocab_size must be at least 512, got {vocab_size}")
    key = (vocab_size, split_regex)
    if key not in _TRAINED:
        tokenizer = _empty_tokenizer(split_regex)
        trainer = BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIAL_TOKENS),
            # Every byte gets a token, so any text encodes without an unknown token.
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tokenizer.train_from_iterator(iter_corpus(), trainer=trainer)
        _TRAINED[key] = tokenizer.to_str()
    return Tokenizer.from_str(_TRAINED[key])


def tokenizer_config(model_max_length: int) -> dict:
    """Return the ``tokenizer_config.json`` contents for a trained tokenizer.

    Args:
        model_max_length: The model's context length, for transformers' warnings.

    Returns:
        A JSON-serializable dict.
    """
    return {
        # Without it transformers 5 may pick a slow or model-specific class; with it a
        # llama folder keeps tokenizer.json exactly as written (shared/NOTES-mlx.md).
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHATML_TEMPLATE,
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
    }


def write_tokenizer(
    folder: Path,
    vocab_size: int,
    model_max_length: int,
    split_regex: str = QWEN2_PRETOKENIZE_REGEX,
) -> Tokenizer:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``folder``.

    Args:
        folder: An existing folder.
        vocab_size: The tokenizer's vocabulary size (see `train_tokenizer`).
        model_max_length: The model's context length.
        split_regex: The pre-tokenizer's split (see `train_tokenizer`).

    Returns:
        The tokenizer that was written, to look up special-token ids.
    """
    tokenizer = train_tokenizer(vocab_size, split_regex)
    tokenizer.save(str(folder / "tokenizer.json"))
    with open(folder / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(model_max_length), f, indent=2)
    return tokenizer
