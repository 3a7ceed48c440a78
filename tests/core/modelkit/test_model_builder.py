"""The local model builder writes folders that mlx-lm loads and runs unchanged."""

from __future__ import annotations

import json
from unicodedata import normalize

import mlx.core as mx
import mlx.nn as nn
import mlx_lm
import pytest
from tokenizers import Tokenizer

from app.core.modelkit.model_builder import (
    ALLOWED_BITS,
    GROUP_SIZE,
    SHAPES,
    build_model,
    model_config,
)
from app.core.modelkit.tokenizer_training import (
    CHATML_TEMPLATE,
    QWEN2_PRETOKENIZE_REGEX,
    train_tokenizer,
)

# Code, prose, unicode, numbers and whitespace runs: where pre-tokenizers disagree.
TEXTS = [
    "def build(folder, bits=16):\n    return Path(folder) / 'config.json'\n",
    "class KVCache:\n\tdef trim(self, n):\n\t\tself.offset -= n  # drop newest\n",
    "The quick brown fox jumps over the lazy dog.",
    "Memory pressure rises when the cache grows; trim it before it swaps!",
    "I'm sure you'll see they've said it's done, we'd know. DON'T SHOUT.",
    "Héllo wörld, çà et là: naïve café, Straße, ﬁne ligatures",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "Emoji 😀👍🏽 and flags 🇫🇷 with ZWJ 👩‍💻 sequences",
    "Café composed vs Cafe\u0301 decomposed (NFC matters)",
    "12345 3.14159 -0.001 1e-9 0x1F 1_000_000 2024-06-30",
    "Prices: $1,299.99 or €1.299,99; 50% off!!! #1 @user",
    "    leading spaces and trailing spaces    ",
    "runs   of    spaces\n\n\n\nnewlines\r\n\r\nand\t\t\ttabs",
    "   \n  \n\t \n",
    "",
    "a",
    "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
    "text with <|endoftext|> inside and <|im_end|> too",
    "SELECT id, role FROM messages WHERE conversation_id = ? ORDER BY id;",
    '{"key": [1, 2, {"nested": null}], "ok": true}',
    "Ωμέγα, Привет, مرحبا, שלום, नमस्ते",
]


def _weights(folder):
    return mx.load(str(folder / "model.safetensors"))


def _config(folder):
    return json.loads((folder / "config.json").read_text())


@pytest.fixture(params=["llama", "qwen2"])
def tiny_dir(request):
    """Each tiny architecture's session model in turn."""
    name = "tiny_model_dir" if request.param == "llama" else "tiny_qwen2_model_dir"
    return request.getfixturevalue(name)


def test_tiny_llama_loads_with_documented_geometry(tiny_model_dir):
    model, tokenizer, config = mlx_lm.load(str(tiny_model_dir), return_config=True)

    assert config["model_type"] == "llama"
    assert config["torch_dtype"] == "bfloat16"
    assert config["swapless_builder"] == {
        "shape": "tiny",
        "arch": "llama",
        "seed": 0,
        "random_weights": True,
    }
    assert "quantization" not in config
    assert len(model.layers) == 2
    attention = model.layers[0].self_attn
    assert (attention.n_heads, attention.n_kv_heads, attention.head_dim) == (4, 2, 128)
    assert model.model.embed_tokens.weight.shape == (1024, 128)
    assert config["max_position_embeddings"] >= 4096
    # Tied embeddings: no separate output matrix is stored.
    assert "lm_head.weight" not in _weights(tiny_model_dir)
    assert {v.dtype for v in _weights(tiny_model_dir).values()} == {mx.bfloat16}
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in tokenizer.eos_token_ids


def test_tiny_qwen2_has_qkv_biases_and_the_same_kv_geometry(tiny_qwen2_model_dir):
    model, _, config = mlx_lm.load(str(tiny_qwen2_model_dir), return_config=True)

    assert config["model_type"] == "qwen2"
    weights = _weights(tiny_qwen2_model_dir)
    for name in ("q_proj", "k_proj", "v_proj"):
        assert f"model.layers.0.self_attn.{name}.bias" in weights
    assert "model.layers.0.self_attn.o_proj.bias" not in weights
    # mlx-lm's qwen2 derives head_dim from hidden_size, so hidden is widened to keep
    # head_dim 128 and the KV cache of the llama tiny.
    k_proj = model.layers[0].self_attn.k_proj
    assert k_proj.weight.shape == (2 * 128, 4 * 128)


def test_random_weights_give_finite_logits(tiny_dir):
    model, tokenizer = mlx_lm.load(str(tiny_dir))
    logits = model(mx.array([tokenizer.encode(TEXTS[0] * 8)]))
    assert bool(mx.all(mx.isfinite(logits)))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_builds_load_as_quantized_layers(tmp_path, arch, bits):
    folder = build_model(tmp_path / "m", "tiny", bits=bits, seed=0, arch=arch)

    model, tokenizer, config = mlx_lm.load(str(folder), return_config=True)

    expected = {"group_size": GROUP_SIZE, "bits": bits, "mode": "affine"}
    assert config["quantization"] == expected
    assert _config(folder)["quantization_config"] == expected
    layers = [m for _, m in model.named_modules() if isinstance(m, nn.QuantizedLinear)]
    # 7 projections per block, and all of them quantize with group size 64.
    assert len(layers) == 7 * 2
    assert all(layer.bits == bits for layer in layers)
    assert isinstance(model.model.embed_tokens, nn.QuantizedEmbedding)
    # Like mlx_lm.convert of a bfloat16 checkpoint: scales stay bfloat16.
    assert layers[0].scales.dtype == mx.bfloat16
    logits = model(mx.array([tokenizer.encode("hello world")]))
    assert bool(mx.all(mx.isfinite(logits)))


def test_tokenizer_json_and_mlx_lm_tokenizer_agree(tiny_dir):
    _, loaded = mlx_lm.load(str(tiny_dir))
    raw = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))

    mismatches = [text for text in TEXTS if loaded.encode(text) != raw.encode(text).ids]

    assert mismatches == []
    # Byte-level: every text round-trips (after NFC), nothing maps to an unknown token.
    for text in TEXTS:
        ids = raw.encode(text).ids
        assert raw.decode(ids, skip_special_tokens=False) == normalize("NFC", text)


def test_qwen2_split_regex_is_transformers_own():
    from transformers.models.qwen2 import tokenization_qwen2

    assert QWEN2_PRETOKENIZE_REGEX == tokenization_qwen2.PRETOKENIZE_REGEX


def test_chat_template_renders_chatml(tiny_dir):
    _, tokenizer = mlx_lm.load(str(tiny_dir))
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "system", "content": "Now answer in French."},
        {"role": "user", "content": "Bye"},
    ]

    rendered = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    without_prompt = tokenizer.apply_chat_template(messages[:3], tokenize=False)

    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>system\nNow answer in French.<|im_end|>\n"
        "<|im_start|>user\nBye<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert without_prompt.endswith("<|im_start|>assistant\nHello.<|im_end|>\n")
    config = json.loads((tiny_dir / "tokenizer_config.json").read_text())
    assert config["chat_template"] == CHATML_TEMPLATE
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    # Special tokens are single ids, as the model must see them.
    ids = tokenizer.encode("<|im_start|>user\n")
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")


def test_greedy_generation_returns_text(tiny_dir):
    model, tokenizer = mlx_lm.load(str(tiny_dir))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Say something."}], add_generation_prompt=True
    )

    text = mlx_lm.generate(model, tokenizer, prompt, max_tokens=5)

    assert isinstance(text, str)
    assert text


def test_same_seed_same_weights_other_seed_different(tmp_path, tiny_model_dir):
    again = build_model(tmp_path / "again", "tiny", bits=16, seed=0)
    other = build_model(tmp_path / "other", "tiny", bits=16, seed=1)

    first, second, third = map(_weights, (tiny_model_dir, again, other))

    assert (again / "model.safetensors").read_bytes() == (
        tiny_model_dir / "model.safetensors"
    ).read_bytes()
    assert first.keys() == third.keys()
    for name, value in first.items():
        assert mx.array_equal(value, second[name]), name
        if "norm" not in name:
            assert not mx.array_equal(value, third[name]), name
    assert _config(other)["swapless_builder"]["seed"] == 1


@pytest.mark.parametrize("bits", [0, 2, 3, 6, 32])
def test_bad_bits_are_refused_with_the_allowed_values(tmp_path, bits):
    with pytest.raises(ValueError, match="4, 8, 16"):
        build_model(tmp_path / "m", "tiny", bits=bits)
    assert not (tmp_path / "m").exists()


def test_unknown_shape_and_arch_are_refused(tmp_path):
    parent = tmp_path / "models"
    with pytest.raises(ValueError, match="tiny, small, qwen05"):
        build_model(parent / "m", "huge")
    with pytest.raises(ValueError, match="llama, qwen2"):
        build_model(parent / "m", "tiny", arch="gpt2")
    assert not parent.exists()


def test_a_non_empty_folder_is_not_overwritten(tmp_path):
    folder = tmp_path / "models" / "m"
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("mine")

    with pytest.raises(FileExistsError):
        build_model(folder, "tiny")

    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    # No staging folder is left behind either.
    assert [p.name for p in folder.parent.iterdir()] == ["m"]


def test_an_empty_existing_folder_is_filled(tmp_path):
    folder = tmp_path / "models" / "m"
    folder.mkdir(parents=True)

    build_model(folder, "tiny")

    assert (folder / "config.json").is_file()
    assert [p.name for p in folder.parent.iterdir()] == ["m"]


def test_shapes_keep_their_documented_geometry():
    # Checked on the configs alone: building qwen05 takes seconds and 1 GB.
    qwen = model_config("qwen05")
    assert qwen["model_type"] == "qwen2"
    assert {
        key: qwen[key]
        for key in (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "num_key_value_heads",
            "intermediate_size",
            "vocab_size",
            "rope_theta",
            "tie_word_embeddings",
        )
    } == {
        "num_hidden_layers": 24,
        "hidden_size": 896,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
        "vocab_size": 151936,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
    }
    small = model_config("small")
    assert (small["num_hidden_layers"], small["hidden_size"], small["head_dim"]) == (
        8,
        512,
        64,
    )
    assert small["max_position_embeddings"] == 32768
    for name, shape in SHAPES.items():
        config = model_config(name)
        # Every weight matrix's input size must split into quantization groups.
        assert config["hidden_size"] % GROUP_SIZE == 0, name
        assert shape.intermediate_size % GROUP_SIZE == 0, name
        assert shape.tokenizer_vocab_size <= shape.vocab_size, name
    assert all(SHAPES["tiny"].head_dim % group == 0 for group in (32, 64, 128))
    assert ALLOWED_BITS == (4, 8, 16)


def test_tokenizer_training_is_cached_and_deterministic():
    first = train_tokenizer(1024)
    first.add_tokens(["<|caller-mutation|>"])

    second = train_tokenizer(1024)

    assert second.get_vocab_size() == 1024
    assert second.token_to_id("<|caller-mutation|>") is None


@pytest.mark.slow
def test_qwen05_builds_quantized_and_loads(tmp_path):
    folder = build_model(tmp_path / "q05", "qwen05", bits=4)

    model, tokenizer, config = mlx_lm.load(str(folder), return_config=True)

    assert config["quantization"]["bits"] == 4
    assert model.model.embed_tokens.weight.shape[0] == 151936
    logits = model(mx.array([tokenizer.encode("hello world")]))
    assert logits.shape[-1] == 151936
    assert bool(mx.all(mx.isfinite(logits)))
