"""One turn of generation on a conversation cache, streamed as `GenerationEvent`s.

Runs on the engine thread only. The cache is left consistent whatever happens: after a
normal finish, a cancel (checked after every token and between prefill chunks) or an
exception, its recorded token ids are exactly the entries it holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_sampler

from app.core.engine.conversation_cache import ConversationCache, common_prefix_length
from app.core.engine.events import GenerationEvent, PrefillProgress
from app.core.engine.loader import LoadedModel
from app.core.generation_settings import KVSettings, SamplingSettings

# Smaller than mlx-lm's 2048 so a cancel during a long prefill is noticed within
# about a second on a laptop CPU, at no measurable cost in throughput.
PREFILL_STEP = 512


class _Cancelled(Exception):
    """Raised inside the prefill callback to stop a cancelled turn early."""


@dataclass
class TurnOutcome:
    """What a finished turn leaves behind (engine-internal)."""

    generated_ids: list[int]
    last_event: GenerationEvent


def run_turn(
    loaded: LoadedModel,
    cache: ConversationCache,
    prompt_ids: list[int],
    kv: KVSettings,
    sampling: SamplingSettings,
    *,
    is_cancelled: Callable[[], bool],
    emit: Callable[[object], None],
    reuse_source: str = "memory",
    started: float | None = None,
) -> TurnOutcome:
    """Generate a reply to ``prompt_ids`` on ``cache`` and stream events to ``emit``.

    Args:
        loaded: The model and tokenizer.
        cache: The conversation's cache; reused as far as it matches the prompt.
        prompt_ids: The whole prompt of this turn.
        kv: KV precision for this turn.
        sampling: Sampling settings.
        is_cancelled: Polled after every token and between prefill chunks.
        emit: Receives `PrefillProgress` and `GenerationEvent` objects in order.
        reuse_source: Label for where the reused prefix came from.
        started: ``time.perf_counter()`` when the request was made (default: now).

    Returns:
        The generated ids and the final event.
    """
    if not prompt_ids:
        raise ValueError("prompt_ids must not be empty")
    started = time.perf_counter() if started is None else started
    mx.reset_peak_memory()
    reused = cache.prepare_for(prompt_ids)
    remainder = prompt_ids[reused:]
    tokenizer = loaded.tokenizer
    eos_ids = set(tokenizer.eos_token_ids)
    if sampling.seed is not None:
        mx.random.seed(sampling.seed)
    sampler = make_sampler(temp=sampling.temperature, top_p=sampling.top_p)
    prefill_done_at: list[float] = []

    def on_progress(processed: int, total: int) -> None:
        if processed >= total and not prefill_done_at:
            prefill_done_at.append(time.perf_counter())
        emit(PrefillProgress(processed=processed, total=total))
        if processed < total and is_cancelled():
            raise _Cancelled

    steps = generate_step(
        mx.array(remainder),
        loaded.model,
        max_tokens=sampling.max_tokens,
        sampler=sampler,
        prompt_cache=cache.layers,
        prefill_step_size=PREFILL_STEP,
        kv_bits=kv.bits if kv.quantized else None,
        kv_group_size=kv.group_size,
        quantized_kv_start=kv.quantized_kv_start,
        prompt_progress_callback=on_progress,
    )
    detokenizer = tokenizer.detokenizer
    detokenizer.reset()
    generated: list[int] = []
    first_token_at = None
    finish = "length"

    def make_event(text: str, finish_reason: str | None) -> GenerationEvent:
        now = time.perf_counter()
        first = first_token_at or now
        decode_tokens = max(len(generated) - 1, 0)
        decode_time = now - first
        prefill_end = prefill_done_at[0] if prefill_done_at else first
        return GenerationEvent(
            text=text,
            generated_tokens=len(generated),
            prompt_tokens=len(prompt_ids),
            reused_tokens=reused,
            reuse_source=reuse_source if reused else "none",
            new_tokens=len(remainder),
            prefill_s=prefill_end - started,
            ttft_s=first - started,
            tokens_per_s=decode_tokens / decode_time if decode_time > 0 else 0.0,
            peak_memory_bytes=int(mx.get_peak_memory()),
            context_tokens=cache.offset,
            kv_bytes=cache.nbytes,
            kv_bits=cache.bits_in_use if cache.offset else kv.bits,
            finish_reason=finish_reason,
        )

    try:
        for token, _ in steps:
            if first_token_at is None:
                first_token_at = time.perf_counter()
            generated.append(int(token))
            if token in eos_ids:
                finish = "stop"
                break
            detokenizer.add_token(token)
            emit(make_event(detokenizer.last_segment, None))
            if is_cancelled():
                finish = "cancelled"
                break
            if len(generated) >= sampling.max_tokens:
                finish = "length"
                break
    except _Cancelled:
        finish = "cancelled"
    finally:
        steps.close()
        # The generator evaluates one step ahead; settle it before reading the cache.
        cache.evaluate()
        cache.reconcile(prompt_ids + generated)
    detokenizer.finalize()
    final = make_event(detokenizer.last_segment, finish)
    emit(final)
    return TurnOutcome(generated_ids=generated, last_event=final)


def prefill_only(
    loaded: LoadedModel,
    cache: ConversationCache,
    ids: list[int],
    kv: KVSettings,
    *,
    is_cancelled: Callable[[], bool] = lambda: False,
    emit: Callable[[object], None] = lambda _: None,
    exact: bool = False,
) -> tuple[int, int]:
    """Fill ``cache`` with ``ids`` (reusing its matching prefix) without generating.

    Used to rebuild a trimmed conversation and to warm prefixes.

    Args:
        loaded: The model.
        cache: The cache to fill.
        ids: Every token the cache should hold afterwards.
        kv: KV precision (quantization starts at ``kv.quantized_kv_start``).
        is_cancelled: Polled between chunks.
        emit: Receives `PrefillProgress` events.
        exact: Reuse only entries at their natural positions, so the result equals a
            fresh prefill even after splices (a "rebuild").

    Returns:
        (tokens reused, tokens computed).
    """
    from mlx_lm.generate import maybe_quantize_kv_cache

    reused = common_prefix_length(cache.token_ids, ids)
    if exact:
        reused = min(reused, cache.contiguous_prefix())
    reused = cache.keep_at_most(reused)
    remainder = ids[reused:]
    done = 0
    while done < len(remainder):
        chunk = remainder[done : done + PREFILL_STEP]
        loaded.model(mx.array(chunk)[None], cache=cache.layers)
        if kv.quantized:
            maybe_quantize_kv_cache(
                cache.layers, kv.quantized_kv_start, kv.group_size, kv.bits
            )
        cache.evaluate()
        done += len(chunk)
        cache.token_ids = ids[: reused + done]
        cache.sync_positions()
        emit(PrefillProgress(processed=done, total=len(remainder)))
        if is_cancelled():
            break
    mx.clear_cache()
    return reused, done
