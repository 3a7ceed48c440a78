"""Which cache each layer gets, mirroring how mlx-lm builds it for each architecture.

The budget must predict the memory the cache will really take, so it follows the
runtime, not the paper: a layer counts as sliding-window only where mlx-lm (0.32) gives
it a ``RotatingKVCache``, and as constant-size only where mlx-lm gives it an
``ArraysCache``. Where a config declares a sliding window that mlx-lm does not honour
(Mistral v0.1, Gemma 2, Qwen2 with ``use_sliding_window``), every layer is counted as
full attention and a note says so: over-counting is safe, under-counting means swap.
An unknown architecture is treated as plain full attention for the same reason.

Each rule mirrors the ``make_cache`` of the mlx-lm model module of the same name; the
tests build real mlx-lm models and compare byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.core.budget.layers import LayerCache, LayerKind
from app.core.budget.model_config import (
    get_int,
    get_int_list,
    get_optional_int,
    get_str_list,
)
from app.core.errors import ModelLoadError

SLIDING = "sliding_attention"
FULL = "full_attention"

# mlx-lm's own defaults for keys a config may omit (its ModelArgs fields), so that a
# sparse config such as Gemma 3's nested text_config reads the way mlx-lm reads it.
MLX_LM_DEFAULTS: dict[str, dict[str, int]] = {
    "gemma3_text": {
        "hidden_size": 1152,
        "num_hidden_layers": 26,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "sliding_window": 512,
        "sliding_window_pattern": 6,
    },
    "cohere2": {
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "sliding_window": 4096,
        "sliding_window_pattern": 4,
    },
    "gemma4_text": {
        "hidden_size": 1536,
        "num_hidden_layers": 35,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "global_head_dim": 512,
        "num_kv_shared_layers": 20,
        "sliding_window": 512,
        "sliding_window_pattern": 5,
    },
    "gpt_oss": {"sliding_window": 128},
    "afmoe": {"sliding_window": 2048},
    "qwen3_next": {"full_attention_interval": 4},
    # Qwen3.5's TextModelArgs (qwen3_5 and qwen3_5_moe share them).
    **{
        name: {
            "hidden_size": 4096,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "linear_num_value_heads": 64,
            "linear_num_key_heads": 16,
            "linear_key_head_dim": 192,
            "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4,
            "full_attention_interval": 4,
        }
        for name in ("qwen3_5", "qwen3_5_moe")
    },
}
# mlx-lm's gemma3 (the vision-language wrapper) overrides two text defaults.
VLM_TEXT_DEFAULTS: dict[str, dict[str, int]] = {
    "gemma3": {"num_attention_heads": 8, "num_key_value_heads": 4},
}

Plan = tuple[list[LayerCache], list[str]]
Rule = Callable[[dict[str, Any], int, LayerCache, str], Plan]


def plan_layers(
    config: dict[str, Any],
    model_type: str,
    num_layers: int,
    attention: LayerCache,
    source: str,
) -> Plan:
    """Describe every layer's cache for one model.

    Args:
        config: The text model's config, with mlx-lm defaults already filled in.
        model_type: The text model's ``model_type`` (after mlx-lm's remapping).
        num_layers: Number of decoder layers.
        attention: The geometry of a full-attention layer of this model.
        source: Where the config came from, for error messages.

    Returns:
        One `LayerCache` per layer, and notes for the user about what was assumed.

    Raises:
        ModelLoadError: The per-layer information in the config is inconsistent.
    """
    rule = _RULES.get(model_type, _plain_attention)
    layers, notes = rule(config, num_layers, attention, source)
    if not any(layer.kind is LayerKind.SLIDING for layer in layers):
        notes += _declared_sliding_note(config, model_type)
    return layers, notes


def _sliding(attention: LayerCache, window: int) -> LayerCache:
    return LayerCache(
        LayerKind.SLIDING,
        kv_heads=attention.kv_heads,
        k_head_dim=attention.k_head_dim,
        v_head_dim=attention.v_head_dim,
        window=window,
    )


def _state(act_elements: int, float32_elements: int = 0) -> LayerCache:
    return LayerCache(
        LayerKind.STATE,
        state_act_elements=act_elements,
        state_float32_elements=float32_elements,
    )


def _declared_sliding_note(config: dict[str, Any], model_type: str) -> list[str]:
    """A note when a config declares sliding windows that mlx-lm does not honour."""
    window = config.get("sliding_window")
    types = config.get("layer_types") or []
    declares = (
        window is not None and config.get("use_sliding_window") is not False
    ) or (SLIDING in types)
    if not declares:
        return []
    declared = config.get("model_type") or model_type
    runner = (
        f"{model_type!r}"
        if declared == model_type
        else f"{model_type!r} (for {declared!r})"
    )
    return [
        f"config.json declares a sliding window ({window}) but mlx-lm's {runner} "
        "model keeps every token in every layer, so all layers are counted as full "
        "attention."
    ]


def _plain_attention(
    config: dict[str, Any], num_layers: int, attention: LayerCache, source: str
) -> Plan:
    return [attention] * num_layers, []


def _pattern_rule(
    config: dict[str, Any], num_layers: int, attention: LayerCache, source: str
) -> Plan:
    # Gemma 3 / Cohere 2: every `pattern`-th layer is global, the others slide. mlx-lm
    # reads only sliding_window_pattern (not layer_types); if layer_types disagrees,
    # the layer is counted as full, the safe side.
    pattern = get_int(config, ("sliding_window_pattern",), source)
    window = get_int(config, ("sliding_window",), source)
    types = get_str_list(config, "layer_types", num_layers, source)
    layers, notes = [], []
    for i in range(num_layers):
        slides = i % pattern != pattern - 1
        if slides and types is not None and types[i] != SLIDING:
            notes.append(
                f"layer {i}: layer_types says {types[i]!r} but sliding_window_pattern "
                f"{pattern} makes it sliding; counted as full attention."
            )
            slides = False
        layers.append(_sliding(attention, window) if slides else attention)
    return layers, notes


def _layer_types_rule(default_types: Callable[[int], list[str]] | None) -> Rule:
    # Llama-family and others whose make_cache gives a RotatingKVCache exactly to the
    # layers that layer_types calls "sliding_attention".
    def rule(
        config: dict[str, Any], num_layers: int, attention: LayerCache, source: str
    ) -> Plan:
        types = get_str_list(config, "layer_types", num_layers, source)
        if types is None:
            if default_types is None:
                return _plain_attention(config, num_layers, attention, source)
            types = (default_types(num_layers) + [FULL] * num_layers)[:num_layers]
        if SLIDING not in types:
            return _plain_attention(config, num_layers, attention, source)
        window = get_int(config, ("sliding_window",), source)
        layers = [
            _sliding(attention, window) if t == SLIDING else attention for t in types
        ]
        return layers, []

    return rule


def _gemma4_rule(
    config: dict[str, Any], num_layers: int, attention: LayerCache, source: str
) -> Plan:
    # Gemma 4: layer_types (or the sliding pattern) as in Gemma 3, but global layers
    # have their own head size (global_head_dim) and, with attention_k_eq_v, their own
    # KV head count; and the last num_kv_shared_layers layers reuse the KV of an earlier
    # layer, so mlx-lm makes no cache for them at all.
    types = get_str_list(config, "layer_types", num_layers, source)
    if types is None:
        pattern = get_int(config, ("sliding_window_pattern",), source)
        unit = [SLIDING] * (pattern - 1) + [FULL]
        types = (unit * (num_layers // pattern + 1))[:num_layers]
    window = get_int(config, ("sliding_window",), source)
    shared = get_int(config, ("num_kv_shared_layers",), source, default=0, minimum=0)
    if shared >= num_layers:
        raise ModelLoadError(
            f"{source}: num_kv_shared_layers {shared} leaves no layer with a cache."
        )
    global_dim = get_optional_int(config, ("global_head_dim",), source)
    global_heads = attention.kv_heads
    if config.get("attention_k_eq_v"):
        global_heads = (
            get_optional_int(config, ("num_global_key_value_heads",), source)
            or global_heads
        )
    full = LayerCache(
        LayerKind.FULL,
        kv_heads=global_heads,
        k_head_dim=global_dim or attention.k_head_dim,
        v_head_dim=global_dim or attention.v_head_dim,
    )
    layers = [
        _sliding(attention, window) if t == SLIDING else full
        for t in types[: num_layers - shared]
    ]
    notes = []
    if shared:
        notes.append(
            f"the last {shared} of {num_layers} layers reuse the keys and values of "
            "earlier layers and keep no cache of their own."
        )
    return layers, notes


def _qwen3_next_rule(
    config: dict[str, Any], num_layers: int, attention: LayerCache, source: str
) -> Plan:
    # Qwen3-Next and Qwen3.5: every `interval`-th layer is full attention, the others
    # are Gated DeltaNet linear attention: a convolution state (kernel - 1 steps of q,
    # k and v, activation dtype) plus a float32 recurrent state of value_heads x v_dim
    # x k_dim. mlx-lm reads only full_attention_interval; layer_types is checked.
    interval = get_int(config, ("full_attention_interval",), source)
    kernel = get_int(config, ("linear_conv_kernel_dim",), source)
    k_heads = get_int(config, ("linear_num_key_heads",), source)
    v_heads = get_int(config, ("linear_num_value_heads",), source)
    k_dim = get_int(config, ("linear_key_head_dim",), source)
    v_dim = get_int(config, ("linear_value_head_dim",), source)
    conv_dim = 2 * k_heads * k_dim + v_heads * v_dim
    linear = _state((kernel - 1) * conv_dim, v_heads * v_dim * k_dim)
    layers = [
        attention if (i + 1) % interval == 0 else linear for i in range(num_layers)
    ]
    notes = []
    types = get_str_list(config, "layer_types", num_layers, source)
    if types is not None:
        planned = [
            FULL if layer is attention else "linear_attention" for layer in layers
        ]
        if types != planned:
            notes.append(
                f"layer_types disagrees with full_attention_interval {interval}; "
                "mlx-lm follows the interval, and so does this budget."
            )
    return layers, notes


def _granite_hybrid_rule(
    config: dict[str, Any], num_layers: int, attention: LayerCache, source: str
) -> Plan:
    # Granite 4.0-H: layer_types says "mamba" or "attention". A Mamba-2 layer keeps
    # (d_conv - 1) steps of its convolution input (the inner activations plus B and C
    # of every group) and a heads x head_dim x d_state SSM state, in the activation
    # dtype.
    types = get_str_list(config, "layer_types", num_layers, source)
    if types is None:
        raise ModelLoadError(f"{source}: config.json has no layer_types.")
    unknown = sorted(set(types) - {"mamba", "attention"})
    if unknown:
        raise ModelLoadError(
            f"{source}: unknown layer type {unknown[0]!r} in layer_types; expected "
            "'mamba' or 'attention'."
        )
    if "mamba" not in types:
        return [attention] * num_layers, []
    heads = get_int(config, ("mamba_n_heads",), source)
    head_dim = get_int(config, ("mamba_d_head",), source)
    d_state = get_int(config, ("mamba_d_state",), source)
    kernel = get_int(config, ("mamba_d_conv",), source)
    groups = get_int(config, ("mamba_n_groups",), source)
    conv_dim = heads * head_dim + 2 * groups * d_state
    mamba = _state((kernel - 1) * conv_dim + heads * head_dim * d_state)
    return [attention if t == "attention" else mamba for t in types], []


def _mamba_state(config: dict[str, Any], source: str, prefix: str = "") -> LayerCache:
    # Mamba keeps (conv kernel - 1) steps of the inner activations plus an
    # inner x d_state SSM state, both in the activation dtype.
    if prefix:
        hidden = get_int(config, ("hidden_size",), source)
        inner = get_int(config, (f"{prefix}expand",), source) * hidden
        d_state = get_int(config, (f"{prefix}d_state",), source)
        kernel = get_int(config, (f"{prefix}d_conv",), source)
    else:
        inner = get_int(config, ("intermediate_size", "d_inner"), source)
        d_state = get_int(config, ("state_size", "d_state"), source)
        kernel = get_int(config, ("conv_kernel", "d_conv"), source)
    return _state((kernel - 1) * inner + inner * d_state)


def _mamba_rule(
    config: dict[str, Any], num_layers: int, attention: LayerCache, source: str
) -> Plan:
    return [_mamba_state(config, source)] * num_layers, []


def _jamba_rule(
    config: dict[str, Any], num_layers: int, attention: LayerCache, source: str
) -> Plan:
    types = get_str_list(config, "layers_block_type", num_layers, source)
    if types is None:
        period = get_int(config, ("attn_layer_period",), source)
        offset = get_int(config, ("attn_layer_offset",), source, minimum=0)
        types = [
            "attention" if i % period == offset else "mamba" for i in range(num_layers)
        ]
    mamba = _mamba_state(config, source, prefix="mamba_")
    return [attention if t == "attention" else mamba for t in types], []


def _lfm2_rule(
    config: dict[str, Any], num_layers: int, attention: LayerCache, source: str
) -> Plan:
    # LFM2: attention at full_attn_idxs (or where layer_types says so), short
    # convolutions elsewhere, each keeping (L_cache - 1) steps of the hidden state.
    full = get_int_list(config, "full_attn_idxs", source)
    if full is None:
        types = get_str_list(config, "layer_types", num_layers, source)
        if types is None:
            raise ModelLoadError(f"{source}: config.json has no full_attn_idxs.")
        full = [i for i, t in enumerate(types) if t == FULL]
    hidden = get_int(config, ("hidden_size",), source)
    kernel = get_int(config, ("conv_L_cache",), source)
    conv = _state((kernel - 1) * hidden)
    return [attention if i in full else conv for i in range(num_layers)], []


def _alternating(num_layers: int) -> list[str]:
    # gpt-oss without layer_types: sliding, full, sliding, full, ...
    return [SLIDING, FULL] * (num_layers // 2)


def _every_fourth_full(num_layers: int) -> list[str]:
    # OLMo 3 without layer_types: three sliding layers, then one full.
    return [FULL if (i + 1) % 4 == 0 else SLIDING for i in range(num_layers)]


_RULES: dict[str, Rule] = {
    "gemma3_text": _pattern_rule,
    "cohere2": _pattern_rule,
    "llama": _layer_types_rule(None),
    "ministral3": _layer_types_rule(None),
    "afmoe": _layer_types_rule(None),
    "gpt_oss": _layer_types_rule(_alternating),
    "olmo3": _layer_types_rule(_every_fourth_full),
    "gemma4_text": _gemma4_rule,
    "qwen3_next": _qwen3_next_rule,
    "qwen3_5": _qwen3_next_rule,
    "qwen3_5_moe": _qwen3_next_rule,
    "granitemoehybrid": _granite_hybrid_rule,
    "jamba": _jamba_rule,
    "mamba": _mamba_rule,
    "lfm2": _lfm2_rule,
}

# mlx-lm loads these model types with another type's module (mlx_lm.utils). The
# ``*_text`` entries are the text_config types of Qwen3.5, whose outer module runs them.
MLX_LM_REMAPPING = {
    "qwen3_5_text": "qwen3_5",
    "qwen3_5_moe_text": "qwen3_5_moe",
    "mistral": "llama",
    "iquestcoder": "llama",
    "xverse": "llama",
    "falcon_mamba": "mamba",
    "kimi_k2": "deepseek_v3",
    "joyai_llm_flash": "deepseek_v3",
}


def runtime_model_type(model_type: str) -> str:
    """The mlx-lm module that will run a ``model_type``."""
    return MLX_LM_REMAPPING.get(model_type, model_type)
