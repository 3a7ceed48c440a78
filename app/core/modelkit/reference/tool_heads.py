"""Exact tool heads: layer 1's spare heads rewritten on keys of their own.

The first tool heads (`circuit.write_tool_heads`) reused the copy circuit's keys: the
16-dimensional codes of the 1–3 tokens before each position. Those codes collide by
chance (``{`` and ``Ġ"`` at cosine 0.75), so the value head often landed on the wrong
quoted token, and training its query could not undo that (docs/reference-model.md:
held-out single-tool calls right 2 of 20). Here each head gets key dimensions of its
own, in rows of its KV head that the copy heads never read (their queries are zero
there, so recall is untouched), holding a few exact features of a position:

* "the token before is ``Ġ"``" (a quoted word starts here), "two before is ``":`` or
  ``",``" (a JSON string, not a word the user quoted), "this is ``<|im_start|>``" (a
  sink: where a head looks when it has nothing to copy, its value projected out of the
  output so it writes nothing);
* "one (two) before is ``Ċ`` and two (three) before is ``<tool_response>``" (the first
  and second token of a tool's result).

Each feature is a linear detector fitted by least squares on layer 1's real (normed)
inputs over a sample of the training mix, reading only what the circuit puts there:
the token's identity or the full 32-dimensional code of a token 1–3 back (twice the
copy head's 16). Queries are written the same way: the value head fires on ``Ġ"``
(unless two back is ``name``: the tool's name is the induction circuit's to copy), the
result head on ``ĊĊ`` and on the token after it (where an answer starts after
``</think>``). Features sit on rotary pairs that turn little over a prompt (two that
turn under 0.002 rad over 1K tokens, and pair 38, 0.3 rad, for the sink).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models.base import create_attention_mask

from app.core.modelkit.reference import circuit
from app.core.modelkit.reference import geometry as g

# Rotary dimensions the copy heads leave empty: two of `circuit.MATCH_PAIRS` (which
# turn under 0.002 rad over 1K tokens); the sink's pair turns 0.3 rad over 1K.
FEATURE_DIMS = (126, 127)
SINK_DIM = 38
# Logits: a head's target scores GAIN, its sink GAIN / 2, anything else about 0.
HEAD_GAIN = 30.0
# What a head writes onto the identity dimensions, as the copy heads do (per head).
OUTPUT_GAIN = 4.0
# The value head's query: "a quote opens here" weighs this much against "the name's
# quote" (read ~0.93 there and up to ~0.4 for other keys), so a key like ``path``
# still fires it; and "a JSON string follows" excludes at this fraction of the gain
# (its detector reads up to ~0.2 on a word the user quoted, which cost the target
# 6 logits against its sink at the full gain: measured on `path`). Above
# QUOTE_WEIGHT - 1/2, so a JSON string still scores below the sink (at 0.5 the head
# copied a schema's ``default`` when the question quoted nothing: measured).
QUOTE_WEIGHT = 1.2
JSON_WEIGHT = 0.8
# The copy heads' match on the token two back (t-2 against s-3) weighs this much
# (`weight_oldest_match`): after the value's first token, the question's value matches
# the call's last two tokens, and so does every JSON string of the tools list on the
# other two, a tie this breaks.
OLDEST_MATCH_WEIGHT = 0.5
FIT_SEQUENCES = 96
# The features are written into the keys this much larger and read by queries this
# much smaller: the same scores, but a quantized KV cache rounds a key to a step of
# its group's largest value, which the copy circuit's keys set (12-15 here). At scale
# 1 (features ~1, queries 200-500) a 4-bit cache moved these heads' scores by up to
# ~20 logits: check-quality's 4-bit top-1 fell from 94 % to 82 % (measured).
KEY_SCALE = 8.0


def layer1_inputs(model: nn.Module, ids: np.ndarray) -> np.ndarray:
    """Layer 1's attention input (after its RMSNorm) for ``ids`` (batch, length)."""
    inner = model.model
    h = inner.embed_tokens(mx.array(ids))
    mask = create_attention_mask(h, None)
    h = inner.layers[0](h, mask, cache=None)
    normed = inner.layers[1].input_layernorm(h)
    return np.array(normed.astype(mx.float32))


def fit_detector(
    inputs: np.ndarray,
    target: np.ndarray,
    columns: slice,
    ridge: float = 1e-3,
    rounds: int = 1,
) -> np.ndarray:
    """Least-squares weights (over all 256 input dims) reading ``columns`` + constant.

    Positives and negatives weigh the same in the first fit (positives are rare), so
    the detector reads about 1 where ``target`` holds and about 0 elsewhere; each
    further round (``rounds`` > 1) weighs ten times more the examples it still reads
    off by over 0.3. Measured: four rounds widened some worst-case margins and
    narrowed others, and the untrained heads then made no right call (0 of 30
    quoted probes), so one round is the default.
    """
    x = inputs[:, columns]
    x = np.concatenate(
        [x, inputs[:, circuit.CONSTANT_DIM : circuit.CONSTANT_DIM + 1]], 1
    )
    positive = target.astype(bool)
    if not positive.any():
        raise ValueError("no positive example to fit a detector on")
    sample = np.where(positive, 0.5 / positive.sum(), 0.5 / (~positive).sum())
    goal = target.astype(np.float64)
    for _ in range(rounds):
        xw = x * sample[:, None]
        solution = np.linalg.solve(x.T @ xw + ridge * np.eye(x.shape[1]), xw.T @ goal)
        sample = np.where(np.abs(x @ solution - goal) > 0.3, sample * 10.0, sample)
    weights = np.zeros(g.HIDDEN_SIZE)
    weights[columns] = solution[:-1]
    weights[circuit.CONSTANT_DIM] += solution[-1]
    return weights


def _shifted(ids: np.ndarray, back: int, fill: int = -1) -> np.ndarray:
    out = np.full_like(ids, fill)
    out[:, back:] = ids[:, :-back]
    return out


def _slot(back: int) -> slice:
    return circuit.CODE_SLOTS[back - 1]


# Tokens whose codes the heads' detectors must tell apart from every other's: JSON's
# string openers (``{"city": "`` is no quoted word) and the tool result's opener.
RECODED = ('":', '",', "<tool_response>")
CODE_NORM = 1.2


def recode(model: nn.Module, tokens: list[int], ids: np.ndarray) -> None:
    """Give ``tokens`` codes in the directions other tokens' codes use least.

    A code is a fixed projection of the token's identity (layer 0's value), so moving
    the identity inside that projection's row space moves the code and nothing else
    of the circuit: queries and keys both derive from it. The directions are the
    eigenvectors of smallest eigenvalue of the frequency-weighted code covariance of
    ``ids`` (the other tokens' codes barely reach into them), one per token.
    """
    embedding = np.array(model.model.embed_tokens.weight.astype(mx.float32))
    v = np.array(model.model.layers[0].self_attn.v_proj.weight.astype(mx.float32))
    project = v[: circuit.CODE_WIDTH, circuit.IDENTITY]
    identities = embedding[:, circuit.IDENTITY]
    codes = identities @ project.T
    counts = np.bincount(ids.reshape(-1), minlength=len(embedding)).astype(np.float64)
    counts[tokens] = 0.0
    covariance = (codes * counts[:, None]).T @ codes
    _, vectors = np.linalg.eigh(covariance)
    # project @ project.T is a multiple of the identity (orthonormal rows, scaled).
    gram = float(np.mean(np.diag(project @ project.T)))
    for rank, token in enumerate(tokens):
        target = vectors[:, rank] * CODE_NORM
        identities[token] += project.T @ (target - codes[token]) / gram
    embedding[:, circuit.IDENTITY] = identities
    model.model.embed_tokens.weight = mx.array(embedding.astype(np.float32))
    mx.eval(model.parameters())


def weight_oldest_match(model: nn.Module, factor: float) -> None:
    """Scale the copy heads' match on the token two back by ``factor``.

    The copy heads score three slots alike: the current token against the one before
    ``s``, then one and two back against two and three before ``s``. Once a call has
    copied a value's first token ``v1`` after ``": "``, the question's ``"v1 v2`` matches
    the last two tokens (``Ġ"``, ``v1``) and the second token of every JSON string in the
    tools list matches the two before them (``":``, ``Ġ"``): a tie, which the induction
    then breaks at random. Weighing the oldest slot less makes the two most recent
    tokens count more. Measured on the single-tool probes (docs/reference-model.md):
    with the first exact heads, ×0.5 took right calls from 8 to 10 of 20; in the
    value-copy phase, leaving it out took them from 17 to 13 of 20 (thinking on) and
    from 4 to 1 of 10 (off). It costs a little pass-key recall far back.
    """
    attention = model.model.layers[1].self_attn
    q = np.array(attention.q_proj.weight.astype(mx.float32))
    for head in circuit.COPY_HEADS:
        for dim in circuit.match_slot_dims(2):
            q[head * g.HEAD_DIM + dim, :] *= factor
    attention.q_proj.weight = mx.array(q)
    mx.eval(attention.q_proj.weight)


def write_exact_tool_heads(
    model: nn.Module,
    token_id,
    sequences: Iterator[tuple[np.ndarray, np.ndarray]],
    head_gain: float = HEAD_GAIN,
    output_gain: float = OUTPUT_GAIN,
    value_gain: float = OUTPUT_GAIN,
    recode_tokens: bool = True,
) -> dict[str, float]:
    """Rewrite layer 1's heads 1 and 3 (queries, outputs, their own key rows).

    Args:
        model: A reference model in the format (float32).
        token_id: Token string → id in its tokenizer.
        sequences: Training sequences (``corpus.format_training_sequences``) to fit
            the detectors on; `FIT_SEQUENCES` are drawn.
        head_gain: Attention logit of a head's target (its sink gets half).
        output_gain: Weight of the copied identity in the residual (result head).
        value_gain: The same for the value head.

    Returns:
        Each detector's worst margin on the fitting sample (smallest positive read
        minus largest negative read), for the log.
    """
    ids = np.stack([next(sequences)[0] for _ in range(FIT_SEQUENCES)])
    if recode_tokens:
        recode(model, [token_id(t) for t in RECODED], ids)
    inputs = layer1_inputs(model, ids).reshape(-1, g.HIDDEN_SIZE)

    def is_(token: str, back: int = 0) -> np.ndarray:
        shifted = ids if back == 0 else _shifted(ids, back)
        return (shifted == token_id(token)).reshape(-1)

    def columns(back: int) -> slice:
        return circuit.IDENTITY if back == 0 else _slot(back)

    margins: dict[str, float] = {}

    def detector(name: str, target: np.ndarray, back: int) -> np.ndarray:
        weights = fit_detector(inputs, target, columns(back))
        read = inputs @ weights
        margins[name] = float(read[target].min() - read[~target].max())
        return weights

    quote_before = detector("quote@1", is_('Ġ"', 1), 1)
    # ``,`` too: the template's own example call (``<function-name>, "arguments"``)
    json_before = detector("json@2", is_('":', 2) | is_('",', 2) | is_(",", 2), 2)
    at_sink = is_("<|im_start|>")
    sink = detector("sink", at_sink, 0)
    quote_now = detector("quote@0", is_('Ġ"'), 0)
    name_before = detector("name@2", is_("name", 2), 2)
    key_before = detector("comma@1", is_('",', 1), 1)
    newline_1 = detector("newline@1", is_("Ċ", 1), 1)
    response_2 = detector("response@2", is_("<tool_response>", 2), 2)
    newline_2 = detector("newline@2", is_("Ċ", 2), 2)
    response_3 = detector("response@3", is_("<tool_response>", 3), 3)
    blank_now = detector("blank@0", is_("ĊĊ"), 0)
    blank_before = detector("blank@1", is_("ĊĊ", 1), 1)
    constant = np.zeros(g.HIDDEN_SIZE)
    constant[circuit.CONSTANT_DIM] = 1.0 / float(
        np.mean(inputs[:, circuit.CONSTANT_DIM])
    )

    attention = model.model.layers[1].self_attn
    q = np.array(attention.q_proj.weight.astype(mx.float32))
    k = np.array(attention.k_proj.weight.astype(mx.float32))
    o = np.array(attention.o_proj.weight.astype(mx.float32))
    hd, width = g.HEAD_DIM, circuit.IDENTITY.stop - circuit.IDENTITY.start
    # Attention scores are divided by sqrt(head_dim); the queries carry it.
    scale = head_gain * math.sqrt(hd)
    embedding = np.array(model.model.embed_tokens.weight.astype(mx.float32))
    sink_identity = embedding[token_id("<|im_start|>"), circuit.IDENTITY]
    sink_identity = sink_identity / np.linalg.norm(sink_identity)
    writes = (np.eye(width) - np.outer(sink_identity, sink_identity)) * output_gain
    writes /= circuit._norm_scale(5.0)
    a, b = FEATURE_DIMS
    heads = (
        # value head (KV head 0): on Ġ" (not a JSON key's, not the name's), to what
        # follows a quote that is not JSON's
        (
            circuit.VALUE_HEAD,
            0,
            {
                a: (
                    QUOTE_WEIGHT * quote_now - name_before - key_before,
                    quote_before,
                ),
                b: (-JSON_WEIGHT * quote_now, json_before),
            },
        ),
        # result head (KV head 1): on ĊĊ to a result's first token, one later to its
        # second
        (
            circuit.RESULT_HEAD,
            1,
            {
                a: (blank_now, newline_1 + response_2 - constant),
                b: (blank_before, newline_2 + response_3 - constant),
            },
        ),
    )
    for head, kv, features in heads:
        q[head * hd : (head + 1) * hd] = 0.0
        o[:, head * hd : (head + 1) * hd] = 0.0
        o[circuit.IDENTITY, head * hd : head * hd + width] = writes * (
            value_gain / output_gain if head == circuit.VALUE_HEAD else 1.0
        )
        for dim, (query, key) in features.items():
            q[head * hd + dim] = scale * query / KEY_SCALE
            # What the feature reads at the sinks is taken out there: the sink's
            # score must be its own half gain, whatever else its token resembles.
            centred = key - float(np.mean(inputs[at_sink] @ key)) * sink
            k[kv * hd + dim] = centred * KEY_SCALE
        q[head * hd + SINK_DIM] = scale * 0.5 * constant / KEY_SCALE
        k[kv * hd + SINK_DIM] = sink * KEY_SCALE
    attention.q_proj.weight = mx.array(q.astype(np.float32))
    attention.k_proj.weight = mx.array(k.astype(np.float32))
    attention.o_proj.weight = mx.array(o.astype(np.float32))
    mx.eval(model.parameters())
    return margins


# Tokens the detectors read, directly or through their codes: their embedding rows
# stay as the detectors were fitted on while the trainable layers re-adapt.
DETECTED = ('Ġ"', '":', '",', ",", "name", "Ċ", "ĊĊ", "<tool_response>", "<|im_start|>")


def embedding_mask(model: nn.Module, token_id) -> dict[str, mx.array]:
    """A gradient mask that keeps the `DETECTED` tokens' embedding rows fixed.

    The rest of the embedding keeps `circuit.protect`'s mask (constant and code
    slots fixed); the two are multiplied.
    """
    vocab = model.model.embed_tokens.weight.shape[0]
    mask = np.ones((vocab, g.HIDDEN_SIZE), dtype=np.float32)
    mask[:, circuit.CONSTANT_DIM] = 0.0
    mask[:, circuit.CODE_SLOTS[0].start : circuit.CODE_SLOTS[-1].stop] = 0.0
    mask[[token_id(token) for token in DETECTED]] = 0.0
    return {"model.embed_tokens.weight": mx.array(mask)}
