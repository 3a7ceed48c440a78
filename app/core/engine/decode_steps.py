"""The decode loop: one sampled token per model step, the next step computed ahead.

The engine used mlx-lm's ``generate_step`` for decoding. That loop also turns every
step's logits into log-probabilities (``logits - logsumexp(logits)``) for its callers;
the engine never reads them, yet on MLX's CPU backend the exponential runs one element
at a time, so a 151,936-token vocabulary cost 2.4–4.5 ms a token (a qwen05-shaped
decode step is 30–100 ms; docs/measured.md, "The decode step"). The samplers the
engine uses (greedy, temperature, top-p: ``mlx_lm.sample_utils.make_sampler``) and its
logits processors (a grammar's mask) give the same token from logits as from
log-probabilities: both are the logits shifted by one constant per row. Otherwise this
mirrors ``generate_step``: the step after token ``n`` is queued (``mx.async_eval``)
before token ``n`` is handed out, so building it overlaps the computation of the
previous one, and processors see every token from the first input on.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import mlx.core as mx
from mlx_lm.generate import generation_stream

# generate_step frees MLX's buffer pool this often; so does this loop.
CLEAR_CACHE_EVERY = 256


def decode_steps(
    model,
    inputs: list[int],
    layers: list,
    sampler: Callable[[mx.array], mx.array],
    *,
    max_tokens: int,
    logits_processors: list | None = None,
    on_first: Callable[[], None] = lambda: None,
) -> Generator[int, None, None]:
    """Yield up to ``max_tokens`` token ids generated after ``inputs``.

    Args:
        model: The model.
        inputs: Tokens the cache does not hold yet (at least one): all but the last
            are prefilled first, the last gives the first token's logits.
        layers: The model's cache entries; extended in place with every input and
            every token handed out (the last one's entries are left for the caller to
            evaluate). Like ``generate_step``, the step after the latest token is
            already computed when the caller stops early.
        sampler: Takes ``(1, vocab)`` logits, returns a ``(1,)`` token array.
        max_tokens: Most tokens to yield.
        logits_processors: Called as ``processor(tokens, logits)`` with every token
            seen so far (``inputs`` included) before sampling, as mlx-lm does.
        on_first: Called once the first token is computed (the prompt is in).

    Raises:
        ValueError: ``inputs`` is empty.
    """
    if not inputs:
        raise ValueError("inputs must not be empty")
    if max_tokens <= 0:
        return
    processors = logits_processors or []
    seen: mx.array | None = None

    def step(tokens: mx.array) -> mx.array:
        nonlocal seen
        logits = model(tokens[None], cache=layers)[:, -1, :]
        if processors:
            seen = tokens if seen is None else mx.concatenate([seen, tokens])
            for processor in processors:
                logits = processor(seen, logits)
        return sampler(logits)

    with mx.stream(generation_stream):
        tokens = mx.array(inputs)
        if len(inputs) > 1:
            model(tokens[None, :-1], cache=layers)
            mx.eval([layer.state for layer in layers])
            seen = tokens[:-1] if processors else None
            tokens = tokens[-1:]
        current = step(tokens)
        mx.async_eval(current)
        produced = 0
        while True:
            ahead = None
            if produced + 1 < max_tokens:
                ahead = step(current)
                mx.async_eval(ahead)
            else:
                # The last token is fed too, so the cache holds the whole reply (the
                # next turn starts after it); its logits are never computed.
                model(current[None], cache=layers)
            token = int(current.item())  # type: ignore[arg-type]
            if produced == 0:
                on_first()
            yield token
            produced += 1
            if ahead is None:
                return
            if produced % CLEAR_CACHE_EVERY == 0:
                mx.clear_cache()
            current = ahead
