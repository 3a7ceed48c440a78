"""The ``config.json`` each buildable architecture gets, in its published Hugging Face form.

`model_builder` builds random-weight models of the architectures people run (so tests
and benchmarks cover their caches), through mlx-lm's own model classes. A class is only
as real as the config it is given, so every architecture here writes the fields its
published checkpoints write (the key names of Gemma 3/4, gpt-oss, Qwen3/3.5/3-Next,
Granite 4.0-H and LFM2 configs), filled with the geometry of a `Shape`, and lays its
layers out like the real models do: a repeating *block* of layer kinds (Gemma 3: two
sliding-window layers then a global one; Qwen3.5: three Gated DeltaNet layers then one
full-attention layer; ...). The block is shorter than the published one where that
would leave a tiny model with a single kind of layer.

Pure data and arithmetic (no MLX, no tokenizers import), so the CLI can list the
architectures without paying for either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.core.modelkit.shapes import Shape

# Layer kinds of a block, in HF's own words where a config spells them out.
FULL = "full_attention"
SLIDING = "sliding_attention"
LINEAR = "linear_attention"
MAMBA = "mamba"
ATTENTION = "attention"
CONV = "conv"

# Qwen3.5 / Qwen3-Next partial RoPE and Gated DeltaNet convolution, as published.
_PARTIAL_ROTARY = 0.25
_LINEAR_CONV_KERNEL = 4
# Granite 4.0-H: Mamba-2 with expand 2, one group, a 4-step convolution.
_MAMBA_EXPAND = 2
_MAMBA_HEADS = 8
_MAMBA_D_STATE = 64
_MAMBA_D_CONV = 4
# LFM2's short convolution keeps L_cache - 1 = 2 steps.
_LFM2_CONV_L_CACHE = 3
# Mixture-of-experts sizes for the MoE architectures: small, but a real router.
_EXPERTS = 4
_EXPERTS_PER_TOKEN = 2


@dataclass(frozen=True)
class ArchSpec:
    """How one architecture's config is written.

    Attributes:
        model_type: ``model_type`` in config.json (the mlx-lm module that runs it).
        architectures: HF's ``architectures`` entry.
        block: The repeating pattern of layer kinds; the layer count is rounded up
            to a whole number of blocks.
        min_layers: Fewest layers a build gets (Gemma 4 needs room for KV-shared
            layers after at least one layer of each kind).
        head_dim_from_hidden: mlx-lm derives the head size as ``hidden_size //
            num_attention_heads`` and ignores ``head_dim``; the build widens
            ``hidden_size`` so the head size is the shape's.
        tokenizer_split: Which pre-tokenizer split transformers imposes for this model
            type: ``qwen2`` (its Qwen2 split, or tokenizer.json kept as written) or
            ``qwen3_5`` (``Qwen3_5Tokenizer``'s own split).
        fields: Returns the architecture's own fields for a shape and layer list.
        nested: Write the text model under ``text_config`` (Qwen3.5's layout).
        text_model_type: ``model_type`` inside ``text_config`` when nested.
    """

    model_type: str
    architectures: tuple[str, ...]
    block: tuple[str, ...]
    fields: Callable[[Shape, list[str]], dict[str, Any]]
    min_layers: int = 1
    head_dim_from_hidden: bool = False
    tokenizer_split: str = "qwen2"
    nested: bool = False
    text_model_type: str | None = None


def layer_kinds(spec: ArchSpec, num_layers: int) -> list[str]:
    """The kind of every layer of a build with at least ``num_layers`` layers."""
    size = len(spec.block)
    wanted = max(num_layers, spec.min_layers)
    blocks = -(-wanted // size)
    return list(spec.block) * blocks


def _llama(shape: Shape, kinds: list[str]) -> dict[str, Any]:
    return {
        "rms_norm_eps": 1e-5,
        "attention_bias": False,
        "mlp_bias": False,
        "hidden_act": "silu",
    }


def _qwen2(shape: Shape, kinds: list[str]) -> dict[str, Any]:
    return {"rms_norm_eps": 1e-6, "use_sliding_window": False, "hidden_act": "silu"}


def _qwen3(shape: Shape, kinds: list[str]) -> dict[str, Any]:
    return {"rms_norm_eps": 1e-6, "attention_bias": False, "hidden_act": "silu"}


def _gemma3(shape: Shape, kinds: list[str]) -> dict[str, Any]:
    # mlx-lm reads sliding_window_pattern; HF also writes layer_types. Both agree.
    return {
        "rms_norm_eps": 1e-6,
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": shape.head_dim,
        "rope_local_base_freq": 10000.0,
        "sliding_window": shape.sliding_window,
        "sliding_window_pattern": len(GEMMA3.block),
        "layer_types": kinds,
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
    }


def _gemma4(shape: Shape, kinds: list[str]) -> dict[str, Any]:
    # Gemma 4 E2B's layout: sliding layers at half the head size of the global ones,
    # per-layer input embeddings, and the last third of the layers reusing the KV of
    # the last earlier layer of their kind (so they have no cache of their own).
    return {
        "rms_norm_eps": 1e-6,
        "hidden_activation": "gelu_pytorch_tanh",
        "head_dim": shape.head_dim // 2,
        "global_head_dim": shape.head_dim,
        "sliding_window": shape.sliding_window,
        "layer_types": kinds,
        "num_kv_shared_layers": len(kinds) // 3,
        "hidden_size_per_layer_input": 16,
        "vocab_size_per_layer_input": shape.vocab_size,
        "final_logit_softcapping": 30.0,
        "attention_k_eq_v": False,
        "enable_moe_block": False,
        "use_double_wide_mlp": True,
        "rope_parameters": {
            FULL: {
                "partial_rotary_factor": _PARTIAL_ROTARY,
                "rope_theta": 1000000.0,
                "rope_type": "proportional",
            },
            SLIDING: {"rope_theta": 10000.0, "rope_type": "default"},
        },
    }


def _gpt_oss(shape: Shape, kinds: list[str]) -> dict[str, Any]:
    return {
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-5,
        "attention_bias": True,
        "hidden_act": "silu",
        "sliding_window": shape.sliding_window,
        "layer_types": kinds,
        "num_local_experts": _EXPERTS,
        "num_experts_per_tok": _EXPERTS_PER_TOKEN,
        "experts_per_token": _EXPERTS_PER_TOKEN,
        "swiglu_limit": 7.0,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 32.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            # HF checks factor = max_position_embeddings / original length.
            "original_max_position_embeddings": shape.max_position_embeddings // 32,
            "truncate": False,
        },
    }


def _linear_attention(shape: Shape, kinds: list[str]) -> dict[str, Any]:
    # Gated DeltaNet: value heads a multiple of key heads, as in every Qwen3.5 size.
    return {
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "hidden_act": "silu",
        "full_attention_interval": len(QWEN3_5.block),
        "linear_num_key_heads": shape.num_key_value_heads,
        "linear_num_value_heads": shape.num_attention_heads,
        "linear_key_head_dim": shape.head_dim // 2,
        "linear_value_head_dim": shape.head_dim // 2,
        "linear_conv_kernel_dim": _LINEAR_CONV_KERNEL,
    }


def _qwen3_5(shape: Shape, kinds: list[str]) -> dict[str, Any]:
    return {
        **_linear_attention(shape, kinds),
        "layer_types": kinds,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": shape.rope_theta,
            "partial_rotary_factor": _PARTIAL_ROTARY,
        },
    }


def _moe_fields(shape: Shape) -> dict[str, Any]:
    return {
        "num_experts": _EXPERTS,
        "num_experts_per_tok": _EXPERTS_PER_TOKEN,
        "moe_intermediate_size": shape.intermediate_size // 2,
        "shared_expert_intermediate_size": shape.intermediate_size // 2,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
    }


def _qwen3_5_moe(shape: Shape, kinds: list[str]) -> dict[str, Any]:
    return {**_qwen3_5(shape, kinds), **_moe_fields(shape)}


def _qwen3_next(shape: Shape, kinds: list[str]) -> dict[str, Any]:
    return {
        **_linear_attention(shape, kinds),
        **_moe_fields(shape),
        "mlp_only_layers": [],
        "partial_rotary_factor": _PARTIAL_ROTARY,
        "rope_scaling": None,
    }


def _granite_hybrid(shape: Shape, kinds: list[str]) -> dict[str, Any]:
    hidden = shape.num_attention_heads * shape.head_dim
    return {
        "rms_norm_eps": 1e-5,
        "attention_bias": False,
        "hidden_act": "silu",
        "layer_types": kinds,
        "position_embedding_type": "nope",
        "embedding_multiplier": 12.0,
        "attention_multiplier": 1.0 / shape.head_dim,
        "logits_scaling": 4.0,
        "residual_multiplier": 0.22,
        "num_local_experts": _EXPERTS,
        "num_experts_per_tok": _EXPERTS_PER_TOKEN,
        "shared_intermediate_size": shape.intermediate_size,
        "mamba_n_heads": _MAMBA_HEADS,
        "mamba_d_head": _MAMBA_EXPAND * hidden // _MAMBA_HEADS,
        "mamba_d_state": _MAMBA_D_STATE,
        "mamba_d_conv": _MAMBA_D_CONV,
        "mamba_n_groups": 1,
        "mamba_expand": _MAMBA_EXPAND,
        "mamba_conv_bias": True,
        "mamba_proj_bias": False,
        "mamba_chunk_size": 256,
    }


def _lfm2(shape: Shape, kinds: list[str]) -> dict[str, Any]:
    hidden = shape.num_attention_heads * shape.head_dim
    return {
        "norm_eps": 1e-5,
        "layer_types": kinds,
        "full_attn_idxs": [i for i, kind in enumerate(kinds) if kind == FULL],
        "conv_L_cache": _LFM2_CONV_L_CACHE,
        "conv_bias": False,
        "block_dim": hidden,
        "block_ff_dim": shape.intermediate_size,
        "block_multiple_of": 256,
        "block_ffn_dim_multiplier": 1.0,
        "block_auto_adjust_ff_dim": False,
    }


LLAMA = ArchSpec("llama", ("LlamaForCausalLM",), (FULL,), _llama)
QWEN2 = ArchSpec(
    "qwen2", ("Qwen2ForCausalLM",), (FULL,), _qwen2, head_dim_from_hidden=True
)
QWEN3 = ArchSpec("qwen3", ("Qwen3ForCausalLM",), (FULL,), _qwen3)
GEMMA3 = ArchSpec(
    "gemma3_text", ("Gemma3ForCausalLM",), (SLIDING, SLIDING, FULL), _gemma3
)
GEMMA4 = ArchSpec(
    "gemma4_text",
    ("Gemma4ForCausalLM",),
    (SLIDING, SLIDING, FULL),
    _gemma4,
    min_layers=6,
)
GPT_OSS = ArchSpec("gpt_oss", ("GptOssForCausalLM",), (SLIDING, FULL), _gpt_oss)
QWEN3_5 = ArchSpec(
    "qwen3_5",
    ("Qwen3_5ForConditionalGeneration",),
    (LINEAR, LINEAR, LINEAR, FULL),
    _qwen3_5,
    tokenizer_split="qwen3_5",
    nested=True,
    text_model_type="qwen3_5_text",
)
QWEN3_5_MOE = ArchSpec(
    "qwen3_5_moe",
    ("Qwen3_5MoeForConditionalGeneration",),
    (LINEAR, LINEAR, LINEAR, FULL),
    _qwen3_5_moe,
    tokenizer_split="qwen3_5",
    nested=True,
    text_model_type="qwen3_5_moe_text",
)
QWEN3_NEXT = ArchSpec(
    "qwen3_next",
    ("Qwen3NextForCausalLM",),
    (LINEAR, LINEAR, LINEAR, FULL),
    _qwen3_next,
)
GRANITE_HYBRID = ArchSpec(
    "granitemoehybrid",
    ("GraniteMoeHybridForCausalLM",),
    (MAMBA, MAMBA, MAMBA, ATTENTION),
    _granite_hybrid,
    head_dim_from_hidden=True,
)
LFM2 = ArchSpec(
    "lfm2", ("Lfm2ForCausalLM",), (CONV, FULL), _lfm2, head_dim_from_hidden=True
)

ARCH_SPECS: dict[str, ArchSpec] = {
    spec.model_type: spec
    for spec in (
        LLAMA,
        QWEN2,
        QWEN3,
        GEMMA3,
        GEMMA4,
        GPT_OSS,
        QWEN3_5,
        QWEN3_5_MOE,
        QWEN3_NEXT,
        GRANITE_HYBRID,
        LFM2,
    )
}
ARCHES = tuple(ARCH_SPECS)
"""Every architecture `swapless make-model --arch` builds."""


def text_fields(spec: ArchSpec, shape: Shape) -> dict[str, Any]:
    """The text model's fields (geometry plus the architecture's own) for a shape."""
    kinds = layer_kinds(spec, shape.num_hidden_layers)
    hidden = shape.hidden_size
    if spec.head_dim_from_hidden:
        hidden = shape.num_attention_heads * shape.head_dim
    fields = {
        "hidden_size": hidden,
        "num_hidden_layers": len(kinds),
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "head_dim": shape.head_dim,
        "intermediate_size": shape.intermediate_size,
        "vocab_size": shape.vocab_size,
        "max_position_embeddings": shape.max_position_embeddings,
        "rope_theta": shape.rope_theta,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }
    fields.update(spec.fields(shape, kinds))
    return fields


def architecture_config(spec: ArchSpec, shape: Shape) -> dict[str, Any]:
    """The whole config.json body (without the builder's marker and token ids)."""
    text = text_fields(spec, shape)
    if not spec.nested:
        return {
            "model_type": spec.model_type,
            "architectures": list(spec.architectures),
            **text,
        }
    return {
        "model_type": spec.model_type,
        "architectures": list(spec.architectures),
        "tie_word_embeddings": text["tie_word_embeddings"],
        "torch_dtype": text["torch_dtype"],
        "text_config": {"model_type": spec.text_model_type, **text},
    }
