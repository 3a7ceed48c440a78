"""Score a model's next-token predictions under one KV setting against full precision.

The two caches are fed the same tokens chunk by chunk, in lockstep, so only one chunk
of logits per cache is alive at a time (a 150K-token vocabulary makes whole-text logits
gigabytes). Per position the full-precision distribution is the reference:

* top-1 agreement: both argmaxes equal;
* KL(reference ‖ compressed) in nats, from the full distributions;
* negative log-likelihood of the actual next token under each (→ perplexity ratio).

A quantized cache is converted *before* the first token, so every position reads
quantized keys and values, its own chunk included: the steady state of a long chat,
where the prefill's first chunk is long gone (shared/NOTES-mlx.md measures KV damage the
same way). The app's prefill reads its first chunk at full precision, so its cost is
at most this. Runs on the engine thread only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.generate import maybe_quantize_kv_cache

from app.core.engine.cache.conversation_cache import ConversationCache
from app.core.presets.generation_settings import KVSettings
from app.core.quality import conversation_layout as layout
from app.core.token_ids import common_prefix_length

# Positions per forward pass; fewer for huge vocabularies so one chunk's float32
# logits stay near 64 MB.
MAX_CHUNK = 512
LOGITS_BUDGET_BYTES = 64 * 1024 * 1024
FULL_PRECISION = KVSettings(bits=16)


def real_item(value: mx.array) -> float:
    """The value of a one-element real array (``item()`` is typed to allow complex)."""
    item = value.item()
    assert not isinstance(item, complex), "the array holds a real number"
    return float(item)


def chunk_size(vocab_size: int) -> int:
    """Positions per forward pass for a vocabulary of this size."""
    fitting = LOGITS_BUDGET_BYTES // (4 * max(vocab_size, 1))
    return int(max(16, min(MAX_CHUNK, fitting)))


@dataclass
class Comparison:
    """Running sums over compared positions (plain numbers, safe to pass on).

    Attributes:
        positions: Positions compared.
        agreed: Positions whose top-1 tokens agree.
        kl_sum: Sum of KL(reference ‖ compressed), nats.
        reference_nll: Sum of the reference's negative log-likelihoods of the text.
        compressed_nll: The same under the compressed cache.
    """

    positions: int = 0
    agreed: int = 0
    kl_sum: float = 0.0
    reference_nll: float = 0.0
    compressed_nll: float = 0.0

    def add(self, other: Comparison) -> None:
        """Fold another comparison's sums into this one."""
        self.positions += other.positions
        self.agreed += other.agreed
        self.kl_sum += other.kl_sum
        self.reference_nll += other.reference_nll
        self.compressed_nll += other.compressed_nll


def new_cache(model: nn.Module, kv: KVSettings) -> ConversationCache:
    """An empty cache of ``kv``'s precision, quantized from the very first token.

    Raises:
        KnownError: The model's cache cannot be quantized (sliding windows, recurrent
            layers); ValueError: the group does not divide the head dimension.
    """
    cache = ConversationCache(model, kv)
    if kv.quantized:
        maybe_quantize_kv_cache(cache.layers, 0, kv.group_size, kv.bits)
    return cache


def _log_probs(model: nn.Module, cache: ConversationCache, ids: list[int]) -> mx.array:
    logits = model(mx.array(ids)[None], cache=cache.layers)[0].astype(mx.float32)
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def feed(
    model: nn.Module,
    cache: ConversationCache,
    ids: list[int],
    chunk: int,
    is_cancelled: Callable[[], bool] = lambda: False,
) -> mx.array | None:
    """Run ``ids`` through ``cache``; return the log-probs of the last position.

    Returns None when cancelled between chunks.
    """
    last = None
    for start in range(0, len(ids), chunk):
        if is_cancelled():
            return None
        piece = ids[start : start + chunk]
        last = _log_probs(model, cache, piece)[-1]
        mx.eval(last)
        cache.token_ids.extend(piece)
    return last


def compare_log_probs(reference: mx.array, other: mx.array) -> Comparison:
    """Top-1 agreement and KL of two ``(positions, vocab)`` log-prob arrays."""
    kl = mx.sum(mx.exp(reference) * (reference - other), axis=-1)
    agreed = mx.sum(mx.argmax(reference, axis=-1) == mx.argmax(other, axis=-1))
    mx.eval(kl, agreed)
    return Comparison(
        positions=int(reference.shape[0]),
        agreed=int(agreed),
        # A KL below rounding can come out a hair negative; it is zero.
        kl_sum=max(real_item(mx.sum(kl)), 0.0),
    )


def compare_chunk(
    model: nn.Module,
    reference: ConversationCache,
    compressed: ConversationCache,
    ids: list[int],
    start: int,
    chunk: int,
) -> Comparison:
    """Feed ``ids[start:start + chunk]`` to both caches; compare their predictions.

    Both caches must hold ``ids[:start]``. Positions whose next token is in ``ids`` are
    compared (the text's last token predicts nothing).
    """
    piece = ids[start : start + chunk]
    targets = mx.array(ids[start + 1 : start + 1 + len(piece)])
    count = int(targets.size)
    ref = _log_probs(model, reference, piece)[:count]
    got = _log_probs(model, compressed, piece)[:count]
    reference.token_ids.extend(piece)
    compressed.token_ids.extend(piece)
    result = compare_log_probs(ref, got)
    index = mx.arange(count)
    ref_nll, got_nll = -mx.sum(ref[index, targets]), -mx.sum(got[index, targets])
    mx.eval(ref_nll, got_nll)
    result.reference_nll = real_item(ref_nll)
    result.compressed_nll = real_item(got_nll)
    return result


def compare_text(
    model: nn.Module,
    ids: list[int],
    kv: KVSettings,
    chunk: int,
    is_cancelled: Callable[[], bool] = lambda: False,
) -> Comparison:
    """Compare ``kv`` with full precision on every next-token prediction of ``ids``.

    Args:
        model: The loaded model.
        ids: The text's token ids (at least 2).
        kv: The compressed setting.
        chunk: Positions per forward pass (`chunk_size`).
        is_cancelled: Polled between chunks; a cancelled comparison returns the sums of
            the chunks it finished.
    """
    reference = new_cache(model, FULL_PRECISION)
    compressed = new_cache(model, kv)
    result = Comparison()
    for start in range(0, len(ids) - 1, chunk):
        if is_cancelled():
            break
        result.add(compare_chunk(model, reference, compressed, ids, start, chunk))
    return result


def reply_log_probs(
    model: nn.Module,
    cache: ConversationCache,
    asked_ids: list[int],
    reply_ids: list[int],
) -> mx.array:
    """Log-probs predicting each reply token, teacher-forced after ``asked_ids``.

    ``cache`` holds the conversation before the question; ``asked_ids`` (the question
    and the reply's header) are fed, then the reply but its last token.

    Returns:
        A ``(len(reply_ids), vocab)`` array.
    """
    if not asked_ids or not reply_ids:
        raise ValueError("both the question and the reply need tokens")
    fed = [*asked_ids, *reply_ids[:-1]]
    log_probs = _log_probs(model, cache, fed)[len(asked_ids) - 1 :]
    cache.token_ids.extend(fed)
    mx.eval(log_probs)
    return log_probs


def answer_correct(
    model: nn.Module,
    cache: ConversationCache,
    prompt_ids: list[int],
    answer_ids: list[int],
    chunk: int,
    is_cancelled: Callable[[], bool] = lambda: False,
) -> bool | None:
    """True when greedy decoding after ``prompt_ids`` would produce ``answer_ids``.

    Teacher-forced: every answer token must be the argmax after the ones before it,
    which is exactly what greedy decoding checks, at one forward pass. ``cache`` may
    already hold a prefix of ``prompt_ids`` (its recorded ``token_ids``).

    Returns:
        The verdict, or None when cancelled.
    """
    if not answer_ids:
        raise ValueError("answer_ids must not be empty")
    held = len(cache.token_ids)
    if prompt_ids[:held] != cache.token_ids:
        raise ValueError("the cache does not hold a prefix of the prompt")
    rest = prompt_ids[held:]
    if not rest:
        raise ValueError("at least one prompt token must be left to feed")
    before = feed(model, cache, rest[:-1], chunk, is_cancelled) if rest[:-1] else True
    if before is None:
        return None
    tail = [rest[-1], *answer_ids[:-1]]
    predicted = mx.argmax(_log_probs(model, cache, tail), axis=-1).tolist()
    cache.token_ids.extend(tail)
    return predicted == list(answer_ids)


@dataclass(frozen=True)
class Question:
    """A prompt, the reply that should follow it and where the answer is in the reply.

    Attributes:
        prompt_ids: Everything before the reply's first token.
        reply_ids: The reply's tokens (with the template's end-of-turn tokens).
        answer: ``(start, end)`` of the answer within ``reply_ids``.
    """

    prompt_ids: list[int]
    reply_ids: list[int]
    answer: tuple[int, int]

    @property
    def lead_ids(self) -> list[int]:
        """The prompt plus the reply up to the answer (teacher-forced, not scored)."""
        return self.prompt_ids + self.reply_ids[: self.answer[0]]

    @property
    def answer_ids(self) -> list[int]:
        """The answer's tokens: what greedy decoding must write after `lead_ids`."""
        return self.reply_ids[self.answer[0] : self.answer[1]]


class ChatRenderer:
    """Token ids of chat messages under a loaded tokenizer's chat template.

    Args:
        tokenizer: mlx-lm's tokenizer wrapper of the loaded model.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        """Text → ids, no special tokens added."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        """Ids → text."""
        return self.tokenizer.decode(ids)

    def render(self, messages: list[dict], add_generation_prompt: bool) -> list[int]:
        """The ids of ``messages`` as the model sees them (none for no messages)."""
        if not messages:
            return []
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=False
        )
        return self.encode(text)

    def question(self, messages: list[dict], turns, answer: str) -> Question:
        """The `Question` of ``turns`` (user, assistant) asked after ``messages``."""
        if len(turns) != 2:
            raise ValueError("a question is one user turn and one assistant reply")
        asked, reply = layout.continuation(self.render, messages, turns)
        # A reasoning template writes an (empty) thinking block before the reply's
        # text: it is part of what the model was given, not what it answers.
        lead = layout.reply_start(self.encode, reply, turns[-1]["content"])
        asked, reply = asked + reply[:lead], reply[lead:]
        span = layout.answer_span(self.encode, reply, turns[-1]["content"], answer)
        context = self.render(messages, False)
        shared = common_prefix_length(context, self.render([*messages, turns[0]], True))
        return Question(context[:shared] + asked, reply, span)


def task_question(chat: ChatRenderer, task) -> Question:
    """The `Question` of a `RecallTask`: its last two turns after the others."""
    return chat.question(list(task.messages[:-2]), task.messages[-2:], task.answer)
