"""One turn of generation on a conversation cache, streamed as `GenerationEvent`s.

Runs on the engine thread only. The prompt is prefilled here, chunk by chunk, rather
than inside mlx-lm's ``generate_step``, for two reasons: the chunks can end exactly at
the boundaries where the cache's bounded entries (sliding windows, recurrent state) are
checkpointed, and the full-attention entries are quantized after every chunk by
`ConversationCache.quantize`, which leaves the bounded ones alone (``generate_step``'s
own ``kv_bits`` would call ``RotatingKVCache.to_quantized``, which raises). Only the
last prompt token goes through the decode loop (`decode_steps`, ``generate_step``'s
loop without the log-probabilities the engine never reads), which then decodes.

The cache is left consistent whatever happens: after a normal finish, a cancel (checked
after every token and between prefill chunks) or an exception, its recorded token ids
are exactly the entries it holds.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.sample_utils import make_sampler

from app.core.engine.cache.conversation_cache import (
    ConversationCache,
    common_prefix_length,
)
from app.core.engine.decode_steps import decode_steps
from app.core.engine.events import FinishReason, GenerationEvent, PrefillProgress
from app.core.engine.loader import LoadedModel
from app.core.engine.reasoning_stream import (
    ReasoningSplitter,
    ReplyRouter,
    forced_end_ids,
)
from app.core.presets.generation_settings import KVSettings, SamplingSettings
from app.core.reasoning.markers import NO_REASONING, ReasoningFormat
from app.core.turn.parts import REASONING, Channel

# The longest chunk on the float32 path: smaller than mlx-lm's 2048 so a cancel during
# a long prefill is noticed sooner, at no measurable cost in throughput.
PREFILL_STEP = 512
# A chunk's cost grows with the context it attends to (and with quantized KV): at 24K
# tokens of 4-bit KV a 512-token chunk took ~10 s on a 2-core CPU. Chunks shrink to
# take about this long, so a cancel (checked between chunks) answers within a second.
PREFILL_CHUNK_SECONDS = 0.3
MIN_PREFILL_STEP = 32


def chunk_ceiling() -> int:
    """The longest prefill chunk worth taking with the loaded model.

    Where the native kernel serves the quantized layers, chunks of more rows than it
    takes (`native_kernel.KERNEL_ROWS`) widen every layer to float32 for the BLAS
    instead, slower per token than the kernel's passes with the BLAS preloaded here
    (docs/native-kernel.md, "Long inputs").
    """
    from app.core.engine.cpu import backend

    if backend.kernel_state().used:
        from app.core.engine.cpu.native_kernel import KERNEL_ROWS

        return min(PREFILL_STEP, KERNEL_ROWS)
    return PREFILL_STEP


def next_prefill_step(
    step: int, chunk_tokens: int, seconds: float, ceiling: int = PREFILL_STEP
) -> int:
    """Return the next chunk size after ``chunk_tokens`` took ``seconds``.

    Aims at `PREFILL_CHUNK_SECONDS` per chunk, between `MIN_PREFILL_STEP` and
    ``ceiling`` tokens, in multiples of the minimum; grows at most 2x at a time.
    A chunk shorter than the step (cut at a checkpoint or at the prompt's end) only
    ever shrinks it: its fixed overhead would make it look slow per token.
    """
    if seconds <= 0 or chunk_tokens <= 0:
        return step
    if chunk_tokens < step and seconds <= PREFILL_CHUNK_SECONDS:
        return step
    wanted = chunk_tokens * PREFILL_CHUNK_SECONDS / seconds
    wanted = min(wanted, 2 * step)
    wanted = int(wanted) // MIN_PREFILL_STEP * MIN_PREFILL_STEP
    return max(MIN_PREFILL_STEP, min(ceiling, wanted))


class _Cancelled(Exception):
    """Raised inside the prefill to stop a cancelled turn early."""


@dataclass
class TurnOutcome:
    """What a finished turn leaves behind (engine-internal)."""

    generated_ids: list[int]
    last_event: GenerationEvent


def prefill_range(
    model,
    cache: ConversationCache,
    ids: list[int],
    end: int,
    *,
    checkpoint_at: Iterable[int] = (),
    on_chunk: Callable[[int], None] = lambda _: None,
    chunk_limit: Callable[[int, int], int] | None = None,
) -> int:
    """Run ``ids[cache.offset:end]`` through the model in chunks.

    Chunks end at every position of ``checkpoint_at`` in range (and at ``end``), where
    the bounded entries are checkpointed; the full-attention entries are quantized
    after every chunk as ``cache.kv`` asks. A chunk is at most `chunk_ceiling` tokens,
    at most what ``chunk_limit`` allows, and shrinks when chunks get slow.

    Args:
        model: The model.
        cache: The cache; its ``token_ids`` must be a prefix of ``ids``.
        ids: Every token the cache should hold once done (and more).
        end: Prefill up to this many tokens in total.
        checkpoint_at: Lengths at which to checkpoint (only where the cache has
            bounded entries; a checkpoint is always taken at ``end`` then).
        on_chunk: Called with the tokens processed so far after every chunk; may
            raise to stop (the cache stays consistent).
        chunk_limit: ``(tokens cached, ceiling) -> tokens``: the largest chunk the
            memory budget allows there (`DeviceBudget.prefill_chunk`); None: no limit.

    Returns:
        Tokens run through the model.
    """
    start = cache.offset
    stops = {end}
    if cache.has_bounded_layers:
        stops.update(p for p in checkpoint_at if start < p < end)
    done = 0
    position = start
    ceiling = chunk_ceiling()
    step = min(cache.prefill_step or ceiling, ceiling)
    for stop in sorted(s for s in stops if s > start):
        while position < stop:
            size = (
                step if chunk_limit is None else min(step, chunk_limit(position, step))
            )
            chunk = ids[position : min(position + size, stop)]
            chunk_started = time.perf_counter()
            model(mx.array(chunk)[None], cache=cache.layers)
            cache.quantize()
            cache.evaluate()
            step = next_prefill_step(
                step, len(chunk), time.perf_counter() - chunk_started, ceiling
            )
            cache.prefill_step = step
            position += len(chunk)
            done += len(chunk)
            cache.token_ids = ids[:position]
            cache.sync_positions()
            if position == stop:
                cache.checkpoint()
            on_chunk(done)
        mx.clear_cache()
    return done


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
    checkpoint_at: Iterable[int] = (),
    logits_processors: list | None = None,
    reasoning: ReasoningFormat = NO_REASONING,
    thinking_budget: int = 0,
    chunk_limit: Callable[[int, int], int] | None = None,
    close_reasoning: bool = False,
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
        checkpoint_at: Message boundaries (token counts) where the bounded entries
            are checkpointed besides the end of the prompt and of the reply, e.g.
            the end of the system prompt.
        logits_processors: mlx-lm logits processors (a grammar's token mask,
            `app.core.engine.tool_hooks`), given every reply token so far.
        reasoning: The model's reasoning markers: text is routed to the reasoning
            or answer channel as it streams (`reasoning_stream`).
        thinking_budget: Most reasoning tokens (0: none); at the budget the end
            marker is written into the reply and the model goes on to answer.
        chunk_limit: The memory budget's largest prefill chunk (`prefill_range`).
        close_reasoning: Write the reasoning's end marker before the first token
            (`TurnHooks.closes_reasoning`: a grammar constrains the reply and the
            prompt left it inside reasoning).

    Returns:
        The generated ids and the final event.
    """
    if not prompt_ids:
        raise ValueError("prompt_ids must not be empty")
    started = time.perf_counter() if started is None else started
    mx.reset_peak_memory()
    cache.kv = kv
    reused = cache.prepare_for(prompt_ids)
    rewind = cache.last_rewind
    remainder = prompt_ids[reused:]
    tokenizer = loaded.tokenizer
    eos_ids = set(tokenizer.eos_token_ids)
    if sampling.seed is not None:
        mx.random.seed(sampling.seed)
    sampler = make_sampler(temp=sampling.temperature, top_p=sampling.top_p)
    prefill_done_at: list[float] = []
    total = len(remainder)

    def on_chunk(done: int) -> None:
        emit(PrefillProgress(processed=done, total=total))
        if is_cancelled():
            raise _Cancelled

    def on_prompt_done() -> None:
        if not prefill_done_at:
            prefill_done_at.append(time.perf_counter())
            emit(PrefillProgress(processed=total, total=total))

    generated: list[int] = []
    first_token_at = None
    finish: FinishReason = "length"
    thought = _ThoughtClock()

    def emit_text(text: str, channel: Channel) -> None:
        thought.see(channel)
        emit(make_event(text, None, channel))

    router = ReplyRouter(
        tokenizer.detokenizer, ReasoningSplitter(reasoning, prompt_ids), emit_text
    )

    def make_event(
        text: str, finish_reason: FinishReason | None, channel: Channel = "answer"
    ) -> GenerationEvent:
        now = time.perf_counter()
        first = first_token_at or now
        decode_tokens = max(len(generated) - 1, 0)
        decode_time = now - first
        prefill_end = prefill_done_at[0] if prefill_done_at else first
        final = finish_reason is not None
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
            kv_layers=cache.layer_groups() if final else (),
            checkpoint_bytes=cache.checkpoint_nbytes if final else 0,
            rewind=rewind,
            channel=channel,
            reasoning_tokens=router.splitter.reasoning_tokens,
            reasoning_s=thought.seconds(),
            reasoning_forced_end=bool(forced),
        )

    steps = None
    forced: list[int] = []
    try:
        prefill_range(
            loaded.model,
            cache,
            prompt_ids,
            len(prompt_ids) - 1,
            checkpoint_at=checkpoint_at,
            on_chunk=on_chunk,
            chunk_limit=chunk_limit,
        )
        pending = prompt_ids[-1:]
        if close_reasoning:
            # As at a spent thinking budget, but before any reasoning: the marker is
            # part of the reply, and the grammar starts after it.
            for closing in forced_end_ids(reasoning, tokenizer.encode):
                generated.append(closing)
                router.add(closing)
                pending.append(closing)
        while pending:
            steps = decode_steps(
                loaded.model,
                pending,
                cache.layers,
                sampler,
                max_tokens=sampling.max_tokens - len(generated),
                logits_processors=logits_processors,
                on_first=on_prompt_done,
            )
            pending = []
            for token in steps:
                if first_token_at is None:
                    first_token_at = time.perf_counter()
                # Between tokens: the next step reads the same list.
                cache.quantize()
                generated.append(token)
                if token in eos_ids:
                    finish = "stop"
                    break
                router.add(token)
                if is_cancelled():
                    finish = "cancelled"
                    break
                if len(generated) >= sampling.max_tokens:
                    finish = "length"
                    break
                if router.splitter.over_budget(thinking_budget):
                    # End the thought here: the marker becomes part of the reply, and
                    # generation resumes after it (`_resume_after`).
                    forced = forced_end_ids(reasoning, tokenizer.encode)
                    pending = _resume_after(steps, cache, prompt_ids + generated)
                    steps = None
                    for forced_token in forced:
                        generated.append(forced_token)
                        router.add(forced_token)
                    pending += forced
                    if len(generated) >= sampling.max_tokens:
                        pending = []  # the marker took the reply's last room
                    break
    except _Cancelled:
        finish = "cancelled"
    finally:
        if steps is not None:
            steps.close()
        # The generator evaluates one step ahead; settle it before reading the cache.
        cache.evaluate()
        cache.reconcile(prompt_ids + generated)
    # The end of the reply is where the next turn resumes.
    cache.checkpoint()
    text = router.finish()
    final = make_event(text, finish, router.channel)
    emit(final)
    return TurnOutcome(generated_ids=generated, last_event=final)


def _resume_after(steps, cache: ConversationCache, held: list[int]) -> list[int]:
    """Stop ``steps`` and return the reply's tokens the cache does not hold yet."""
    steps.close()
    cache.evaluate()
    cache.reconcile(held)
    return held[cache.offset :]


class _ThoughtClock:
    """Seconds from the first reasoning text to the first answer text."""

    def __init__(self) -> None:
        self._start: float | None = None
        self._end: float | None = None

    def see(self, channel: Channel) -> None:
        now = time.perf_counter()
        if channel == REASONING:
            if self._start is None:
                self._start = now
            self._end = None
        elif self._start is not None and self._end is None:
            self._end = now

    def seconds(self) -> float:
        if self._start is None:
            return 0.0
        return (self._end or time.perf_counter()) - self._start


def prefill_only(
    loaded: LoadedModel,
    cache: ConversationCache,
    ids: list[int],
    kv: KVSettings,
    *,
    is_cancelled: Callable[[], bool] = lambda: False,
    emit: Callable[[object], None] = lambda _: None,
    exact: bool = False,
    checkpoint_at: Iterable[int] = (),
    chunk_limit: Callable[[int, int], int] | None = None,
) -> tuple[int, int]:
    """Fill ``cache`` with ``ids`` (reusing its matching prefix) without generating.

    Used to rebuild a trimmed conversation and to warm prefixes. The bounded entries
    are checkpointed at the end (where the next turn resumes) and at ``checkpoint_at``.

    Args:
        loaded: The model.
        cache: The cache to fill.
        ids: Every token the cache should hold afterwards.
        kv: KV precision (quantization starts at ``kv.quantized_kv_start``).
        is_cancelled: Polled between chunks.
        emit: Receives `PrefillProgress` events.
        exact: Reuse only entries at their natural positions, so the result equals a
            fresh prefill even after splices (a "rebuild").
        checkpoint_at: Further lengths at which to checkpoint.
        chunk_limit: The memory budget's largest prefill chunk (`prefill_range`).

    Returns:
        (tokens reused, tokens computed).
    """
    cache.kv = kv
    reused = common_prefix_length(cache.token_ids, ids)
    if exact:
        reused = min(reused, cache.contiguous_prefix())
    reused = cache.keep_at_most(reused)
    total = len(ids) - reused
    computed = [0]

    def on_chunk(done: int) -> None:
        computed[0] = done
        emit(PrefillProgress(processed=done, total=total))
        if is_cancelled():
            raise _Cancelled

    with contextlib.suppress(_Cancelled):  # stopped between chunks: still consistent
        prefill_range(
            loaded.model,
            cache,
            ids,
            len(ids),
            checkpoint_at=checkpoint_at,
            on_chunk=on_chunk,
            chunk_limit=chunk_limit,
        )
    mx.clear_cache()
    return reused, computed[0]
