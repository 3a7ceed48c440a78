"""Where one decode step's time goes, for the engine-overhead part.

Runs on the engine thread with the engine's own model (already adapted to the backend):
after a prompt is in the cache, each step is taken apart and timed with
``time.perf_counter``, synchronously:

- graph building: calling the model on one token (lazy, nothing computed);
- the forward pass: evaluating those logits (MLX's CPU work, weight products included);
- the same forward pass with the blocks' own code (`decode_block` switched off: where
  the native decode block serves the model, what it saves; else the same figure);
- attention alone: every layer's decode attention over the cache, in one graph;
- the weight products alone: every linear layer and the output projection on one row,
  evaluated in one graph (what the native kernel, or BLAS, computes in a step);
- sampling: greedy ``argmax`` of the logits, as the engine's decode loop does, and
  the ``logsumexp`` + ``argmax`` of mlx-lm's ``generate_step`` (the engine's before).

In the real loop building the next step overlaps the current step's computation
(``mx.async_eval``), and a synchronous evaluation pays round trips the pipelined loop
hides, so the parts do not add up to the engine's time per token: read them as shares
and against each other (the weight products within the forward pass, the two samplers).
"""

from __future__ import annotations

import statistics
import time

import mlx.core as mx
import mlx.nn as nn

PARTS = (
    "build_ms",
    "forward_ms",
    "forward_own_blocks_ms",
    "products_ms",
    "attention_ms",
    "argmax_ms",
    "logsumexp_argmax_ms",
)


def _products(model) -> list:
    """Callables for every weight product of one step: the linears, the output layer."""
    calls = [
        module
        for _, module in model.named_modules()
        if isinstance(module, nn.Linear | nn.QuantizedLinear)
    ]
    inner = getattr(model, "model", None)
    embed = getattr(inner, "embed_tokens", None)
    if not hasattr(model, "lm_head") and embed is not None:
        calls.append(embed.as_linear)  # tied output projection
    return calls


def _row_for(module) -> int:
    """Input width of a product (packed quantized weights hold 32 / bits per word)."""
    target = getattr(module, "__self__", module)
    width = target.weight.shape[-1]
    bits = getattr(target, "bits", None)
    quantized = isinstance(target, nn.QuantizedLinear | nn.QuantizedEmbedding)
    return width * 32 // bits if quantized else width


def _products_graph(calls: list, rows: dict[int, mx.array]) -> list[mx.array]:
    return [call(rows[_row_for(call)]) for call in calls]


def _attention_graph(model, cache: list, query: dict) -> list[mx.array]:
    """Every layer's one-token attention over its cache, as the model's code calls it."""
    from mlx_lm.models import base

    outputs = []
    for block, layer in zip(model.layers, cache, strict=False):
        attention = getattr(block, "self_attn", None)
        keys = getattr(layer, "keys", None)
        if attention is None or keys is None or isinstance(keys, tuple | list):
            continue  # another layer kind, or a quantized cache: not split out
        heads = getattr(attention, "n_heads", None)
        if heads is None:
            continue
        head_dim = keys.shape[-1]
        if (heads, head_dim) not in query:
            query[heads, head_dim] = mx.random.normal((1, heads, 1, head_dim))
        visible = layer.offset
        outputs.append(
            base.scaled_dot_product_attention(
                query[heads, head_dim],
                keys[..., :visible, :],
                layer.values[..., :visible, :],
                cache=layer,
                scale=attention.scale,
                mask=None,
            )
        )
    return outputs


def _timed_forward(model, token: mx.array, cache: list) -> float:
    """Seconds to evaluate one token's logits; the cache is cut back afterwards."""
    logits = model(token[None], cache=cache)[:, -1, :]
    started = time.perf_counter()
    mx.eval(logits)
    seconds = time.perf_counter() - started
    for layer in cache:
        layer.trim(1)
    return seconds


def inner_model(model):
    """The module holding the layers (``model.model`` for mlx-lm's usual wrapper)."""
    inner = getattr(model, "model", None)
    return inner if hasattr(inner, "layers") else model


def measure_split(model, prompt: list[int], steps: int) -> dict[str, float]:
    """Median milliseconds of each part of a decode step (see the module docstring).

    Args:
        model: The engine's model; call on the engine thread.
        prompt: Tokens to prefill first (the step then attends to them).
        steps: Decode steps to time.

    Returns:
        One median per name of `PARTS`.
    """
    from mlx_lm.models.cache import make_prompt_cache

    from app.core.engine.cpu import decode_block

    cache = make_prompt_cache(model)
    model(mx.array(prompt[:-1])[None], cache=cache)
    mx.eval([layer.state for layer in cache])
    calls = _products(model)
    rows = {width: mx.random.normal((1, 1, width)) for width in map(_row_for, calls)}
    mx.eval(list(rows.values()))
    token = mx.array(prompt[-1:])
    times: dict[str, list[float]] = {name: [] for name in PARTS}
    queries: dict = {}
    was_on = decode_block.switched_on()
    for _ in range(steps):
        decode_block.switch(False)
        try:
            times["forward_own_blocks_ms"].append(_timed_forward(model, token, cache))
        finally:
            decode_block.switch(was_on)
        attention = _attention_graph(inner_model(model), cache, queries)
        started = time.perf_counter()
        mx.eval(attention)
        times["attention_ms"].append(time.perf_counter() - started)
        started = time.perf_counter()
        logits = model(token[None], cache=cache)[:, -1, :]
        built = time.perf_counter()
        mx.eval(logits)
        computed = time.perf_counter()
        greedy = mx.argmax(logits, axis=-1)
        mx.eval(greedy)
        sampled = time.perf_counter()
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        mx.eval(mx.argmax(logprobs, axis=-1), logprobs)
        normalized = time.perf_counter()
        products = _products_graph(calls, rows)
        multiplied = time.perf_counter()
        mx.eval(products)
        done = time.perf_counter()
        token = greedy
        times["build_ms"].append(built - started)
        times["forward_ms"].append(computed - built)
        times["argmax_ms"].append(sampled - computed)
        times["logsumexp_argmax_ms"].append(normalized - sampled)
        times["products_ms"].append(done - multiplied)
    return {name: 1000 * statistics.median(values) for name, values in times.items()}
