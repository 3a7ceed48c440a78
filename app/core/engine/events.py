"""What the engine reports, as frozen dataclasses.

Events cross threads (engine worker → CLI or Qt worker → UI), so they are immutable and
hold only plain Python values, never MLX arrays. This module imports nothing from MLX so
the UI can import it without paying for MLX at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.core.turn.parts import ANSWER, Channel

FinishReason = Literal["stop", "length", "cancelled"]


@dataclass(frozen=True)
class ModelInfo:
    """What a loaded model is and costs.

    Attributes:
        folder: The model folder it was loaded from.
        identity: A stable id of the model (folder + config + weight file sizes/mtimes),
            used to key caches so a changed model never reuses stale KV.
        model_type: The architecture name from config.json.
        num_layers: Transformer layers.
        weights_bytes: Bytes the loaded parameters occupy in memory (after any backend
            conversion, e.g. dequantization to float32 on the CPU backend).
        weights_bits: Quantization bits of the weights on disk (16 when unquantized).
        activation_dtype: The dtype the model computes in on this backend.
        kv_dtype: The float dtype its KV cache stores (16-bit on the CPU backend too:
            `cache.kv_storage`), also that of a quantized cache's scales.
        random_weights: True for models built by ``swapless make-model``: their replies
            are noise.
        load_seconds: Wall time of the load.
    """

    folder: str
    identity: str
    model_type: str
    num_layers: int
    weights_bytes: int
    weights_bits: int
    activation_dtype: str
    random_weights: bool
    load_seconds: float
    kv_dtype: str = ""

    def __post_init__(self) -> None:
        if not self.kv_dtype:  # an info built without it (tests): the activation's
            object.__setattr__(self, "kv_dtype", self.activation_dtype)


@dataclass(frozen=True)
class LayerGroup:
    """Cache entries of one kind held at one precision (for meters and reports).

    A model's cache mixes kinds: full-attention layers grow with every token and are
    the ones quantized; sliding-window layers hold at most their window and recurrent
    layers a constant state, both kept at the activation dtype.

    Attributes:
        kind: ``full_attention``, ``sliding_attention`` or ``constant_state`` (the
            values of `app.core.budget.layers.LayerKind`), or ``other``.
        count: Cache entries of this kind at this precision.
        bits: 8 or 4 when quantized; 16 means unquantized (stored in ``dtype``).
        group_size: Quantization group size, or None when unquantized.
        dtype: Element dtype of unquantized storage (``float32``, ``bfloat16``, ...;
            ``float32+bfloat16`` for a state with parts in both), or of the scales
            when quantized; empty while the entries hold nothing.
        nbytes: Bytes these entries hold now.
        tokens: Tokens each entry holds (a sliding window caps it); None for a
            constant state. For a tier of an aged cache: the tokens in that tier.
        value_bits: Bits of the values when they may differ from the keys' (tiers
            of an aged cache; 16: unquantized); None for a uniform cache, whose
            values are at ``bits`` too.
        tier: For an aged cache, which tier these are: ``recent`` (the newest tokens,
            unquantized), ``band`` or ``floor`` (the oldest); empty otherwise.
    """

    kind: str
    count: int
    bits: int
    group_size: int | None
    dtype: str
    nbytes: int
    tokens: int | None
    value_bits: int | None = None
    tier: str = ""


@dataclass(frozen=True)
class PrefillProgress:
    """Prompt processing progress for long prompts.

    Attributes:
        processed: Prompt tokens processed so far in this turn (reused ones excluded).
        total: Prompt tokens this turn must process.
    """

    processed: int
    total: int


@dataclass(frozen=True)
class GenerationEvent:
    """One step of a streamed reply; the last one carries ``finish_reason``.

    Attributes:
        text: Text added by this step (may be empty while a multi-byte character is
            incomplete).
        generated_tokens: Tokens generated so far in this reply.
        prompt_tokens: Tokens of the whole prompt of this turn.
        reused_tokens: Prompt tokens whose KV came from a cache instead of a prefill.
        reuse_source: Where reused tokens came from: ``"none"``, ``"memory"`` (the
            conversation's live cache or the in-memory prefix cache) or ``"disk"``.
        new_tokens: Prompt tokens that had to be prefilled.
        prefill_s: Seconds spent processing the new prompt tokens.
        ttft_s: Seconds from the request to the first generated token.
        tokens_per_s: Decode speed so far (tokens after the first, per second).
        peak_memory_bytes: MLX peak memory since the turn started.
        context_tokens: Tokens now held in the KV cache.
        kv_bytes: Bytes the KV cache holds now (every layer kind).
        kv_bits: KV precision of the growing (full-attention) layers: 16, 8 or 4.
        finish_reason: ``None`` while streaming, then ``"stop"``, ``"length"`` or
            ``"cancelled"``.
        kv_layers: Which cache entries are at which precision (`LayerGroup`s); set
            on the final event.
        checkpoint_bytes: Bytes of the recurrent/sliding state checkpoints kept for
            turn reuse (0 for models whose every layer can be trimmed); final event.
        rewind: How the cache was brought back to the reused prefix: ``none``,
            ``trim`` (newest entries dropped, exact), ``checkpoint`` (restored from
            the state checkpoint at the reused length) or ``reset``.
        channel: Whether ``text`` is the answer or the model's reasoning
            (`app.core.turn.parts.ANSWER` / `REASONING`); a model without reasoning
            markers writes only answer text. On the final event: the channel the
            reply ended in, so ``finish_reason == "length"`` with `REASONING` means
            the reply was cut inside its reasoning (no answer was written).
        reasoning_tokens: Tokens of reasoning so far (markers included).
        reasoning_s: Seconds spent reasoning so far.
        reasoning_forced_end: True once Swapless ended the reasoning itself at the
            thinking budget.
    """

    text: str
    generated_tokens: int
    prompt_tokens: int
    reused_tokens: int
    reuse_source: str
    new_tokens: int
    prefill_s: float
    ttft_s: float
    tokens_per_s: float
    peak_memory_bytes: int
    context_tokens: int
    kv_bytes: int
    kv_bits: int
    finish_reason: FinishReason | None = None
    kv_layers: tuple[LayerGroup, ...] = ()
    checkpoint_bytes: int = 0
    rewind: str = "none"
    channel: Channel = ANSWER
    reasoning_tokens: int = 0
    reasoning_s: float = 0.0
    reasoning_forced_end: bool = False

    @property
    def finished(self) -> bool:
        """True for the last event of a reply."""
        return self.finish_reason is not None
