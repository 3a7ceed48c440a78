"""The calculator against real mlx-lm caches: ``nbytes`` must match to the byte.

Each test builds a tiny random-weight model in memory from a config dict (as mlx-lm's
``load`` would, minus the weights file), runs a prompt through it with the cache
mlx-lm makes for that model, and compares ``sum(c.nbytes for c in cache)`` with
``kv_bytes_at`` computed from the same config dict. Only tests import MLX.
"""

from __future__ import annotations

import importlib

import pytest

mx = pytest.importorskip("mlx.core")
cache_module = pytest.importorskip("mlx_lm.models.cache")

from mlx.utils import tree_map  # noqa: E402

from app.core.budget.kv_budget import (  # noqa: E402
    bytes_per_token,
    kv_bytes_at,
    prefill_scores_bytes,
)
from app.core.budget.model_geometry import geometry_from_config  # noqa: E402

# They describe mlx-lm's own caches, which store what they are given.
pytestmark = pytest.mark.usefixtures("mlx_lm_kv_storage")

LLAMA = {
    "model_type": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "vocab_size": 256,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}


def build(config: dict, dtype=None):
    """Instantiate the mlx-lm model class for ``config`` with random weights."""
    dtype = dtype or mx.float32
    module = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    model = module.Model(module.ModelArgs.from_dict(dict(config)))
    model.update(
        tree_map(
            lambda p: p.astype(dtype) if mx.issubdtype(p.dtype, mx.floating) else p,
            model.parameters(),
        )
    )
    mx.eval(model.parameters())
    return model


def run(model, cache, tokens: int, vocab: int = 256):
    """Prefill ``tokens`` random tokens in one call, as a single prefill chunk does."""
    model(mx.random.randint(0, vocab, (1, tokens)), cache=cache)
    mx.eval([c.state for c in cache])


def decode(model, cache, steps: int):
    for _ in range(steps):
        model(mx.array([[1]]), cache=cache)
        mx.eval([c.state for c in cache])


def nbytes(cache) -> int:
    return sum(c.nbytes for c in cache)


@pytest.fixture(scope="module")
def llama():
    return build(LLAMA)


@pytest.mark.parametrize("tokens", [300, 512])
def test_unquantized_float32_cache_matches(llama, tokens):
    cache = cache_module.make_prompt_cache(llama)
    run(llama, cache, tokens)
    g = geometry_from_config(LLAMA)
    assert nbytes(cache) == kv_bytes_at(
        g, tokens, act_dtype_bytes=4, allocation_rounding=True
    )


def test_without_rounding_the_figure_is_below_the_real_allocation(llama):
    cache = cache_module.make_prompt_cache(llama)
    run(llama, cache, 300)
    g = geometry_from_config(LLAMA)
    unrounded = kv_bytes_at(g, 300, act_dtype_bytes=4, allocation_rounding=False)
    assert unrounded < nbytes(cache) == unrounded * 512 // 300


@pytest.mark.parametrize("tokens", [300, 512])
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_quantized_cache_matches(llama, tokens, bits, group):
    cache = cache_module.make_prompt_cache(llama)
    run(llama, cache, tokens)
    quantized = [c.to_quantized(group_size=group, bits=bits) for c in cache]
    mx.eval([c.state for c in quantized])
    g = geometry_from_config(LLAMA)
    expected = kv_bytes_at(
        g, tokens, bits, group, act_dtype_bytes=4, allocation_rounding=True
    )
    assert nbytes(quantized) == expected


@pytest.mark.parametrize(("bits", "group"), [(8, 64), (4, 32)])
def test_quantized_layout_is_packed_words_plus_scales_and_biases(llama, bits, group):
    cache = cache_module.make_prompt_cache(llama)
    run(llama, cache, 300)
    packed, scales, biases = cache[0].to_quantized(group_size=group, bits=bits).keys
    mx.eval(packed, scales, biases)
    # 512 allocated tokens; head_dim 128 packed into uint32 words of 32 / bits values.
    assert packed.dtype == mx.uint32
    assert packed.shape == (1, 2, 512, 128 * bits // 32)
    # One scale and one bias per group, in the activation dtype.
    assert scales.dtype == biases.dtype == mx.float32
    assert scales.shape == biases.shape == (1, 2, 512, 128 // group)


def test_float16_model_has_float16_scales():
    model = build(LLAMA, mx.float16)
    cache = cache_module.make_prompt_cache(model)
    run(model, cache, 300)
    quantized = [c.to_quantized(group_size=64, bits=8) for c in cache]
    mx.eval([c.state for c in quantized])
    g = geometry_from_config(LLAMA)
    assert nbytes(cache) == kv_bytes_at(g, 300, act_dtype_bytes=2)
    assert nbytes(quantized) == kv_bytes_at(g, 300, 8, 64, act_dtype_bytes=2)


def test_growth_token_by_token_crosses_a_step(llama):
    cache = cache_module.make_prompt_cache(llama)
    run(llama, cache, 510)
    decode(llama, cache, 3)  # 513 tokens: a third 256-token step
    g = geometry_from_config(LLAMA)
    assert nbytes(cache) == kv_bytes_at(g, 513, act_dtype_bytes=4) == 768 * 2048 * 2


def test_group_128_on_head_dim_64_is_refused_by_both():
    config = {**LLAMA, "head_dim": 64}
    g = geometry_from_config(config)
    with pytest.raises(ValueError, match="group size 128 does not divide head_dim 64"):
        kv_bytes_at(g, 300, 8, 128, act_dtype_bytes=4)
    model = build(config)
    cache = cache_module.make_prompt_cache(model)
    run(model, cache, 300)
    with pytest.raises(ValueError):
        mx.eval(cache[0].to_quantized(group_size=128, bits=8).keys)


def test_sliding_layers_cap_at_their_window_once_decoding():
    config = {
        **LLAMA,
        "num_hidden_layers": 4,
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "sliding_window": 256,
    }
    model = build(config)
    cache = cache_module.make_prompt_cache(model)
    assert [type(c).__name__ for c in cache[:2]] == ["RotatingKVCache", "KVCache"]
    g = geometry_from_config(config)
    run(model, cache, 300)
    # Right after a prefill chunk a sliding layer still holds the whole chunk ...
    per_token_sliding = 2 * 2 * 128 * 4
    assert (
        nbytes(cache)
        == kv_bytes_at(g, 300, act_dtype_bytes=4) + 2 * (300 - 256) * per_token_sliding
    )
    # ... and the next token trims it to the window.
    decode(model, cache, 1)
    assert nbytes(cache) == kv_bytes_at(g, 301, act_dtype_bytes=4)


def test_gemma3_pattern_matches_mlx_lm():
    config = {
        "model_type": "gemma3_text",
        "hidden_size": 128,
        "num_hidden_layers": 6,
        "intermediate_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": 256,
        "sliding_window": 256,
        "sliding_window_pattern": 3,
    }
    model = build(config)
    cache = cache_module.make_prompt_cache(model)
    run(model, cache, 300)
    decode(model, cache, 1)
    assert nbytes(cache) == kv_bytes_at(
        geometry_from_config(config), 301, act_dtype_bytes=4
    )


def test_qwen3_next_linear_attention_state_matches():
    config = {
        **LLAMA,
        "model_type": "qwen3_next",
        "num_hidden_layers": 4,
        "head_dim": 64,
        "linear_num_value_heads": 4,
        "linear_num_key_heads": 2,
        "linear_key_head_dim": 32,
        "linear_value_head_dim": 32,
        "linear_conv_kernel_dim": 4,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "shared_expert_intermediate_size": 64,
        "mlp_only_layers": [],
        "moe_intermediate_size": 64,
        "max_position_embeddings": 4096,
        "partial_rotary_factor": 0.25,
        "full_attention_interval": 2,
    }
    model = build(config)
    cache = cache_module.make_prompt_cache(model)
    run(model, cache, 300)
    assert nbytes(cache) == kv_bytes_at(
        geometry_from_config(config), 300, act_dtype_bytes=4
    )


@pytest.mark.parametrize("dtype_name", ["float32", "float16"])
def test_jamba_and_lfm2_and_mamba_state_matches(dtype_name):
    dtype = getattr(mx, dtype_name)
    act = 4 if dtype_name == "float32" else 2
    hybrid_base = {**LLAMA, "num_hidden_layers": 4, "head_dim": 32}  # 128 / 4 heads
    configs = [
        {
            **hybrid_base,
            "model_type": "jamba",
            "attn_layer_offset": 1,
            "attn_layer_period": 2,
            "expert_layer_offset": 1,
            "expert_layer_period": 2,
            "mamba_d_conv": 4,
            "mamba_d_state": 16,
            "mamba_expand": 2,
            "num_experts": 1,
            "num_experts_per_tok": 1,
            "mamba_dt_rank": "auto",
            "mamba_proj_bias": False,
            "mamba_conv_bias": True,
            "max_position_embeddings": 4096,
        },
        {
            **hybrid_base,
            "model_type": "lfm2",
            "max_position_embeddings": 4096,
            "norm_eps": 1e-5,
            "conv_bias": False,
            "conv_L_cache": 3,
            "block_dim": 128,
            "block_multiple_of": 32,
            "block_ffn_dim_multiplier": 1.0,
            "block_auto_adjust_ff_dim": False,
            "block_ff_dim": 256,
            "full_attn_idxs": [1, 3],
        },
        {
            "model_type": "mamba",
            "vocab_size": 256,
            "hidden_size": 64,
            "intermediate_size": 128,
            "state_size": 16,
            "num_hidden_layers": 2,
            "conv_kernel": 4,
            "use_bias": False,
            "use_conv_bias": True,
            "time_step_rank": 8,
        },
    ]
    for config in configs:
        model = build(config, dtype)
        cache = cache_module.make_prompt_cache(model)
        tokens = 40 if config["model_type"] == "mamba" else 300  # mamba scans per token
        run(model, cache, tokens)
        expected = kv_bytes_at(
            geometry_from_config(config), tokens, act_dtype_bytes=act
        )
        assert nbytes(cache) == expected, config["model_type"]


@pytest.mark.parametrize(("bits", "group"), [(16, 64), (8, 64), (4, 32)])
def test_deepseek_v3_latent_cache_matches(bits, group):
    config = {
        **LLAMA,
        "model_type": "deepseek_v3",
        "num_hidden_layers": 2,
        "num_key_value_heads": 4,
        "kv_lora_rank": 128,
        "q_lora_rank": None,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 64,
        "v_head_dim": 64,
        "n_routed_experts": None,
        "moe_intermediate_size": 64,
    }
    model = build(config)
    cache = cache_module.make_prompt_cache(model)
    run(model, cache, 300)
    if bits != 16:
        cache = [c.to_quantized(group_size=group, bits=bits) for c in cache]
        mx.eval([c.state for c in cache])
    g = geometry_from_config(config)
    assert (g.kv_heads, g.head_dim, g.v_head_dim) == (1, 128, 64)
    assert nbytes(cache) == kv_bytes_at(g, 300, bits, group, act_dtype_bytes=4)
    assert bytes_per_token(g, bits, group, act_dtype_bytes=4) > 0


def test_cpu_prefill_materializes_the_attention_scores():
    # Why prefill_scores_bytes exists: the peak during a prefill chunk grows with
    # heads x chunk x context, well beyond the cache itself.
    config = {**LLAMA, "num_attention_heads": 8, "head_dim": 32, "hidden_size": 256}
    model = build(config)
    cache = cache_module.make_prompt_cache(model)
    run(model, cache, 512)
    mx.clear_cache()
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    run(model, cache, 512)
    transient = mx.get_peak_memory() - before
    scores = prefill_scores_bytes(geometry_from_config(config), 512, 1024, 4)
    assert scores == 16 * 2**20  # 8 heads x 512 x 1024 x 4 bytes
    if mx.default_device() == mx.cpu:
        assert scores <= transient <= 2 * scores
