"""The reference model's fixed geometry and ``config.json``.

Chosen so every KV setting Swapless offers applies to it: head_dim 128 admits
quantization groups of 32, 64 and 128, and two KV heads per layer keep the cache
grouped-query like real models. rope_theta 1e6 gives the lowest-frequency rotary pairs
the near-constant phase over 4K positions that the copy head's matching relies on.
"""

from __future__ import annotations

VOCAB_SIZE = 2048
HIDDEN_SIZE = 256
NUM_LAYERS = 4
NUM_HEADS = 4
NUM_KV_HEADS = 2
HEAD_DIM = 128
INTERMEDIATE_SIZE = 512
ROPE_THETA = 1_000_000.0
# Trained on sequences up to 1,280 tokens; the copy circuit's matching holds to 4K
# (`circuit`), and pass keys are probed up to 2K.
MAX_POSITION_EMBEDDINGS = 4096
RMS_NORM_EPS = 1e-5


def reference_config() -> dict:
    """Return the reference model's ``config.json`` (before token ids are filled in)."""
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_act": "silu",
        "hidden_size": HIDDEN_SIZE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_KV_HEADS,
        "head_dim": HEAD_DIM,
        "intermediate_size": INTERMEDIATE_SIZE,
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
        "rope_theta": ROPE_THETA,
        "rms_norm_eps": RMS_NORM_EPS,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": True,
        "torch_dtype": "float16",
    }
