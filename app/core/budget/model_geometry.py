"""The shape of a model's generation cache, read from ``config.json`` alone.

Swapless decides whether a model and a context fit in memory before it loads anything,
so the cache geometry (layers, key/value heads, head sizes, sliding windows, recurrent
state) is read from the config file with no MLX import. `ModelGeometry` is the frozen
result; `kv_budget` turns it into bytes. Which layers slide or keep a constant state is
decided by `layer_plans`, which mirrors what mlx-lm will actually allocate.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.budget.layer_plans import (
    MLX_LM_DEFAULTS,
    VLM_TEXT_DEFAULTS,
    plan_layers,
    runtime_model_type,
)
from app.core.budget.layers import LayerCache, LayerKind
from app.core.budget.model_config import (
    CONFIG_FILE_NAME,
    DEFAULT_DTYPE_BYTES,
    DTYPE_BYTES,
    dtype_name,
    get_int,
    get_optional_int,
    load_config,
    text_config,
)
from app.core.errors import ModelLoadError

# Model types whose mlx-lm module caches multi-head latent attention compressed: one
# "head" holding the kv_lora_rank latent as keys and the shared RoPE part as values.
# Other MLA models (DeepSeek V2, MiniCPM3) cache full per-head keys and values.
MLA_LATENT_CACHE_TYPES = frozenset(
    {
        "deepseek_v3",
        "glm4_moe_lite",
        "kimi_linear",
        "kimi_k3",
        "longcat_flash",
        "bailing_hybrid",
    }
)


# Model types whose mlx-lm module derives the head size as hidden_size //
# num_attention_heads whatever head_dim says.
HEAD_DIM_FROM_HIDDEN_TYPES = frozenset({"qwen2", "granitemoehybrid", "lfm2"})


@dataclass(frozen=True)
class WeightQuantization:
    """The weight quantization a config declares (informational: KV is separate).

    Attributes:
        bits: Bits per weight, when declared.
        group_size: Weights per scale/bias group, when declared.
        method: ``quant_method`` for Hugging Face quantization configs.
    """

    bits: int | None
    group_size: int | None
    method: str | None = None


@dataclass(frozen=True)
class ModelGeometry:
    """Everything the KV budget needs to know about a model.

    Attributes:
        model_type: ``model_type`` at the top of config.json (e.g. ``gemma3``).
        text_model_type: The language model's type after mlx-lm's remapping (e.g.
            ``gemma3_text``, or ``llama`` for ``mistral``).
        num_layers: Decoder layers.
        num_attention_heads: Query heads.
        kv_heads: Key/value heads of an attention layer (fewer than the query heads
            with grouped-query attention).
        head_dim: Key elements per head per token.
        v_head_dim: Value elements per head per token (usually ``head_dim``).
        dtype: Declared activation dtype, or ``None`` when the config does not say.
        layers: One `LayerCache` per cache entry, as mlx-lm will allocate it: one per
            layer, except for layers that reuse another layer's keys and values
            (Gemma 4's KV-shared layers), which have none.
        quantization: Declared weight quantization, if any.
        max_position_embeddings: The model's trained context length, if declared.
        notes: What was assumed, in words for the user.
        source: The config file the geometry was read from.
    """

    model_type: str
    text_model_type: str
    num_layers: int
    num_attention_heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    dtype: str | None
    layers: tuple[LayerCache, ...]
    quantization: WeightQuantization | None = None
    max_position_embeddings: int | None = None
    notes: tuple[str, ...] = ()
    source: str = ""

    @property
    def act_dtype_bytes(self) -> int:
        """Bytes per element of the declared activation dtype (2 when undeclared)."""
        return DTYPE_BYTES.get(self.dtype or "", DEFAULT_DTYPE_BYTES)

    def count(self, kind: LayerKind) -> int:
        """How many layers are of ``kind``."""
        return sum(1 for layer in self.layers if layer.kind is kind)

    @property
    def sliding_window(self) -> int | None:
        """The largest sliding window among the layers, or ``None`` if none slides."""
        windows = [layer.window for layer in self.layers if layer.window]
        return max(windows) if windows else None


def read_geometry(model_dir: Path) -> ModelGeometry:
    """Read the cache geometry of the model in ``model_dir``.

    Args:
        model_dir: A model folder holding ``config.json``.

    Returns:
        The model's geometry.

    Raises:
        ModelLoadError: config.json is missing, unreadable or lacks what is needed;
            the message names the folder.
    """
    config = load_config(model_dir)
    return geometry_from_config(config, source=str(Path(model_dir) / CONFIG_FILE_NAME))


def geometry_from_config(
    config: dict[str, Any], source: str = CONFIG_FILE_NAME
) -> ModelGeometry:
    """Build a `ModelGeometry` from a parsed config.json.

    Args:
        config: The config.json object.
        source: Where it came from, for error messages.

    Returns:
        The model's geometry.

    Raises:
        ModelLoadError: A required key is missing or has an invalid value.
    """
    top_type = config.get("model_type")
    if not isinstance(top_type, str) or not top_type:
        raise ModelLoadError(f"{source}: config.json has no model_type.")
    text = text_config(config, source)
    text_type = runtime_model_type(str(text.get("model_type") or top_type))
    # Fill in mlx-lm's defaults for omitted keys, as mlx-lm itself will.
    defaults = {
        **MLX_LM_DEFAULTS.get(text_type, {}),
        **VLM_TEXT_DEFAULTS.get(top_type, {}),
    }
    text = {**defaults, **{k: v for k, v in text.items() if v is not None}}

    num_layers = get_int(text, ("num_hidden_layers", "n_layer", "n_layers"), source)
    attention, n_heads = _attention_layer(text, text_type, source)
    layers, notes = plan_layers(text, text_type, num_layers, attention, source)
    if not layers or len(layers) > num_layers:
        raise ModelLoadError(
            f"{source}: the per-layer lists describe {len(layers)} caches but "
            f"num_hidden_layers is {num_layers}."
        )
    # A pure state-space model has no attention layer to summarise.
    has_attention = any(layer.kind is not LayerKind.STATE for layer in layers)
    return ModelGeometry(
        model_type=top_type,
        text_model_type=text_type,
        num_layers=num_layers,
        num_attention_heads=n_heads,
        kv_heads=attention.kv_heads if has_attention else 0,
        head_dim=attention.k_head_dim if has_attention else 0,
        v_head_dim=attention.v_head_dim if has_attention else 0,
        dtype=dtype_name(text, source),
        layers=tuple(layers),
        quantization=_quantization(text),
        max_position_embeddings=get_optional_int(
            text, ("max_position_embeddings",), source
        ),
        notes=tuple(notes),
        source=source,
    )


def layer_summary(geometry: ModelGeometry) -> str:
    """A short description such as ``"5 full attention + 29 sliding (1024)"``."""
    counts = Counter(layer.kind for layer in geometry.layers)
    parts = []
    if counts[LayerKind.FULL]:
        parts.append(f"{counts[LayerKind.FULL]} full attention")
    if counts[LayerKind.SLIDING]:
        parts.append(f"{counts[LayerKind.SLIDING]} sliding ({geometry.sliding_window})")
    if counts[LayerKind.STATE]:
        parts.append(f"{counts[LayerKind.STATE]} constant-state")
    return " + ".join(parts)


def _attention_layer(
    text: dict[str, Any], model_type: str, source: str
) -> tuple[LayerCache, int]:
    """The full-attention layer geometry and the number of query heads."""
    pure_ssm = model_type == "mamba"
    n_heads = get_int(
        text,
        ("num_attention_heads", "n_head", "num_heads"),
        source,
        default=1 if pure_ssm else None,
    )
    if pure_ssm:
        # No attention layer at all; the layer plan never uses this placeholder.
        return LayerCache(LayerKind.FULL, kv_heads=1), 0
    if "kv_lora_rank" in text:
        return _mla_layer(text, model_type, n_heads, source), n_heads
    kv_heads = get_int(
        text,
        ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"),
        source,
        default=n_heads,
    )
    head_dim = None
    if model_type not in HEAD_DIM_FROM_HIDDEN_TYPES:
        head_dim = get_optional_int(text, ("head_dim",), source)
    if head_dim is None:
        hidden = get_int(text, ("hidden_size", "d_model", "n_embd"), source)
        if hidden % n_heads:
            raise ModelLoadError(
                f"{source}: hidden_size {hidden} is not divisible by "
                f"num_attention_heads {n_heads} and there is no head_dim."
            )
        head_dim = hidden // n_heads
    v_head_dim = get_optional_int(text, ("v_head_dim",), source) or head_dim
    layer = LayerCache(
        LayerKind.FULL, kv_heads=kv_heads, k_head_dim=head_dim, v_head_dim=v_head_dim
    )
    return layer, n_heads


def _mla_layer(
    text: dict[str, Any], model_type: str, n_heads: int, source: str
) -> LayerCache:
    rope = get_int(text, ("qk_rope_head_dim",), source)
    if model_type in MLA_LATENT_CACHE_TYPES:
        latent = get_int(text, ("kv_lora_rank",), source)
        return LayerCache(
            LayerKind.FULL, kv_heads=1, k_head_dim=latent, v_head_dim=rope
        )
    nope = get_int(text, ("qk_nope_head_dim",), source)
    v_dim = get_int(text, ("v_head_dim",), source)
    return LayerCache(
        LayerKind.FULL, kv_heads=n_heads, k_head_dim=nope + rope, v_head_dim=v_dim
    )


def _quantization(text: dict[str, Any]) -> WeightQuantization | None:
    # mlx-community exports write "quantization" (and a copy in quantization_config);
    # Hugging Face checkpoints write "quantization_config" with a quant_method.
    for key in ("quantization", "quantization_config"):
        entry = text.get(key)
        if isinstance(entry, dict):
            bits = entry.get("bits")
            group = entry.get("group_size")
            method = entry.get("quant_method") or entry.get("mode")
            return WeightQuantization(
                bits=bits if isinstance(bits, int) else None,
                group_size=group if isinstance(group, int) else None,
                method=str(method) if method else None,
            )
    return None
