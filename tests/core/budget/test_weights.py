"""Weights size from safetensors headers, without loading any tensor."""

from __future__ import annotations

import json
import math
import struct

import pytest

from app.core.budget.weights import read_weights, weights_bytes
from app.core.errors import ModelLoadError

ITEMSIZE = {"F16": 2, "BF16": 2, "F32": 4, "U32": 4}


def write_safetensors(path, tensors):
    """Write a valid safetensors file by hand: {name: (dtype, shape)}, zero data."""
    header, offset = {"__metadata__": {"format": "mlx"}}, 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * ITEMSIZE[dtype]
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    return offset


def test_sums_tensor_bytes_across_shards_and_dtypes(tmp_path):
    a = write_safetensors(
        tmp_path / "model-00001-of-00002.safetensors",
        {"embed": ("BF16", [256, 64]), "norm": ("F32", [64])},
    )
    b = write_safetensors(
        tmp_path / "model-00002-of-00002.safetensors",
        {
            "q.weight": ("U32", [64, 8]),
            "q.scales": ("BF16", [64, 1]),
            "q.biases": ("BF16", [64, 1]),
        },
    )
    info = read_weights(tmp_path)
    assert info.tensor_bytes == a + b == weights_bytes(tmp_path)
    assert info.file_bytes > info.tensor_bytes  # headers are on disk too
    assert dict(info.bytes_by_dtype) == {
        "BF16": 256 * 64 * 2 + 2 * 64 * 2,
        "F32": 64 * 4,
        "U32": 64 * 8 * 4,
    }
    assert len(info.files) == 2


def test_resident_bytes_when_the_engine_upcasts_to_float32(tmp_path):
    write_safetensors(
        tmp_path / "model.safetensors",
        {"w": ("F16", [10, 10]), "packed": ("U32", [10]), "n": ("F32", [5])},
    )
    info = read_weights(tmp_path)
    assert info.resident_bytes() == 200 + 40 + 20
    # 16-bit floats double; packed quantized words and float32 stay as they are.
    assert info.resident_bytes(4) == 400 + 40 + 20


def test_matches_a_file_written_by_mlx(tmp_path):
    mx = pytest.importorskip("mlx.core")
    arrays = {
        "a": mx.zeros((3, 5), dtype=mx.bfloat16),
        "b": mx.zeros((7,), dtype=mx.float32),
        "c": mx.zeros((2, 4), dtype=mx.uint32),
    }
    mx.save_safetensors(str(tmp_path / "model.safetensors"), arrays)
    assert weights_bytes(tmp_path) == sum(a.nbytes for a in arrays.values())


def test_no_weights_is_a_model_load_error(tmp_path):
    with pytest.raises(ModelLoadError, match="has no .safetensors"):
        read_weights(tmp_path)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x01\x02", "too short"),
        (struct.pack("<Q", 10**12) + b"{}", "invalid safetensors header length"),
        (struct.pack("<Q", 4) + b"{{{{", "corrupt safetensors header"),
        (struct.pack("<Q", 2) + b"[]", "corrupt safetensors header"),
    ],
)
def test_corrupt_files(tmp_path, data, message):
    (tmp_path / "model.safetensors").write_bytes(data)
    with pytest.raises(ModelLoadError, match=message) as info:
        read_weights(tmp_path)
    assert "model.safetensors" in str(info.value)


def test_truncated_data_is_detected(tmp_path):
    path = tmp_path / "model.safetensors"
    write_safetensors(path, {"w": ("F16", [100, 100])})
    path.write_bytes(path.read_bytes()[:-10])  # an interrupted download
    with pytest.raises(ModelLoadError, match="truncated"):
        read_weights(tmp_path)


def test_unknown_dtype_and_malformed_entry(tmp_path):
    path = tmp_path / "model.safetensors"
    raw = json.dumps(
        {"w": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}}
    ).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0")
    with pytest.raises(ModelLoadError, match="unknown dtype 'Q9'"):
        read_weights(tmp_path)
    raw = json.dumps({"w": {"dtype": "F16"}}).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(ModelLoadError, match="malformed"):
        read_weights(tmp_path)
