"""Write a copy ("induction") circuit into a fresh reference model's weights.

Plain training on this CPU does not find in-context recall in the time available
(shared/NOTES-mlx.md: 0 % pass-key recall after 15 minutes; a pure copy task stayed at
2–3 %), so the mechanism is built by hand and training only has to keep it and learn
text around it. The circuit, in the residual stream of width 256:

* dimension 0 holds a constant (1) in every token embedding; dimensions 1–128 hold the
  token's identity (a random unit vector ``e_v``); three 32-wide slots ``P1..P3`` start
  empty, and the last 31 dimensions are left for training.
* Layer 0, "previous-token" heads 0, 1, 2 attend exactly 1, 2 and 3 tokens back. Their
  queries and keys read only the constant dimension, so the score depends on position
  alone: on the 10 highest-frequency rotary pairs the query is the key rotated by
  ``k`` steps, making the score a sum of ``cos((d - k) ω_i)`` that peaks at distance
  ``d = k`` (its nearest rival, at ``d = k ± 1``, is ~20 logits lower at any length).
  Each head copies a 32-dim code ``M e`` of the token it finds into slot ``P_k``.
* Layer 1, copy heads 0 and 2 (one per KV head, 16 code dimensions each): the query at
  position ``t`` holds the codes of tokens ``t, t-1, t-2``, the key at ``s`` holds those
  of ``s-1, s-2, s-3``, so the score is high where the three tokens before ``s`` equal
  the last three tokens; the value is ``e`` of the token at ``s``, written back onto the
  identity dimensions, where the tied unembedding turns it into "predict the token that
  followed last time". Query and key sit on the 25 lowest-frequency rotary pairs, which
  turn by under 0.5 rad over 2K tokens, so matching barely depends on distance.
* Everything else (layers 2–3, all MLPs, the other heads) starts as small noise.

The circuit alone copies ~94 % of a repeated span and finds pass keys at 64–1024 tokens;
its text loss is worse than uniform until training fixes it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from app.core.modelkit.reference import geometry as g

CONSTANT_DIM = 0
IDENTITY = slice(1, 129)
CODE_WIDTH = 32
# Slots P1, P2, P3: where layer 0 writes the codes of the tokens 1, 2, 3 back.
CODE_SLOTS = tuple(
    slice(129 + k * CODE_WIDTH, 129 + (k + 1) * CODE_WIDTH) for k in range(3)
)
POSITION_PAIRS = 10
# Rotary pairs whose angle over 2,048 positions stays under 0.5 rad (theta 1e6, d 128).
MATCH_PAIRS = range(39, 64)
POSITION_GAIN = 1.2
MATCH_GAIN = 3.0
COPY_GAIN = 4.0
NOISE = 0.002
# Layer 1's copy heads, one per KV head (0 and 1).
COPY_HEADS = (0, 2)


def match_slot_dims(position: int) -> list[int]:
    """The copy heads' rows (rotary dimensions) matching the token ``position`` back.

    Position 0 holds the current token against the one before ``s``, 1 and 2 the
    tokens one and two back against two and three before ``s``; one row per code
    dimension a copy head reads, on the slow `MATCH_PAIRS`.
    """
    half = g.HEAD_DIM // 2
    match_dims = [*MATCH_PAIRS, *(p + half for p in MATCH_PAIRS)]
    part = CODE_WIDTH // 2
    return match_dims[position * part : (position + 1) * part]


def _rotary_frequencies() -> np.ndarray:
    half = g.HEAD_DIM // 2
    return g.ROPE_THETA ** (-2.0 * np.arange(half) / g.HEAD_DIM)


def _norm_scale(squared_norm: float) -> float:
    """What RMSNorm multiplies a residual vector of this squared norm by."""
    return math.sqrt(g.HIDDEN_SIZE / squared_norm)


def circuit_weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Return the hand-built weights (name -> array) of the embedding and layers 0–1.

    Args:
        rng: Source of the token vectors, code projections and noise.
    """
    d, hd, half = g.HIDDEN_SIZE, g.HEAD_DIM, g.HEAD_DIM // 2
    identity_width = IDENTITY.stop - IDENTITY.start
    vectors = rng.standard_normal((g.VOCAB_SIZE, identity_width))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    embedding = rng.uniform(-NOISE, NOISE, (g.VOCAB_SIZE, d))
    embedding[:, CONSTANT_DIM] = 1.0
    embedding[:, IDENTITY] = vectors
    for slot in CODE_SLOTS:
        embedding[:, slot] = 0.0
    # Orthonormal rows scaled so a token's code has norm ~1.
    basis, _ = np.linalg.qr(rng.standard_normal((identity_width, CODE_WIDTH)))
    code = basis.T * math.sqrt(identity_width / CODE_WIDTH)
    omega = _rotary_frequencies()

    # Layer 0: previous-token heads (query heads 0, 1 share KV head 0; 2 uses KV head 1).
    q0, k0 = np.zeros((4 * hd, d)), np.zeros((2 * hd, d))
    v0, o0 = np.zeros((2 * hd, d)), np.zeros((d, 4 * hd))
    for kv in range(2):
        k0[kv * hd : kv * hd + POSITION_PAIRS, CONSTANT_DIM] = POSITION_GAIN
        v0[kv * hd : kv * hd + CODE_WIDTH, IDENTITY] = code
    scale0 = _norm_scale(1.0 + 1.0)
    for head, back in enumerate((1, 2, 3)):
        for i in range(POSITION_PAIRS):
            # RoPE turns pair i by position * omega_i; a query turned back by
            # ``back`` steps meets the key exactly when the key is ``back`` tokens old.
            q0[head * hd + i, CONSTANT_DIM] = POSITION_GAIN * math.cos(back * omega[i])
            q0[head * hd + half + i, CONSTANT_DIM] = -POSITION_GAIN * math.sin(
                back * omega[i]
            )
        o0[CODE_SLOTS[head], head * hd : head * hd + CODE_WIDTH] = (
            np.eye(CODE_WIDTH) / scale0
        )

    # Layer 1: copy heads 0 (KV head 0) and 2 (KV head 1), 16 code dimensions each.
    q1, k1 = np.zeros((4 * hd, d)), np.zeros((2 * hd, d))
    v1, o1 = np.zeros((2 * hd, d)), np.zeros((d, 4 * hd))
    part = CODE_WIDTH // 2
    scale1 = _norm_scale(1.0 + 1.0 + 3.0)
    for head, kv in zip(COPY_HEADS, (0, 1), strict=True):
        codes = range(kv * part, (kv + 1) * part)
        for position in range(3):
            dims = match_slot_dims(position)
            for c, dim in zip(codes, dims, strict=True):
                if position == 0:  # the current token: its code from its identity
                    q1[head * hd + dim, IDENTITY] = MATCH_GAIN * code[c]
                else:  # tokens t-1, t-2: slots P1, P2
                    q1[head * hd + dim, CODE_SLOTS[position - 1].start + c] = MATCH_GAIN
                # keys: tokens s-1, s-2, s-3 in slots P1, P2, P3
                k1[kv * hd + dim, CODE_SLOTS[position].start + c] = MATCH_GAIN
        v1[kv * hd : kv * hd + identity_width, IDENTITY] = np.eye(identity_width)
        o1[IDENTITY, head * hd : head * hd + identity_width] = (
            np.eye(identity_width) * (COPY_GAIN / 2) / scale1
        )
    weights = {"model.embed_tokens.weight": embedding}
    for layer, (q, k, v, o) in enumerate(((q0, k0, v0, o0), (q1, k1, v1, o1))):
        prefix = f"model.layers.{layer}.self_attn"
        weights[f"{prefix}.q_proj.weight"] = q
        weights[f"{prefix}.k_proj.weight"] = k
        weights[f"{prefix}.v_proj.weight"] = v
        weights[f"{prefix}.o_proj.weight"] = o
    return weights


def initialise(model: nn.Module, seed: int) -> None:
    """Give ``model`` (a fresh reference llama) the circuit plus small noise elsewhere.

    Args:
        model: An mlx-lm llama with the reference geometry.
        seed: Seed of every random value; the same seed gives identical weights.
    """
    rng = np.random.default_rng(seed)
    hand_built = circuit_weights(rng)
    parameters = []
    flat = tree_flatten(model.parameters())
    assert isinstance(flat, list), "tree_flatten returns a dict only into a dict"
    for name, value in sorted(flat, key=lambda kv: kv[0]):
        if name in hand_built:
            array = hand_built[name]
        elif name.endswith("norm.weight"):
            array = np.ones(value.shape)
        else:
            array = rng.uniform(-NOISE, NOISE, value.shape)
        if tuple(array.shape) != tuple(value.shape):
            raise ValueError(f"{name}: circuit shape {array.shape} != {value.shape}")
        parameters.append((name, mx.array(array.astype(np.float32))))
    model.update(tree_unflatten(parameters))
    mx.eval(model.parameters())


# What training may not change, so the circuit keeps working (see `protect`).
_READ_BY_CIRCUIT = slice(0, CODE_SLOTS[-1].stop)  # constant, identity and code slots


def protect(model: nn.Module) -> dict[str, mx.array]:
    """Freeze the circuit and return gradient masks that keep its inputs clean.

    Measured here: left trainable, text training wore pass-key recall at 512 tokens
    down from 100 % to 85–93 %; with only the circuit's attention frozen, to 50 % after
    100 steps (the embedding and layer 0's MLP rewrote what the copy head reads). So:

    * layers 0 and 1: attention and input norms frozen;
    * the embedding's constant dimension and its (empty) code slots never change;
    * layer 0's MLP writes only into the free dimensions, never into what layer 1's
      copy head reads (constant, identity, code slots).

    The identity dimensions of the embedding still train (they are the tied output
    too); queries and keys both derive their codes from them, so they stay matched.

    Args:
        model: A reference model (after `initialise`).

    Returns:
        Parameter path → 0/1 mask to multiply its gradient by.
    """
    for layer in model.model.layers[:2]:
        layer.self_attn.freeze()
        layer.input_layernorm.freeze()
    vocab = model.model.embed_tokens.weight.shape[0]
    embedding = np.ones((vocab, g.HIDDEN_SIZE), dtype=np.float32)
    embedding[:, CONSTANT_DIM] = 0.0
    embedding[:, CODE_SLOTS[0].start : CODE_SLOTS[-1].stop] = 0.0
    down = np.ones((g.HIDDEN_SIZE, g.INTERMEDIATE_SIZE), dtype=np.float32)
    down[_READ_BY_CIRCUIT, :] = 0.0
    return {
        "model.embed_tokens.weight": mx.array(embedding),
        "model.layers.0.mlp.down_proj.weight": mx.array(down),
    }


def new_token_rows(count: int, rng: np.random.Generator) -> np.ndarray:
    """Embedding rows for tokens added after training, shaped as `circuit_weights` does.

    The constant dimension is 1 and the code slots are empty (what the circuit reads
    stays valid), the identity is a fresh random unit vector, the free dimensions
    small noise.

    Args:
        count: How many rows.
        rng: Source of the identities and noise.
    """
    identity_width = IDENTITY.stop - IDENTITY.start
    vectors = rng.standard_normal((count, identity_width))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    rows = rng.uniform(-NOISE, NOISE, (count, g.HIDDEN_SIZE))
    rows[:, CONSTANT_DIM] = 1.0
    rows[:, IDENTITY] = vectors
    for slot in CODE_SLOTS:
        rows[:, slot] = 0.0
    return rows.astype(np.float32)


# Layer 1's two spare query heads (1 shares KV head 0 with copy head 0, 3 shares KV
# head 1 with copy head 2) become the tool heads; their keys and values are the copy
# circuit's: the codes of the three tokens before each position, and its identity.
VALUE_HEAD = 1
RESULT_HEAD = 3
TOOL_HEAD_GAIN = 3.0
TOOL_COPY_GAIN = 4.0


def write_tool_heads(model: nn.Module, token_id: Callable[[str], int]) -> None:
    """Start layer 1's spare heads as "copy the quoted value" and "copy the result".

    Learned from scratch in the trainable layers, neither behaviour appeared in 560
    format-stage steps (docs/reference-model.md: the call's value right in 0 % of
    catalogue probes, the answer repeating a tool result in 3 %): the written-in
    induction head matches three tokens, and no three tokens before a value are the
    same in a question (``in "Coimbra"``) and in the call's JSON (``city": "``). These
    heads reuse the circuit's keys (codes of the tokens 1–3 back) and values (the
    token's identity), so only a query is needed:

    * `VALUE_HEAD`: when the current token is ``Ġ"`` (a string value opens), attend to
      positions that follow ``Ġ"`` and do not follow ``":`` / ``",`` (JSON's own
      strings), i.e. the first token of a quoted word in the conversation.
    * `RESULT_HEAD`: right after ``</think>`` + ``ĊĊ`` (where an answer starts), attend
      to the token two after ``<tool_response>`` (its first word), and one step later to
      the token three after it; the induction head carries on from there.

    These are a starting point: the format stage trains both queries and outputs
    (`tool_head_masks`), because the 16-dimensional codes the keys hold correlate by
    chance (``{`` and ``Ġ"`` at cosine 0.75), which a hand-set query cannot undo.

    Args:
        model: A reference model in the format (its tokenizer has the format tokens).
        token_id: Token string → id in the model's tokenizer.
    """
    hd, part = g.HEAD_DIM, CODE_WIDTH // 2
    embedding = np.array(model.model.embed_tokens.weight.astype(mx.float32))
    identity = {}
    codes = {}
    code = np.array(model.model.layers[0].self_attn.v_proj.weight.astype(mx.float32))[
        :CODE_WIDTH, IDENTITY
    ]
    for token in ('Ġ"', '":', '",', "name", "ĊĊ", "</think>", "<tool_response>"):
        identity[token] = embedding[token_id(token), IDENTITY]
        codes[token] = code @ identity[token]

    def current(token: str) -> np.ndarray:  # reads 1 where the current token is it
        return identity[token] / (identity[token] @ identity[token])

    def back(token: str) -> np.ndarray:  # reads 1 where a slot holds its code
        return codes[token] / (codes[token] @ codes[token])

    attention = model.model.layers[1].self_attn
    q = np.array(attention.q_proj.weight.astype(mx.float32))
    o = np.array(attention.o_proj.weight.astype(mx.float32))
    dims = [match_slot_dims(p) for p in range(3)]
    gain = TOOL_HEAD_GAIN * MATCH_GAIN
    for head in (VALUE_HEAD, RESULT_HEAD):
        q[head * hd : (head + 1) * hd] = 0.0
        o[:, head * hd : (head + 1) * hd] = 0.0
        o[IDENTITY, head * hd : head * hd + (IDENTITY.stop - IDENTITY.start)] = (
            np.eye(IDENTITY.stop - IDENTITY.start)
            * (TOOL_COPY_GAIN / 2)
            / _norm_scale(5.0)
        )
    for j in range(part):
        row0 = VALUE_HEAD * hd + dims[0][j]
        row1 = VALUE_HEAD * hd + dims[1][j]
        q[row0, IDENTITY] += gain * codes['Ġ"'][j] * current('Ġ"')
        q[row0, CODE_SLOTS[1]] -= gain * codes['Ġ"'][j] * back("name")
        q[row1, IDENTITY] -= gain * (codes['":'][j] + codes['",'][j]) * current('Ġ"')
        c = part + j
        row1 = RESULT_HEAD * hd + dims[1][j]
        row2 = RESULT_HEAD * hd + dims[2][j]
        response = gain * codes["<tool_response>"][c]
        q[row1, IDENTITY] += response * current("ĊĊ")
        q[row1, CODE_SLOTS[0]] += response * back("</think>")
        q[row2, CODE_SLOTS[0]] += response * back("ĊĊ")
        q[row2, CODE_SLOTS[1]] += response * back("</think>")
    attention.q_proj.weight = mx.array(q.astype(np.float32))
    attention.o_proj.weight = mx.array(o.astype(np.float32))
    mx.eval(model.parameters())


def tool_head_masks(model: nn.Module) -> dict[str, mx.array]:
    """Gradient masks that let only the tool heads of layer 1 train (query, output)."""
    hd = g.HEAD_DIM
    attention = model.model.layers[1].self_attn
    q = np.zeros(attention.q_proj.weight.shape, np.float32)
    o = np.zeros(attention.o_proj.weight.shape, np.float32)
    for head in (VALUE_HEAD, RESULT_HEAD):
        q[head * hd : (head + 1) * hd] = 1.0
        o[:, head * hd : (head + 1) * hd] = 1.0
    return {
        "model.layers.1.self_attn.q_proj.weight": mx.array(q),
        "model.layers.1.self_attn.o_proj.weight": mx.array(o),
    }
