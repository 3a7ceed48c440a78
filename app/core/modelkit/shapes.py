"""The shapes of the models the kit builds: geometry only, no weights.

`arch_configs` fills an architecture's ``config.json`` from a `Shape`, and
`model_builder` builds the weights; both read the shapes from here, so neither imports
the other for them.
"""

from __future__ import annotations

from dataclasses import dataclass

# mlx_lm.convert's default for affine quantization; every shape's input sizes divide it.
GROUP_SIZE = 64


@dataclass(frozen=True)
class Shape:
    """The geometry of a buildable model.

    Attributes:
        arch: The default architecture (a key of `arch_configs.ARCH_SPECS`).
        num_hidden_layers: Transformer blocks.
        hidden_size: Residual width. mlx-lm's qwen2 derives the head size as
            ``hidden_size // num_attention_heads`` and ignores ``head_dim``, so a qwen2
            build widens ``hidden_size`` to ``num_attention_heads * head_dim``: the KV
            cache geometry (layers, KV heads, head size) is the same for both arches.
        num_attention_heads: Query heads.
        num_key_value_heads: KV heads (grouped-query attention).
        head_dim: Size of one head; KV-cache quantization groups must divide it.
        intermediate_size: MLP width; a multiple of `GROUP_SIZE` so ``down_proj``
            quantizes.
        vocab_size: Rows of the embedding, as written in ``config.json``.
        tokenizer_vocab_size: Tokens of the trained tokenizer (at most ``vocab_size``;
            ids beyond it are never produced).
        max_position_embeddings: Context length.
        rope_theta: RoPE base frequency.
        purpose: What the shape is for, shown in help texts.
        sliding_window: Tokens a sliding-window layer keeps (architectures with
            sliding layers only).
    """

    arch: str
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tokenizer_vocab_size: int
    max_position_embeddings: int
    rope_theta: float
    purpose: str
    sliding_window: int = 512


SHAPES: dict[str, Shape] = {
    # KV cache: 2 (K, V) × 2 layers × 2 heads × 128 × 4 B = 4 KiB per token in fp32.
    # head_dim 128 so KV-quantization groups of 32, 64 and 128 all divide it.
    "tiny": Shape(
        arch="llama",
        num_hidden_layers=2,
        hidden_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=128,
        intermediate_size=256,
        vocab_size=1024,
        tokenizer_vocab_size=1024,
        max_position_embeddings=16384,
        rope_theta=10000.0,
        purpose="unit tests: builds in about a second, decodes hundreds of tokens/s",
        # Small enough that a test conversation slides past it within a few turns.
        sliding_window=64,
    ),
    "small": Shape(
        arch="llama",
        num_hidden_layers=8,
        hidden_size=512,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=1408,
        vocab_size=8192,
        tokenizer_vocab_size=8192,
        max_position_embeddings=32768,
        rope_theta=500000.0,
        purpose="benchmarks that must finish in seconds",
        sliding_window=256,
    ),
    # Qwen2.5-0.5B's geometry, full 151936-row embedding included: memory and speed
    # figures match the real model even though the tokenizer is much smaller.
    "qwen05": Shape(
        arch="qwen2",
        num_hidden_layers=24,
        hidden_size=896,
        num_attention_heads=14,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=4864,
        vocab_size=151936,
        tokenizer_vocab_size=16384,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        purpose="Qwen2.5-0.5B geometry, for realistic memory and speed figures",
    ),
}
