"""Size of a model's weights, from its ``*.safetensors`` files, without loading them.

The budget needs the weights' size before deciding to load the model, and loading just
to find out would defeat the purpose. A safetensors file starts with an 8-byte
little-endian header length and a JSON header giving each tensor's dtype, shape and byte
range, so reading a few kilobytes per file gives the exact tensor bytes, per dtype.
Per-dtype totals matter because the engine may convert 16-bit tensors to float32 on the
CPU backend, doubling their resident size (see `WeightsInfo.resident_bytes`).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from app.core.errors import ModelLoadError

# Bytes per element of the safetensors dtypes.
SAFETENSORS_DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "U16": 2,
    "I16": 2,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "F32": 4,
    "U64": 8,
    "I64": 8,
    "F64": 8,
}
# Float tensors the engine may convert to its activation dtype when loading; packed
# quantized weights (U32) and float64 are left as they are.
CONVERTIBLE_FLOAT_DTYPES = frozenset({"F16", "BF16", "F32"})
# A header is a few hundred bytes per tensor; anything near this is a corrupt file.
MAX_HEADER_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class WeightsInfo:
    """The weights of one model folder.

    Attributes:
        files: The safetensors files, sorted by name.
        file_bytes: Their total size on disk (headers included).
        tensor_bytes: Total bytes of tensor data, from the headers.
        bytes_by_dtype: Tensor bytes per safetensors dtype (``"BF16"``, ``"U32"``...).
    """

    files: tuple[Path, ...]
    file_bytes: int
    tensor_bytes: int
    bytes_by_dtype: Mapping[str, int] = field(default_factory=dict)

    def resident_bytes(self, float_dtype_bytes: int | None = None) -> int:
        """Bytes the weights take in memory once loaded.

        Args:
            float_dtype_bytes: If the engine converts float tensors to another width
                (4 when it upcasts to float32 on the CPU backend), that width; ``None``
                keeps them as stored. Packed quantized weights keep their size; a
                dequantization to dense weights is not accounted for here.

        Returns:
            Bytes.
        """
        if float_dtype_bytes is None:
            return self.tensor_bytes
        total = 0
        for dtype, nbytes in self.bytes_by_dtype.items():
            if dtype in CONVERTIBLE_FLOAT_DTYPES:
                elements = nbytes // SAFETENSORS_DTYPE_BYTES[dtype]
                total += elements * float_dtype_bytes
            else:
                total += nbytes
        return total


def read_weights(model_dir: Path) -> WeightsInfo:
    """Read the sizes of every ``*.safetensors`` file in a model folder.

    Args:
        model_dir: The model folder.

    Returns:
        The weights' sizes.

    Raises:
        ModelLoadError: No safetensors file, or one that is unreadable or corrupt; the
            message names the file.
    """
    model_dir = Path(model_dir)
    files = tuple(sorted(model_dir.glob("*.safetensors")))
    if not files:
        raise ModelLoadError(f"Model folder {model_dir} has no .safetensors weights.")
    by_dtype: dict[str, int] = {}
    file_bytes = 0
    for path in files:
        file_bytes += path.stat().st_size
        for dtype, nbytes in _tensor_bytes_by_dtype(path).items():
            by_dtype[dtype] = by_dtype.get(dtype, 0) + nbytes
    return WeightsInfo(
        files=files,
        file_bytes=file_bytes,
        tensor_bytes=sum(by_dtype.values()),
        bytes_by_dtype=MappingProxyType(dict(sorted(by_dtype.items()))),
    )


def weights_bytes(model_dir: Path) -> int:
    """Total tensor bytes of a model folder's weights, as stored."""
    return read_weights(model_dir).tensor_bytes


def read_header(path: Path) -> tuple[dict, int]:
    """Read and check one safetensors file's JSON header.

    Returns:
        (header without ``__metadata__``, bytes of tensor data in the file).

    Raises:
        ModelLoadError: The file is unreadable, truncated or has a corrupt header.
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise ModelLoadError(f"{path} is too short to be a safetensors file.")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > min(MAX_HEADER_BYTES, size - 8):
                raise ModelLoadError(
                    f"{path} has an invalid safetensors header length ({header_len})."
                )
            raw = f.read(header_len)
    except OSError as exc:
        raise ModelLoadError(f"Cannot read {path}: {exc}") from exc
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path} has a corrupt safetensors header.") from exc
    if not isinstance(header, dict):
        raise ModelLoadError(f"{path} has a corrupt safetensors header.")
    header.pop("__metadata__", None)
    return header, size - 8 - header_len


def _tensor_bytes_by_dtype(path: Path) -> dict[str, int]:
    header, data_bytes = read_header(path)
    totals: dict[str, int] = {}
    for name, entry in header.items():
        totals_key, nbytes = _entry_bytes(path, name, entry, data_bytes)
        totals[totals_key] = totals.get(totals_key, 0) + nbytes
    return totals


def dense_resident_bytes(
    model_dir: Path, quant_bits: int | None, float_dtype_bytes: int
) -> int:
    """Bytes the weights take once dequantized to dense floats of ``float_dtype_bytes``.

    On the CPU backend without the native kernel the engine dequantizes packed weights
    and upcasts to float32 (dense fp32 is the fast path there), so a 4-bit model grows
    about 8x in memory.

    Args:
        model_dir: The model folder.
        quant_bits: Bits of the packed weights (config.json ``quantization.bits``), or
            None for an unquantized model.
        float_dtype_bytes: Width of the dense floats after loading.
    """
    return cpu_resident_bytes(
        model_dir, float_dtype_bytes, packed=False, layer_bits=lambda _: quant_bits
    )


def cpu_resident_bytes(
    model_dir: Path,
    float_dtype_bytes: int,
    *,
    packed: bool,
    layer_bits: Callable[[str], int | None],
) -> int:
    """Bytes the weights take on the CPU backend, packed or dequantized.

    A packed tensor is a ``uint32`` ``<layer>.weight`` with a ``<layer>.scales``
    beside it (in any shard). Float tensors (scales and biases among them) are
    counted at ``float_dtype_bytes``, since the engine upcasts them.

    Args:
        model_dir: The model folder.
        float_dtype_bytes: Width of float parameters after loading.
        packed: True when quantized layers stay packed (the native kernel serves
            them): their words as stored, their scales and biases at float width.
            False when they are dequantized to dense floats (scales and biases fold
            into the dense weight).
        layer_bits: The bits of a layer (its name without ``.weight``); used to
            unpack when ``packed`` is False (mixed quantization has several).
    """
    files = sorted(Path(model_dir).glob("*.safetensors"))
    headers = [read_header(path) for path in files]
    names = {name for header, _ in headers for name in header}
    total = 0
    for path, (header, data_bytes) in zip(files, headers, strict=True):
        for name, entry in header.items():
            dtype, nbytes = _entry_bytes(path, name, entry, data_bytes)
            base = name.rsplit(".", 1)[0]
            elements = nbytes // SAFETENSORS_DTYPE_BYTES[dtype]
            quantized = dtype == "U32" and f"{base}.scales" in names
            bits = layer_bits(base) if quantized else None
            if quantized and not packed and bits:
                # 3/5/6-bit values straddle words: count bits, not words.
                total += elements * 32 // bits * float_dtype_bytes
            elif (
                not packed
                and name.endswith((".scales", ".biases"))
                and f"{base}.weight" in names
            ):
                continue  # folded into the dense weight
            elif dtype in CONVERTIBLE_FLOAT_DTYPES:
                total += elements * float_dtype_bytes
            else:
                total += nbytes
    return total


def _entry_bytes(
    path: Path, name: str, entry: object, data_bytes: int
) -> tuple[str, int]:
    try:
        dtype = entry["dtype"]  # type: ignore[index]
        begin, end = (int(v) for v in entry["data_offsets"])  # type: ignore[index]
        elements = 1
        for dim in entry["shape"]:  # type: ignore[index]
            elements *= int(dim)
    except (TypeError, KeyError, ValueError):
        raise ModelLoadError(
            f"{path}: tensor {name!r} has a malformed entry."
        ) from None
    if dtype not in SAFETENSORS_DTYPE_BYTES:
        raise ModelLoadError(f"{path}: tensor {name!r} has unknown dtype {dtype!r}.")
    nbytes = end - begin
    # The byte range must match the shape and lie inside the file, else it is corrupt.
    if (
        nbytes != elements * SAFETENSORS_DTYPE_BYTES[dtype]
        or not 0 <= begin <= end <= data_bytes
    ):
        raise ModelLoadError(
            f"{path}: tensor {name!r} has a byte range that does not match its shape "
            "or the file size (truncated download?)."
        )
    return dtype, nbytes
