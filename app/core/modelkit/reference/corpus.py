"""The reference model's training data: offline text plus synthetic recall tasks.

Text: the prose of Python's ``pydoc`` topics and the standard library's top-level
modules, the same sources the tokenizer is trained on, so every Python install has it
and nothing is downloaded. Documents are split into train and held-out by a hash of
their name (about one in ten held out), so the held-out perplexity is measured on
files the model never saw. Debian's /usr/share/doc was left out on purpose: its
contents differ from one machine to the next, and the training must be reproducible
from the seed.

Recall tasks (`app.core.quality.recall_tasks`) are rendered as ChatML, exactly as the
tokenizer's chat template renders them, with filler cut from the training text. Each
training sequence is one task (or a text window) followed by text up to the length.
"""

from __future__ import annotations

import math
import random
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from app.core.modelkit.tokenizer_training import ENDOFTEXT, corpus_files
from app.core.quality import recall_tasks

HELD_OUT_MODULUS = 10
# Shares of the training mix; text fills the other half.
TASK_MIX = (
    ("pass_key", 0.2),
    ("chat_fact", 0.12),
    ("key_value", 0.1),
    ("copy", 0.08),
)
TEXT_SHARE = 1.0 - sum(share for _, share in TASK_MIX)


@dataclass(frozen=True)
class Document:
    """One source text.

    Attributes:
        name: A stable name (``topic:NAME`` or the file name).
        text: Its contents.
    """

    name: str
    text: str

    @property
    def held_out(self) -> bool:
        """True for the tenth of documents kept out of training."""
        return zlib.crc32(self.name.encode()) % HELD_OUT_MODULUS == 0


def documents() -> list[Document]:
    """Every document, in a fixed order: pydoc topics, then stdlib modules."""
    from pydoc_data.topics import topics

    docs = [Document(f"topic:{key}", topics[key]) for key in sorted(topics)]
    for path in corpus_files():
        docs.append(
            Document(path.name, path.read_text(encoding="utf-8", errors="replace"))
        )
    return docs


def render_chatml(messages) -> str:
    """Render messages as the ChatML template does (`tokenizer_training`)."""
    return "".join(
        f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages
    )


class TokenStream:
    """Token ids of a set of documents joined by ``<|endoftext|>``, and filler from them.

    Args:
        tokenizer: A `tokenizers.Tokenizer`.
        docs: The documents.
    """

    def __init__(self, tokenizer, docs: list[Document]):
        self.tokenizer = tokenizer
        eot = tokenizer.token_to_id(ENDOFTEXT)
        encoded = tokenizer.encode_batch([d.text for d in docs])
        ids: list[int] = []
        for item in encoded:
            ids.extend(item.ids)
            ids.append(eot)
        self.ids = np.array(ids, dtype=np.int32)
        self.eot = eot

    def window(self, length: int, rng: random.Random) -> np.ndarray:
        """A random window of ``length`` consecutive ids."""
        start = rng.randrange(0, len(self.ids) - length)
        return self.ids[start : start + length]

    def filler(self, tokens: int, rng: random.Random) -> str:
        """About ``tokens`` tokens of text (no special tokens), decoded."""
        while True:
            ids = self.window(max(tokens, 1), rng)
            if self.eot not in ids:
                return self.tokenizer.decode(ids.tolist())


def sample_task(
    stream: TokenStream, rng: random.Random, kind: str, max_distance: int
) -> recall_tasks.RecallTask:
    """One recall task of ``kind`` with a random distance up to ``max_distance``."""
    filler = stream.filler
    # Log-uniform distances: short and long gaps both get their share.
    distance = int(round(math.exp(rng.uniform(math.log(8), math.log(max_distance)))))
    if kind == "pass_key":
        return recall_tasks.pass_key_task(rng, distance, filler)
    if kind == "chat_fact":
        return recall_tasks.chat_fact_task(
            rng, distance, filler, system_prompt=rng.choice(SYSTEM_PROMPTS)
        )
    if kind == "key_value":
        return recall_tasks.key_value_task(
            rng, rng.randint(4, 40), filler, distance=distance // 4
        )
    if kind == "copy":
        return recall_tasks.copy_task(rng, min(distance, max_distance // 2), filler)
    raise ValueError(f"unknown task kind {kind!r}")


# The system prompts of the built-in presets, so chat tasks look like the app's chats.
SYSTEM_PROMPTS = (
    "",
    "You are a helpful assistant.",
    "You are an expert programmer. Answer with correct, idiomatic code and brief "
    "explanations.",
    "You are precise. Quote exactly and show your working.",
)


def training_sequences(
    stream: TokenStream, length: int, seed: int, max_distance: int
) -> Iterator[np.ndarray]:
    """Yield training sequences of ``length + 1`` ids forever, deterministic from ``seed``.

    Half are plain text windows; the rest start with one rendered recall task and are
    filled up with text after an ``<|endoftext|>``.
    """
    rng = random.Random(seed)
    kinds = [kind for kind, _ in TASK_MIX]
    weights = [share for _, share in TASK_MIX]
    while True:
        if rng.random() < TEXT_SHARE:
            yield stream.window(length + 1, rng)
            continue
        kind = rng.choices(kinds, weights)[0]
        task = sample_task(stream, rng, kind, max_distance)
        ids = stream.tokenizer.encode(render_chatml(task.messages)).ids
        if len(ids) > length + 1:
            continue  # filler ran long; draw another
        rest = length + 1 - len(ids) - 1
        tail = stream.window(rest, rng) if rest > 0 else np.zeros(0, np.int32)
        yield np.concatenate(
            [np.array(ids, np.int32), np.array([stream.eot], np.int32), tail]
        )[: length + 1]


# The format stage's mix (`format_tasks`): text keeps the prose, recall tasks keep the
# circuit's use (now with and without reasoning), tool tasks teach the calls.
FORMAT_MIX = (
    ("text", 0.2),
    ("pass_key", 0.15),
    ("chat_fact", 0.1),
    ("key_value", 0.05),
    ("copy", 0.05),
    ("tool", 0.45),
)
# The tool stage's mix (after the format stage): mostly tool conversations, with enough
# recall and text that pass keys and perplexity hold (docs/reference-model.md).
TOOL_STAGE_MIX = (
    ("text", 0.15),
    ("pass_key", 0.12),
    ("chat_fact", 0.08),
    ("key_value", 0.02),
    ("copy", 0.05),
    ("tool", 0.58),
)
# Share of chat sequences rendered with the thinking switch on.
THINKING_SHARE = 0.6


# Weight of a conversation's prompt tokens in the format stage's loss; the replies
# (what the model must write) weigh 1. The tools' JSON and the question are most of a
# tool conversation: at full weight they drowned the few tokens of the call itself
# (the first format stage learned the markup but not the call, 0 % right arguments).
PROMPT_WEIGHT = 0.1
# A reply starts after its header — and after the empty thinking block when thinking
# is off, because the template's generation prompt writes that block, not the model
# (weighing it fully taught the first run to skip its reasoning with thinking on).
_REPLY = re.compile(
    r"<\|im_start\|>assistant\n(?:<think>\n\n</think>\n\n)?(.*?<\|im_end\|>)", re.S
)


def reply_weights(text: str, offsets: list[tuple[int, int]]) -> np.ndarray:
    """Per-token loss weights of a rendered conversation: 1 in replies, else less.

    Reply tokens are those the model writes: from an assistant header (and the empty
    thinking block the prompt supplies when thinking is off) to its ``<|im_end|>``.
    """
    spans = [match.span(1) for match in _REPLY.finditer(text)]
    weights = np.full(len(offsets), PROMPT_WEIGHT, np.float32)
    weights[_starts_in(offsets, spans)] = 1.0
    return weights


def _starts_in(
    offsets: list[tuple[int, int]], spans: list[tuple[int, int]]
) -> np.ndarray:
    """Which tokens (by their character offsets) start inside one of ``spans``."""
    return np.array(
        [any(low <= begin < high for low, high in spans) for begin, _ in offsets],
        dtype=bool,
    )


def emphasize(
    text: str,
    offsets: list[tuple[int, int]],
    weights: np.ndarray,
    targets: tuple[str, ...],
    emphasis: float,
) -> np.ndarray:
    """Raise to ``emphasis`` the reply tokens that write one of ``targets``.

    A tool conversation's reply is mostly markup the model learns in a few steps;
    what it must get right — the tool's name, the value copied from the question, the
    result repeated in the answer — is a handful of tokens among hundreds, and at
    weight 1 the 320-step stage learned the markup but copied the value in 0 % of the
    catalogue probes. Only tokens already weighed as reply (1.0) are raised.
    """
    if emphasis == 1.0 or not targets:
        return weights
    spans = [
        (match.start(), match.start() + len(target))
        for target in targets
        if target
        for match in re.finditer(re.escape(target), text)
    ]
    raised = weights.copy()
    raised[(weights == 1.0) & _starts_in(offsets, spans)] = emphasis
    return raised


def format_training_sequences(
    stream: TokenStream,
    length: int,
    seed: int,
    max_distance: int,
    words: list[str],
    mix: tuple[tuple[str, float], ...] = FORMAT_MIX,
    tool_emphasis: float = 1.0,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield format-stage sequences forever (see `FORMAT_MIX`) with loss weights.

    Args:
        stream: Tokenized training documents (the tokenizer has the format tokens).
        length: Tokens per sequence (plus one for the shifted targets).
        seed: Fixes every draw.
        max_distance: Longest filler gap of the recall tasks.
        words: Argument values of the tool tasks (`format_tasks.argument_words`).
        mix: ``(kind, share)`` pairs: ``"text"``, ``"tool"`` or a recall task kind.
        tool_emphasis: Loss weight of the reply tokens a tool conversation turns on
            (`emphasize`; 1 weighs them like the rest of the reply).

    Yields:
        ``(ids, weights)``, both ``length + 1`` long: text windows weigh 1
        throughout, conversations 1 in the assistant's replies and `PROMPT_WEIGHT`
        elsewhere (`reply_weights`).
    """
    from app.core.modelkit.reference import format_tasks

    rng = random.Random(seed)
    kinds = [kind for kind, _ in mix]
    weights = [share for _, share in mix]
    while True:
        kind = rng.choices(kinds, weights)[0]
        if kind == "text":
            yield stream.window(length + 1, rng), np.ones(length + 1, np.float32)
            continue
        thinking = rng.random() < THINKING_SHARE
        targets: tuple[str, ...] = ()
        if kind == "tool":
            task = format_tasks.tool_task(rng, words, rng.choice(SYSTEM_PROMPTS))
            text = format_tasks.tool_conversation(task, thinking, rng)
            targets = format_tasks.copy_targets(task)
        else:
            recall = sample_task(stream, rng, kind, max_distance)
            text = format_tasks.recall_conversation(recall, thinking)
        encoding = stream.tokenizer.encode(text)
        ids = encoding.ids
        if len(ids) > length + 1:
            continue
        rest = length + 1 - len(ids) - 1
        tail = stream.window(rest, rng) if rest > 0 else np.zeros(0, np.int32)
        sequence = np.concatenate(
            [np.array(ids, np.int32), np.array([stream.eot], np.int32), tail]
        )[: length + 1]
        reply = emphasize(
            text,
            encoding.offsets,
            reply_weights(text, encoding.offsets),
            targets,
            tool_emphasis,
        )
        weight = np.concatenate(
            [reply, np.full(len(sequence) - len(ids), PROMPT_WEIGHT, np.float32)]
        )[: length + 1]
        yield sequence, weight
