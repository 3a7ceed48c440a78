"""What the budget counts for a model's weights on each backend, from the headers."""

from __future__ import annotations

import json

import pytest

from app.core.budget.runtime_profile import (
    AS_STORED,
    DENSE,
    PACKED,
    kernel_gap,
    layer_bits,
    profile_for_backend,
    resident_weights_bytes,
    weights_layout,
)
from app.core.budget.weights import cpu_resident_bytes
from tests.core.budget.test_weights import write_safetensors

CPU_KERNEL = profile_for_backend(False, native_kernel=True)
CPU_PLAIN = profile_for_backend(False)
METAL = profile_for_backend(True)


@pytest.mark.parametrize(
    ("quantization", "gap"),
    [
        ({"bits": 4, "group_size": 64}, None),
        ({"bits": 8, "group_size": 128, "mode": "affine"}, None),
        ({"bits": 4, "group_size": 64, "lm_head": False}, None),
        ({"bits": 4, "group_size": 64, "a.down": {"bits": 8, "group_size": 32}}, None),
        ({"bits": 3, "group_size": 64}, "the model is 3-bit, group 64"),
        ({"bits": 4, "group_size": 16}, "the model is 4-bit, group 16"),
        (
            {"bits": 4, "group_size": 64, "a.down": {"bits": 6, "group_size": 64}},
            "a.down is 6-bit, group 64",
        ),
        (
            {"bits": 4, "group_size": 32, "mode": "mxfp4"},
            "the model uses mxfp4 quantization",
        ),
    ],
)
def test_the_kernel_covers_affine_4_and_8_bit_only(quantization, gap):
    found = kernel_gap(quantization)
    assert (found is None) == (gap is None)
    if gap is not None:
        assert found is not None and found.startswith(gap)


def test_layer_bits_prefer_the_layers_own_entry():
    quantization = {"bits": 4, "group_size": 64, "a.down": {"bits": 8}}
    assert layer_bits(quantization, "a.down") == 8
    assert layer_bits(quantization, "a.up") == 4
    assert layer_bits({}, "a.up") is None


def _model(tmp_path, quantization):
    # One 4-bit layer (64 x 128, group 64) whose scales sit in the other shard, a
    # bfloat16 embedding and a float32 norm.
    write_safetensors(
        tmp_path / "model-00001-of-00002.safetensors",
        {"a.up.weight": ("U32", [64, 16]), "embed": ("BF16", [32, 128])},
    )
    write_safetensors(
        tmp_path / "model-00002-of-00002.safetensors",
        {
            "a.up.scales": ("BF16", [64, 2]),
            "a.up.biases": ("BF16", [64, 2]),
            "norm": ("F32", [128]),
        },
    )
    config = {"quantization": quantization} if quantization else {}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return config


def test_packed_dense_and_stored_counts(tmp_path):
    config = _model(tmp_path, {"bits": 4, "group_size": 64})
    floats = (32 * 128 + 128) * 4
    packed = 64 * 16 * 4 + 2 * 64 * 2 * 4 + floats
    dense = 64 * 128 * 4 + floats
    stored = 64 * 16 * 4 + 2 * 64 * 2 * 2 + 32 * 128 * 2 + 128 * 4
    assert weights_layout(config, CPU_KERNEL) == PACKED
    assert resident_weights_bytes(tmp_path, config, CPU_KERNEL) == packed
    assert weights_layout(config, CPU_PLAIN) == DENSE
    assert resident_weights_bytes(tmp_path, config, CPU_PLAIN) == dense
    assert weights_layout(config, METAL) == AS_STORED
    assert resident_weights_bytes(tmp_path, config, METAL) == stored


def test_a_layer_the_kernel_cannot_serve_widens_the_whole_model(tmp_path):
    config = _model(tmp_path, {"bits": 4, "group_size": 64, "x": {"bits": 3}})
    assert weights_layout(config, CPU_KERNEL) == DENSE
    assert resident_weights_bytes(tmp_path, config, CPU_KERNEL) == (
        resident_weights_bytes(tmp_path, config, CPU_PLAIN)
    )


def test_per_layer_bits_unpack_their_own_width(tmp_path):
    _model(tmp_path, None)
    # The same 16 words per row hold 128 4-bit or 64 8-bit values.
    four = cpu_resident_bytes(tmp_path, 4, packed=False, layer_bits=lambda _: 4)
    eight = cpu_resident_bytes(tmp_path, 4, packed=False, layer_bits=lambda _: 8)
    assert four - eight == 64 * 64 * 4
    # (3-bit values straddle words: a real 3-bit model, loaded, is checked in
    # tests/core/engine/cpu/test_resident_estimate.py.)


def test_an_unquantized_model_is_float32_on_the_cpu(tmp_path):
    config = _model(tmp_path, None)
    assert weights_layout(config, CPU_KERNEL) == DENSE
