"""config.json -> ModelGeometry, on the configs of well-known public models."""

from __future__ import annotations

import pytest

from app.core.budget.layers import LayerKind
from app.core.budget.model_geometry import (
    geometry_from_config,
    layer_summary,
    read_geometry,
)
from app.core.errors import ModelLoadError


def kinds(geometry):
    return [layer.kind for layer in geometry.layers]


def test_llama_3_1_8b_reads_gqa_geometry(geometry):
    g = geometry("llama-3.1-8b-instruct")
    assert (g.model_type, g.text_model_type) == ("llama", "llama")
    assert g.num_layers == 32
    assert g.num_attention_heads == 32
    assert g.kv_heads == 8
    assert g.head_dim == g.v_head_dim == 128  # 4096 / 32
    assert g.dtype == "bfloat16"
    assert g.act_dtype_bytes == 2
    assert g.max_position_embeddings == 131072
    assert kinds(g) == [LayerKind.FULL] * 32
    assert g.notes == ()
    assert g.quantization is None


def test_qwen2_5_head_dim_comes_from_hidden_over_heads(geometry):
    g = geometry("qwen2.5-0.5b-instruct")
    assert (g.num_layers, g.kv_heads, g.head_dim) == (24, 2, 64)  # 896 / 14
    # use_sliding_window is false: no sliding, and nothing to warn about.
    assert g.sliding_window is None
    assert g.notes == ()


def test_mistral_v0_1_sliding_window_is_not_honoured_by_mlx_lm(geometry):
    g = geometry("mistral-7b-v0.1")
    assert g.text_model_type == "llama"  # mlx-lm runs mistral with its llama module
    assert kinds(g) == [LayerKind.FULL] * 32
    assert g.sliding_window is None
    (note,) = g.notes
    assert "4096" in note and "full attention" in note and "'mistral'" in note


def test_gemma2_alternating_windows_are_not_honoured_by_mlx_lm(geometry):
    g = geometry("gemma-2-9b-it")
    assert (g.num_layers, g.kv_heads, g.head_dim) == (42, 8, 256)
    assert kinds(g) == [LayerKind.FULL] * 42
    assert "4096" in g.notes[0]


def test_gemma3_vlm_reads_nested_text_config_with_mlx_lm_defaults(geometry):
    g = geometry("gemma-3-4b-it")
    assert (g.model_type, g.text_model_type) == ("gemma3", "gemma3_text")
    # text_config omits heads and head_dim: mlx-lm's gemma3 defaults are 8 / 4 / 256.
    assert (g.num_layers, g.num_attention_heads, g.kv_heads, g.head_dim) == (
        34,
        8,
        4,
        256,
    )
    assert g.dtype == "bfloat16"  # inherited from the top level
    full = [i for i, layer in enumerate(g.layers) if layer.kind is LayerKind.FULL]
    assert full == [5, 11, 17, 23, 29]  # every 6th layer is global
    assert g.count(LayerKind.SLIDING) == 29
    assert g.sliding_window == 1024
    assert layer_summary(g) == "5 full attention + 29 sliding (1024)"


def test_gemma3_1b_sliding_window_pattern(geometry):
    g = geometry("gemma-3-1b-it")
    assert g.count(LayerKind.FULL) == 4
    assert g.count(LayerKind.SLIDING) == 22
    assert {layer.window for layer in g.layers if layer.window} == {512}


def test_gemma3_270m_layer_types(geometry):
    g = geometry("gemma-3-270m")
    full = [i for i, layer in enumerate(g.layers) if layer.kind is LayerKind.FULL]
    assert full == [5, 11, 17]
    assert g.count(LayerKind.SLIDING) == 15
    assert g.notes == ()


def test_gemma3_layer_types_disagreeing_with_pattern_counts_layer_as_full(config):
    cfg = config("gemma-3-270m")
    cfg["layer_types"][0] = "full_attention"  # the pattern says layer 0 slides
    g = geometry_from_config(cfg)
    assert g.layers[0].kind is LayerKind.FULL
    assert "layer 0" in g.notes[0]


def test_llama_layer_types_with_sliding_layers_are_honoured(config):
    cfg = config("llama-3.1-8b-instruct")
    cfg["layer_types"] = ["sliding_attention", "full_attention"] * 16
    cfg["sliding_window"] = 4096
    g = geometry_from_config(cfg)
    assert g.count(LayerKind.SLIDING) == 16
    assert g.sliding_window == 4096
    assert g.notes == ()


def test_llama_sliding_layers_without_window_is_an_error(config):
    cfg = config("llama-3.1-8b-instruct")
    cfg["layer_types"] = ["sliding_attention"] * 32
    with pytest.raises(ModelLoadError, match="sliding_window"):
        geometry_from_config(cfg)


def test_qwen3_next_hybrid_linear_attention_layers_keep_constant_state(geometry):
    g = geometry("qwen3-next-80b-a3b-instruct")
    full = [i for i, layer in enumerate(g.layers) if layer.kind is LayerKind.FULL]
    assert full == list(range(3, 48, 4))
    assert (g.kv_heads, g.head_dim) == (2, 256)
    linear = g.layers[0]
    assert linear.kind is LayerKind.STATE
    # conv: (4 - 1) x (2 x 16 x 128 + 32 x 128); recurrent: 32 x 128 x 128 in float32.
    assert linear.state_act_elements == 3 * 8192
    assert linear.state_float32_elements == 32 * 128 * 128
    assert linear.state_bytes(2) == 49152 + 2097152


def test_jamba_attention_period_and_mamba_state(geometry):
    g = geometry("jamba-v0.1")
    full = [i for i, layer in enumerate(g.layers) if layer.kind is LayerKind.FULL]
    assert full == [4, 12, 20, 28]
    mamba = g.layers[0]
    # conv: (4 - 1) x 8192; ssm: 8192 x 16, both in the activation dtype.
    assert mamba.state_act_elements == 3 * 8192 + 8192 * 16
    assert g.notes == ()  # "sliding_window": null declares nothing


def test_pure_mamba_has_no_attention():
    cfg = {
        "model_type": "mamba",
        "hidden_size": 768,
        "intermediate_size": 1536,
        "state_size": 16,
        "num_hidden_layers": 24,
        "conv_kernel": 4,
        "torch_dtype": "float32",
    }
    g = geometry_from_config(cfg)
    assert g.count(LayerKind.STATE) == 24
    assert (g.kv_heads, g.head_dim) == (0, 0)
    assert g.layers[0].state_bytes(4) == (3 * 1536 + 1536 * 16) * 4


def test_lfm2_full_attn_idxs():
    cfg = {
        "model_type": "lfm2",
        "hidden_size": 1024,
        "num_hidden_layers": 6,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "conv_L_cache": 3,
        "full_attn_idxs": [2, 5],
    }
    g = geometry_from_config(cfg)
    assert kinds(g) == [LayerKind.STATE] * 2 + [LayerKind.FULL] + [
        LayerKind.STATE
    ] * 2 + [LayerKind.FULL]
    assert g.layers[0].state_act_elements == 2 * 1024


def test_deepseek_v3_caches_the_mla_latent(geometry):
    g = geometry("deepseek-v3")
    # mlx-lm caches one "head": the 512-wide latent as keys, the 64-wide RoPE part as
    # values.
    assert (g.kv_heads, g.head_dim, g.v_head_dim) == (1, 512, 64)
    assert g.quantization is not None and g.quantization.method == "fp8"


def test_deepseek_v2_caches_full_keys_and_values(config):
    cfg = config("deepseek-v3")
    cfg["model_type"] = "deepseek_v2"
    g = geometry_from_config(cfg)
    assert (g.kv_heads, g.head_dim, g.v_head_dim) == (128, 128 + 64, 128)


def test_mlx_community_quantization_entry(geometry):
    g = geometry("mlx-community-llama-3.2-1b-4bit")
    assert g.quantization is not None
    assert (g.quantization.bits, g.quantization.group_size) == (4, 64)
    assert g.head_dim == 64


def test_transformers_5_dtype_key():
    g = geometry_from_config(
        {
            "model_type": "qwen2",
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "hidden_size": 64,
            "dtype": "float32",
        }
    )
    assert g.dtype == "float32"
    assert g.act_dtype_bytes == 4
    assert g.kv_heads == 2  # defaults to the attention heads without GQA


def test_undeclared_dtype_is_assumed_16_bit():
    g = geometry_from_config(
        {
            "model_type": "llama",
            "num_hidden_layers": 1,
            "num_attention_heads": 1,
            "hidden_size": 64,
        }
    )
    assert g.dtype is None
    assert g.act_dtype_bytes == 2


def test_read_geometry_from_a_folder(model_dir):
    g = read_geometry(model_dir("llama-3.1-8b-instruct"))
    assert g.kv_heads == 8
    assert g.source.endswith("config.json")


@pytest.mark.parametrize(
    ("contents", "message"),
    [
        (None, "has no config.json"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"num_hidden_layers": 2}', "no model_type"),
        ('{"model_type": "llama"}', "no num_hidden_layers"),
        (
            '{"model_type": "llama", "num_hidden_layers": "32", "num_attention_heads": 4}',
            "num_hidden_layers must be an integer",
        ),
        (
            '{"model_type": "llama", "num_hidden_layers": 0, "num_attention_heads": 4}',
            "must be at least 1",
        ),
        (
            '{"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 3,'
            ' "hidden_size": 64}',
            "not divisible",
        ),
        (
            '{"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2,'
            ' "hidden_size": 64, "layer_types": ["full_attention"]}',
            "layer_types has 1 entries",
        ),
        (
            '{"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 2,'
            ' "hidden_size": 64, "torch_dtype": "int8"}',
            "unsupported torch_dtype",
        ),
        ('{"model_type": "gemma3", "text_config": 5}', "text_config must be an object"),
    ],
)
def test_invalid_config_raises_model_load_error_naming_the_folder(
    tmp_path, contents, message
):
    folder = tmp_path / "broken-model"
    folder.mkdir()
    if contents is not None:
        (folder / "config.json").write_text(contents)
    with pytest.raises(ModelLoadError, match=message) as info:
        read_geometry(folder)
    assert "broken-model" in str(info.value)


def test_missing_folder_raises_model_load_error(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        read_geometry(tmp_path / "nowhere")


def test_geometry_is_frozen(geometry):
    g = geometry("llama-3.1-8b-instruct")
    with pytest.raises(AttributeError):
        g.kv_heads = 1  # type: ignore[misc]
