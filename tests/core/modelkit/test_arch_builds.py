"""`swapless make-model --arch NAME` builds every family that mlx-lm loads unchanged."""

from __future__ import annotations

import hashlib
import json

import mlx.core as mx
import mlx_lm
import pytest
from mlx_lm.models.cache import make_prompt_cache
from tokenizers import Tokenizer

from app.cli.main import build_parser
from app.core.modelkit.arch_configs import ARCH_SPECS, ARCHES
from app.core.modelkit.model_builder import build_model, model_config

# Where pre-tokenizers disagree: combining marks (Qwen3.5's split keeps them with the
# letter), code, unicode, digits, whitespace runs and special tokens.
TEXTS = [
    "Café composed vs Cafe\u0301 decomposed, and a\u0308\u0301 stacked marks",
    "def build(folder, bits=16):\n    return Path(folder) / 'config.json'\n",
    "Héllo wörld, naïve café; 日本語のテキスト; Привет; नमस्ते",
    "12345 3.14159 -0.001 1e-9    spaces\n\n\ttabs",
    "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
]

# The cache class of every entry, as mlx-lm's make_cache gives it for the tiny shape.
EXPECTED_CACHES = {
    "llama": ["KVCache"] * 2,
    "qwen2": ["KVCache"] * 2,
    "qwen3": ["KVCache"] * 2,
    "gemma3_text": ["RotatingKVCache", "RotatingKVCache", "KVCache"],
    # Six layers, the last two KV-shared (no cache of their own).
    "gemma4_text": ["RotatingKVCache", "RotatingKVCache", "KVCache", "RotatingKVCache"],
    "gpt_oss": ["RotatingKVCache", "KVCache"],
    "qwen3_5": ["ArraysCache"] * 3 + ["KVCache"],
    "qwen3_5_moe": ["ArraysCache"] * 3 + ["KVCache"],
    "qwen3_next": ["ArraysCache"] * 3 + ["KVCache"],
    "granitemoehybrid": ["ArraysCache"] * 3 + ["KVCache"],
    "lfm2": ["ArraysCache", "KVCache"],
}


def test_every_architecture_is_listed():
    assert set(EXPECTED_CACHES) == set(ARCHES)


@pytest.mark.parametrize("arch", ARCHES)
def test_builds_load_with_mlx_lm_and_generate(arch_model_dir, arch):
    folder = arch_model_dir(arch)
    model, tokenizer, config = mlx_lm.load(str(folder), return_config=True)
    assert config["model_type"] == ARCH_SPECS[arch].model_type
    assert config["swapless_builder"]["arch"] == arch
    cache = make_prompt_cache(model)
    assert [type(c).__name__ for c in cache] == EXPECTED_CACHES[arch]
    # As the engine does on the CPU backend (backend.adapt_model): MLX's CPU gather
    # matmul behind the MoE layers only supports float32.
    model.set_dtype(mx.float32)
    ids = tokenizer.encode("Hello there, how are you?")
    logits = model(mx.array(ids)[None], cache=cache)
    assert logits.shape == (1, len(ids), 1024)  # the tiny shape's vocabulary
    assert bool(mx.all(mx.isfinite(logits)))


@pytest.mark.parametrize("arch", ARCHES)
def test_the_loaded_tokenizer_agrees_with_tokenizer_json(arch_model_dir, arch):
    folder = arch_model_dir(arch)
    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
    _, tokenizer = mlx_lm.load(str(folder))
    for text in TEXTS:
        assert tokenizer.encode(text, add_special_tokens=False) == (
            raw.encode(text, add_special_tokens=False).ids
        ), (arch, text)
    if ARCH_SPECS[arch].tokenizer_split == "qwen3_5":
        # transformers 5 rebuilds the split for qwen3_5* model types.
        assert type(tokenizer._tokenizer).__name__ == "Qwen3_5Tokenizer"


def test_real_config_fields_and_layouts():
    qwen = model_config("tiny", "qwen3_5")
    assert qwen["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    text = qwen["text_config"]
    assert text["model_type"] == "qwen3_5_text"
    assert text["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert text["full_attention_interval"] == 4
    gemma = model_config("tiny", "gemma4_text")
    assert gemma["num_kv_shared_layers"] == 2 and gemma["global_head_dim"] == 128
    gpt = model_config("tiny", "gpt_oss")
    assert gpt["layer_types"] == ["sliding_attention", "full_attention"]
    assert gpt["sliding_window"] == 64
    granite = model_config("tiny", "granitemoehybrid")
    assert granite["layer_types"] == ["mamba"] * 3 + ["attention"]
    # mlx-lm derives granite's head size from hidden / heads: widened to keep 128.
    assert granite["hidden_size"] // granite["num_attention_heads"] == 128
    lfm2 = model_config("tiny", "lfm2")
    assert lfm2["full_attn_idxs"] == [1]


def test_unknown_architecture_lists_the_allowed_ones():
    with pytest.raises(ValueError, match="allowed architectures: llama, qwen2, qwen3"):
        model_config("tiny", "mamba9")


def test_recurrent_decay_and_norms_are_set_and_the_build_is_deterministic(tmp_path):
    first = build_model(tmp_path / "a", shape="tiny", arch="granitemoehybrid", seed=3)
    second = build_model(tmp_path / "b", shape="tiny", arch="granitemoehybrid", seed=3)
    digest = [
        hashlib.sha256((f / "model.safetensors").read_bytes()).hexdigest()
        for f in (first, second)
    ]
    assert digest[0] == digest[1]
    weights = mx.load(str(first / "model.safetensors"))
    a_log = [v for k, v in weights.items() if k.endswith("A_log")]
    assert a_log and all(mx.all(v == -3.0).item() for v in a_log)
    norms = [v for k, v in weights.items() if k.endswith("norm.weight")]
    assert norms and all(mx.all(v == 1.0).item() for v in norms)
    config = json.loads((first / "config.json").read_text())
    assert config["swapless_builder"]["seed"] == 3


def test_make_model_accepts_every_architecture():
    parser = build_parser()
    for arch in ARCHES:
        args = parser.parse_args(["make-model", "/tmp/x", "--arch", arch])
        assert args.arch == arch
