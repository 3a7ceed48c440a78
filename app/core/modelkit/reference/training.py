"""Train the reference model: circuit at initialisation, then text + recall tasks.

Recipe (shared/NOTES-mlx.md, "A small model with real recall is feasible here"):
AdamW (betas 0.9 / 0.95), linear warm-up then cosine decay, gradient norm clipped at
1.0, fp32 on the CPU (OpenBLAS), sequences of 512 tokens and then 1,280 so pass keys
far apart are trained too. Everything is fixed by the seed: the circuit's random parts,
the data order, the task draws. The run is measured in steps, not minutes, so the same
seed gives the same model however busy the machine is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.models.base import create_attention_mask
from mlx_lm.utils import _get_classes

from app.core.modelkit.reference import circuit, corpus, tool_heads
from app.core.modelkit.reference.geometry import reference_config
from app.core.modelkit.reference.recipes import (
    DEFAULT_FORMAT_RECIPE,
    DEFAULT_RECIPE,
    FormatRecipe,
    TrainingRecipe,
)


@dataclass(frozen=True)
class StepReport:
    """Progress of one optimizer step.

    Attributes:
        step: 1-based step number.
        total_steps: Steps in the whole run.
        loss: Mean cross-entropy of the step's batch (nats per token).
        learning_rate: The rate used.
        tokens: Training tokens seen so far.
        elapsed_s: Wall time since training started.
    """

    step: int
    total_steps: int
    loss: float
    learning_rate: float
    tokens: int
    elapsed_s: float


@dataclass
class TrainingLog:
    """What a run did, for the loss curve and the documentation."""

    steps: list[StepReport] = field(default_factory=list)
    seconds: float = 0.0


def new_model(seed: int) -> nn.Module:
    """A reference-geometry llama with the copy circuit written in (`circuit`)."""
    config = reference_config()
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    circuit.initialise(model, seed)
    return model


def _schedule(recipe: TrainingRecipe):
    warmup = optim.linear_schedule(0.0, recipe.peak_learning_rate, recipe.warmup_steps)
    cosine = optim.cosine_decay(
        recipe.peak_learning_rate,
        recipe.total_steps - recipe.warmup_steps,
        end=recipe.final_learning_rate,
    )
    return optim.join_schedules([warmup, cosine], [recipe.warmup_steps])


def _loss(model: nn.Module, batch: mx.array) -> mx.array:
    logits = model(batch[:, :-1])
    return nn.losses.cross_entropy(logits, batch[:, 1:], reduction="mean")


def train(
    tokenizer,
    recipe: TrainingRecipe = DEFAULT_RECIPE,
    on_step: Callable[[StepReport], None] = lambda _: None,
    is_cancelled: Callable[[], bool] = lambda: False,
    on_checkpoint: Callable[[nn.Module, int], None] | None = None,
    checkpoint_every: int = 100,
    stream: corpus.TokenStream | None = None,
) -> tuple[nn.Module, TrainingLog]:
    """Train a reference model from scratch.

    Args:
        tokenizer: The trained `tokenizers.Tokenizer` of the model folder.
        recipe: Stages, schedule and seed.
        on_step: Called after every step (progress, loss curve).
        is_cancelled: Polled after every step; a cancelled run returns what it has.
        on_checkpoint: Called with the model every ``checkpoint_every`` steps (to watch
            recall while training); it must not change the model.
        checkpoint_every: Steps between checkpoints.
        stream: The tokenized training documents, if already at hand (tests).

    Returns:
        The model (fp32) and the log of every step.
    """
    mx.random.seed(recipe.seed)
    model = new_model(recipe.seed)
    masks = circuit.protect(model) if recipe.protect_circuit else {}
    if stream is None:
        train_docs = [d for d in corpus.documents() if not d.held_out]
        stream = corpus.TokenStream(tokenizer, train_docs)
    optimizer = optim.AdamW(
        learning_rate=_schedule(recipe),
        betas=[0.9, 0.95],
        weight_decay=recipe.weight_decay,
    )
    loss_and_grad = nn.value_and_grad(model, _loss)
    state = [model.state, optimizer.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def step(batch):
        loss, grads = loss_and_grad(model, batch)
        if masks:
            flat = dict(tree_flatten(grads))
            for name, mask in masks.items():
                flat[name] = flat[name] * mask
            grads = tree_unflatten(list(flat.items()))
        grads, _ = optim.clip_grad_norm(grads, recipe.clip_norm)
        optimizer.update(model, grads)
        return loss

    log = TrainingLog()
    started = time.perf_counter()
    tokens = 0
    done = 0
    for index, stage in enumerate(recipe.stages):
        sequences = corpus.training_sequences(
            stream, stage.length, recipe.seed * 1000 + index, stage.max_distance
        )
        for _ in range(stage.steps):
            batch = mx.array(np.stack([next(sequences) for _ in range(stage.batch)]))
            rate = float(optimizer.learning_rate.item())
            loss = step(batch)
            mx.eval(state)
            done += 1
            tokens += stage.batch * stage.length
            report = StepReport(
                step=done,
                total_steps=recipe.total_steps,
                loss=float(loss.item()),
                learning_rate=rate,
                tokens=tokens,
                elapsed_s=time.perf_counter() - started,
            )
            log.steps.append(report)
            on_step(report)
            if on_checkpoint is not None and done % checkpoint_every == 0:
                on_checkpoint(model, done)
            if is_cancelled():
                log.seconds = time.perf_counter() - started
                return model, log
    log.seconds = time.perf_counter() - started
    return model, log


def with_vocabulary(model: nn.Module, vocab_size: int, seed: int) -> nn.Module:
    """A copy of ``model`` (float32) with `circuit.new_token_rows` appended.

    The weights are rounded through float16 first: that is what the committed folder
    holds, so training from it and from a fresh run start from the same numbers.
    """
    config = reference_config()
    config["vocab_size"] = vocab_size
    model_class, args_class = _get_classes(config)
    grown = model_class(args_class.from_dict(config))
    weights = {
        name: value.astype(mx.float16).astype(mx.float32)
        for name, value in dict(tree_flatten(model.parameters())).items()
    }
    name = "model.embed_tokens.weight"
    old = weights[name]
    extra = vocab_size - old.shape[0]
    if extra < 0:
        raise ValueError(f"vocabulary cannot shrink ({old.shape[0]} -> {vocab_size})")
    rows = circuit.new_token_rows(extra, np.random.default_rng(seed + 7919))
    weights[name] = mx.concatenate([old, mx.array(rows)], axis=0)
    grown.update(tree_unflatten(list(weights.items())))
    mx.eval(grown.parameters())
    return grown


FROZEN_FORMAT_LAYERS = 2


def _format_loss(
    model: nn.Module,
    batch: mx.array,
    weights: mx.array,
    frozen: int = FROZEN_FORMAT_LAYERS,
) -> mx.array:
    """Weighted cross-entropy, no gradient into the first ``frozen`` layers' input."""
    inner = model.model
    h = inner.embed_tokens(batch[:, :-1])
    mask = create_attention_mask(h, None)
    for index, layer in enumerate(inner.layers):
        if index == frozen:
            h = mx.stop_gradient(h)
        h = layer(h, mask, cache=None)
    logits = inner.embed_tokens.as_linear(inner.norm(h))
    losses = nn.losses.cross_entropy(logits, batch[:, 1:], reduction="none")
    target_weights = weights[:, 1:]
    return (losses * target_weights).sum() / target_weights.sum()


def train_format(
    model: nn.Module,
    stream: corpus.TokenStream,
    words: list[str],
    recipe: FormatRecipe = DEFAULT_FORMAT_RECIPE,
    on_step: Callable[[StepReport], None] = lambda _: None,
    on_checkpoint: Callable[[nn.Module, int], None] | None = None,
    checkpoint_every: int = 10,
    fresh_tool_heads: bool = True,
) -> tuple[nn.Module, TrainingLog]:
    """Run the format stage on ``model`` (already grown by `with_vocabulary`).

    Args:
        model: The model; trained in place and returned.
        stream: Training documents tokenized with the format tokens added.
        words: Tool-argument values (`format_tasks.argument_words`).
        recipe: The stage's recipe.
        on_step: Called after every step.
        on_checkpoint: ``(model, step)`` every ``checkpoint_every`` steps.
        checkpoint_every: Steps between checkpoints.
        fresh_tool_heads: With ``recipe.tool_heads``, write the heads' starting
            weights first (False when ``model`` already has trained ones).
    """
    mx.random.seed(recipe.seed)
    masks = circuit.protect(model)
    for layer in model.model.layers[:FROZEN_FORMAT_LAYERS]:
        layer.freeze()
    frozen = FROZEN_FORMAT_LAYERS
    if recipe.tool_heads:
        if fresh_tool_heads:
            circuit.write_tool_heads(model, stream.tokenizer.token_to_id)
        attention = model.model.layers[1].self_attn
        attention.q_proj.unfreeze()
        attention.o_proj.unfreeze()
        masks.update(circuit.tool_head_masks(model))
        frozen = 1
    elif recipe.exact_tool_heads:
        if fresh_tool_heads:
            fitting = corpus.format_training_sequences(
                stream,
                recipe.length,
                recipe.seed * 1000 + 91,
                recipe.max_distance,
                words,
                recipe.mix,
            )
            tool_heads.write_exact_tool_heads(
                model, stream.tokenizer.token_to_id, fitting
            )
            tool_heads.weight_oldest_match(model, recipe.oldest_match_weight)
        masks.update(tool_heads.embedding_mask(model, stream.tokenizer.token_to_id))
        # Their outputs learn how loud to be next to layers 2-3's guesses; the
        # queries and keys stay as written.
        model.model.layers[1].self_attn.o_proj.unfreeze()
        masks["model.layers.1.self_attn.o_proj.weight"] = circuit.tool_head_masks(
            model
        )["model.layers.1.self_attn.o_proj.weight"]
        frozen = 1
    warmup = optim.linear_schedule(0.0, recipe.learning_rate, recipe.warmup_steps)
    cosine = optim.cosine_decay(
        recipe.learning_rate,
        max(1, recipe.steps - recipe.warmup_steps),
        end=recipe.final_learning_rate,
    )
    optimizer = optim.AdamW(
        learning_rate=optim.join_schedules([warmup, cosine], [recipe.warmup_steps]),
        betas=[0.9, 0.95],
        weight_decay=0.01,
    )
    loss_and_grad = nn.value_and_grad(model, partial(_format_loss, frozen=frozen))
    state = [model.state, optimizer.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def step(batch, weights):
        loss, grads = loss_and_grad(model, batch, weights)
        flat = dict(tree_flatten(grads))
        for name, mask in masks.items():
            if name in flat:  # layer 0's MLP is frozen in this stage
                flat[name] = flat[name] * mask
        grads, _ = optim.clip_grad_norm(tree_unflatten(list(flat.items())), 1.0)
        optimizer.update(model, grads)
        return loss

    sequences = corpus.format_training_sequences(
        stream,
        recipe.length,
        recipe.seed * 1000 + 77,
        recipe.max_distance,
        words,
        recipe.mix,
        recipe.tool_emphasis,
    )
    log = TrainingLog()
    started = time.perf_counter()
    for done in range(1, recipe.steps + 1):
        drawn = [next(sequences) for _ in range(recipe.batch)]
        batch = mx.array(np.stack([ids for ids, _ in drawn]))
        weights = mx.array(np.stack([weight for _, weight in drawn]))
        rate = float(optimizer.learning_rate.item())
        loss = step(batch, weights)
        mx.eval(state)
        report = StepReport(
            step=done,
            total_steps=recipe.steps,
            loss=float(loss.item()),
            learning_rate=rate,
            tokens=done * recipe.batch * recipe.length,
            elapsed_s=time.perf_counter() - started,
        )
        log.steps.append(report)
        on_step(report)
        if on_checkpoint is not None and done % checkpoint_every == 0:
            on_checkpoint(model, done)
    log.seconds = time.perf_counter() - started
    return model, log


def parameter_count(model: nn.Module) -> int:
    """Number of scalar parameters."""
    flat = tree_flatten(model.parameters())
    assert isinstance(flat, list), "tree_flatten returns a dict only into a dict"
    return sum(v.size for _, v in flat)
