"""The measuring half of `aged_kv`: quality, bytes and decode speed of KV schemes (engine thread).

For one context length every scheme is run on the same inputs as full precision:

* a held-out text of that length, prefilled as the engine does, its last 512
  positions fed 64 at a time and compared with full precision's predictions on the
  same text (computed once): top-1 agreement, KL and the perplexity ratio at the end
  of that much context, where an aged cache reads its old tokens at the floor;
* pass keys hidden at the start of that many tokens of held-out filler and asked at the
  end (teacher-forced greedy, every answer token the argmax), so the key is in the
  oldest tier when it is asked for. Asked of the compressed schemes only where full
  precision still recalls (`RECALL_HOLDS`): the reference model was trained on 1,280
  tokens, and past where its own recall holds a miss says nothing about the cache;
* the live cache's bytes after the text (and the budget's figure for that length);
* decode speed: greedy tokens after the text, from copies of the filled caches, the
  schemes interleaved round by round so a busy machine slows them alike.

Runs on the engine thread of an engine with the reference model loaded.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import mlx.core as mx

from app.core.engine.cache.conversation_cache import ConversationCache
from app.core.presets.generation_settings import KVSettings

FULL_PRECISION = KVSettings(bits=16)

PASS_KEY_SEED = 4242
# Tokens of a pass-key prompt besides its filler (the chat template, the question).
PROMPT_OVERHEAD = 64
# The text's last positions are scored, one aging block per forward pass, so no
# scored position reads many more exact tokens than the window (a 512-token pass would
# read its own 512 exact); what comes before is prefilled as the engine does.
SCORED_TOKENS = 512
TEXT_CHUNK = 64
# Recall of the compressed schemes is asked only where full precision still finds the
# key this often: beyond that the model, not the cache, is what fails.
RECALL_HOLDS = 0.75


@dataclass
class SchemeFigures:
    """What one scheme measured at one context length (JSON-ready via `as_dict`)."""

    positions: int = 0
    agreed: int = 0
    kl_sum: float = 0.0
    reference_nll: float = 0.0
    nll: float = 0.0
    live_bytes: int = 0
    recall_hits: int = 0
    recall_asked: int = 0
    decode_seconds: list[float] = field(default_factory=list)
    decode_tokens: int = 0
    seconds: float = 0.0
    recall_skipped: bool = False

    def as_dict(self) -> dict:
        """The figures, with the derived shares."""
        import math

        return {
            "positions": self.positions,
            "top1_agreement": self.agreed / self.positions if self.positions else None,
            "mean_kl": self.kl_sum / self.positions if self.positions else None,
            "perplexity_ratio": (
                math.exp((self.nll - self.reference_nll) / self.positions)
                if self.positions
                else None
            ),
            "live_bytes": self.live_bytes,
            "recall_hits": self.recall_hits,
            "recall_asked": self.recall_asked,
            "recall": (
                self.recall_hits / self.recall_asked if self.recall_asked else None
            ),
            "recall_skipped": self.recall_skipped,
            "decode_tokens": self.decode_tokens,
            "decode_seconds": self.decode_seconds,
            "decode_tokens_per_s": [
                self.decode_tokens / s for s in self.decode_seconds if s > 0
            ],
            "seconds": self.seconds,
        }


def measure_context(
    loaded,
    stream,
    tokens: int,
    schemes: dict[str, KVSettings],
    *,
    pass_keys: int,
    decode_tokens: int,
    decode_rounds: int,
    log: Callable[[str], None],
    scored_tokens: int = SCORED_TOKENS,
) -> dict[str, SchemeFigures]:
    """Every figure of every scheme at one context length.

    Args:
        loaded: The reference model, loaded (engine thread).
        stream: Its held-out `corpus.TokenStream` (text and filler).
        tokens: The context length.
        schemes: Name -> KV settings; ``full`` (16-bit) is the reference and must be
            the first.
        pass_keys: Pass keys asked per scheme.
        decode_tokens: Greedy tokens timed per round.
        decode_rounds: Interleaved timing rounds.
        log: One line per finished scheme.
        scored_tokens: The text's last positions compared (at most ``tokens``).
    """
    from app.core.engine.quality import quality_scoring as scoring

    if next(iter(schemes)) != "full" or schemes["full"] != FULL_PRECISION:
        raise ValueError("full precision must be the first scheme")
    new_cache = scoring.new_cache  # uniform: quantized from the first token
    model = loaded.model
    chunk = scoring.chunk_size(int(loaded.config.get("vocab_size") or 0))
    figures = {name: SchemeFigures() for name in schemes}
    text = [int(i) for i in stream.ids[: tokens + 1]]
    began = time.perf_counter()
    scored_tokens = min(scored_tokens, tokens)
    reference = _reference_log_probs(model, text, tokens, chunk, scored_tokens)
    figures["full"].seconds += time.perf_counter() - began
    filled: dict[str, ConversationCache] = {}
    for name, kv in schemes.items():
        began = time.perf_counter()
        cache = new_cache(model, kv)
        _compare_text(
            model, cache, text, (tokens, scored_tokens), chunk, reference, figures[name]
        )
        # The text's last token was fed too (it predicts nothing): trim it off.
        cache.rewind(tokens)
        cache.evaluate()
        figures[name].live_bytes = cache.nbytes
        filled[name] = cache
        figures[name].seconds += time.perf_counter() - began
    del reference
    questions = _pass_key_questions(loaded, stream, tokens, pass_keys)
    for name, kv in schemes.items():
        result = figures[name]
        full = figures["full"]
        if name != "full" and full.recall_hits < RECALL_HOLDS * full.recall_asked:
            result.recall_skipped = True
            continue
        began = time.perf_counter()
        for question in questions:
            cache = new_cache(model, kv)
            right = scoring.answer_correct(
                model, cache, question.lead_ids, question.answer_ids, chunk
            )
            result.recall_asked += 1
            result.recall_hits += bool(right)
        result.seconds += time.perf_counter() - began
        log(
            f"    {tokens:>5} {name}: recall {result.recall_hits}/"
            f"{result.recall_asked}, KL {result.kl_sum / max(result.positions, 1):.4f}"
        )
    for name in schemes:
        if figures[name].recall_skipped:
            log(
                f"    {tokens:>5} {name}: recall not asked (full precision below "
                f"{RECALL_HOLDS:.0%}), KL "
                f"{figures[name].kl_sum / max(figures[name].positions, 1):.4f}"
            )
    for _ in range(decode_rounds):
        for name in schemes:
            seconds = _decode(model, filled[name], decode_tokens, text[-1])
            figures[name].decode_seconds.append(seconds)
            figures[name].decode_tokens = decode_tokens
    mx.clear_cache()
    return figures


def _log_probs(model, cache: ConversationCache, ids: list[int]) -> mx.array:
    logits = model(mx.array(ids)[None], cache=cache.layers)[0].astype(mx.float32)
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def _prefill(model, cache: ConversationCache, ids: list[int], chunk: int) -> None:
    """Feed ``ids`` as the engine prefills a prompt: ``chunk`` tokens a pass, tiers
    aging between passes."""
    for start in range(0, len(ids), chunk):
        piece = ids[start : start + chunk]
        mx.eval(model(mx.array(piece)[None], cache=cache.layers))
        cache.token_ids.extend(piece)
        cache.quantize()


def _reference_log_probs(
    model, text: list[int], tokens: int, chunk: int, scored_tokens: int
) -> list[mx.array]:
    """Full precision's next-token log-probs over the last ``scored_tokens`` positions
    of ``text[:tokens]``, per pass (computed once, compared with every scheme)."""
    cache = ConversationCache(model, FULL_PRECISION)
    scored_from = tokens - scored_tokens
    _prefill(model, cache, text[:scored_from], chunk)
    chunks = []
    for start in range(scored_from, tokens, TEXT_CHUNK):
        log_probs = _log_probs(model, cache, text[start : start + TEXT_CHUNK])
        mx.eval(log_probs)
        chunks.append(log_probs)
    return chunks


def _compare_text(
    model,
    cache: ConversationCache,
    text: list[int],
    lengths: tuple[int, int],
    chunk: int,
    reference: list[mx.array],
    result: SchemeFigures,
) -> None:
    """Prefill ``cache`` with ``text`` up to its last scored positions, then feed those
    `TEXT_CHUNK` at a time and add their agreement with ``reference``.

    ``lengths`` is (the context length, the positions scored at its end).
    """
    from app.core.engine.quality.quality_scoring import compare_log_probs, real_item

    tokens, scored_tokens = lengths
    scored_from = tokens - scored_tokens
    _prefill(model, cache, text[:scored_from], chunk)
    for index, start in enumerate(range(scored_from, tokens, TEXT_CHUNK)):
        piece = text[start : start + TEXT_CHUNK]
        ref = reference[index]
        got = _log_probs(model, cache, piece)
        cache.token_ids.extend(piece)
        cache.quantize()
        targets = mx.array(text[start + 1 : start + 1 + len(piece)])
        compared = compare_log_probs(ref, got)
        rows = mx.arange(len(piece))
        ref_nll = -mx.sum(ref[rows, targets])
        got_nll = -mx.sum(got[rows, targets])
        mx.eval(ref_nll, got_nll)
        result.positions += compared.positions
        result.agreed += compared.agreed
        result.kl_sum += compared.kl_sum
        result.reference_nll += real_item(ref_nll)
        result.nll += real_item(got_nll)


def _pass_key_questions(loaded, stream, tokens: int, count: int):
    """``count`` pass keys, each hidden at the start of a ``tokens``-long prompt."""
    from app.core.engine.quality import quality_scoring as scoring
    from app.core.quality import recall_tasks

    chat = scoring.ChatRenderer(loaded.tokenizer)
    rng = random.Random(PASS_KEY_SEED + tokens)
    distance = max(tokens - PROMPT_OVERHEAD, 16)
    return [
        scoring.task_question(
            chat, recall_tasks.pass_key_task(rng, distance, stream.filler)
        )
        for _ in range(count)
    ]


def _decode(model, filled: ConversationCache, count: int, first: int) -> float:
    """Seconds for ``count`` greedy decode steps on a copy of ``filled``."""
    cache = filled.clone()
    token = mx.array([[first]])
    mx.eval(token)
    started = time.perf_counter()
    for _ in range(count):
        logits = model(token, cache=cache.layers)
        token = mx.argmax(logits[:, -1, :], axis=-1, keepdims=True)
        mx.eval(token)
        cache.quantize()  # what the engine does between tokens: aged tiers move down
    seconds = time.perf_counter() - started
    del cache
    return seconds


def copy_figures(figures: dict[str, SchemeFigures]) -> dict[str, dict]:
    """JSON-ready figures."""
    return {name: copy.deepcopy(f.as_dict()) for name, f in figures.items()}


def decode_speed(
    loaded,
    ids: list[int],
    contexts: tuple[int, ...],
    schemes: dict[str, KVSettings],
    *,
    decode_tokens: int,
    decode_rounds: int,
) -> dict[int, dict[str, list[float]]]:
    """Decode tok/s of every scheme at every length, from one full-precision prefill.

    Only speed is measured here (the keys and values are the full-precision ones,
    converted to each scheme as its cache would hold them after ``length`` tokens), so
    one prefill of the longest length serves every scheme and length.

    Returns:
        Length -> scheme -> tokens/s per round.
    """
    from app.core.engine.generation import prefill_range

    model = loaded.model
    longest = max(contexts)
    full = ConversationCache(model, FULL_PRECISION)
    prefill_range(model, full, ids, longest)
    speeds: dict[int, dict[str, list[float]]] = {}
    for tokens in contexts:
        base = full.clone()
        base.rewind(tokens)
        caches = {name: _converted(model, base, kv) for name, kv in schemes.items()}
        speeds[tokens] = {name: [] for name in schemes}
        for _ in range(decode_rounds):
            for name, cache in caches.items():
                seconds = _decode(model, cache, decode_tokens, ids[tokens])
                speeds[tokens][name].append(decode_tokens / seconds)
        del caches, base
        mx.clear_cache()
    return speeds


def _converted(model, dense: ConversationCache, kv: KVSettings) -> ConversationCache:
    """A copy of a full-precision cache held as ``kv`` holds it."""
    cache = dense.clone()
    cache.kv = kv
    if kv.quantized and kv.aging is None:
        cache.layers = [
            layer.to_quantized(group_size=kv.group_size, bits=kv.bits)
            for layer in cache.layers
        ]
    cache.quantize()  # aged: the plain entries become aged caches, blocks move down
    cache.evaluate()
    return cache
