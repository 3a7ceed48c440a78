"""The "doctor" report: what this machine can run, and why, without loading a model.

``swapless doctor [MODEL]`` prints it and the UI shows it before a model is loaded, so
users see the numbers behind a refusal: the device's memory and pressure, the model's
cache geometry layer kind by layer kind (full attention grows per token and is what
8/4-bit KV quantizes; sliding windows and recurrent state are bounded, stay at the
activation dtype, and are checkpointed for turn reuse), KV bytes per token and at typical
lengths at 16/8/4 bits, and the longest safe context at each precision. Everything comes from config.json, the safetensors
headers and one memory snapshot: `build_report` is pure apart from reading those two
files, and returns a JSON-ready dict; `format_report` renders it for a terminal.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app.core.budget.kv_budget import (
    STATE_CHECKPOINTS,
    bytes_per_token,
    checkpoint_bytes,
    fixed_kv_bytes,
    kv_bytes_at,
)
from app.core.budget.layer_breakdown import KIND_LABELS, layer_breakdown
from app.core.budget.layers import LayerKind
from app.core.budget.memory_budget import (
    SETTING_EXPLANATIONS,
    BudgetSettings,
    max_safe_context,
    memory_budget_bytes,
)
from app.core.budget.model_config import load_config
from app.core.budget.model_geometry import ModelGeometry, layer_summary, read_geometry
from app.core.budget.weights import read_weights
from app.core.budget.weights_check import check_layers_present
from app.core.doctor.doctor_aged import aged_section, format_aged
from app.core.memory.snapshot import MemorySnapshot
from app.core.presets.generation_settings import KVAging

PRECISIONS = (16, 8, 4)
"""KV bits reported; 16 means unquantized (the activation dtype)."""
REPORT_GROUP_SIZE = 64
"""mlx-lm's default ``kv_group_size``, used for the 8- and 4-bit columns."""
CONTEXT_POINTS = (1024, 8192, 32768, 131072)
TEXT_WIDTH = 88
LABEL_WIDTH = 18

FROM_CONFIG_NOTE = (
    "All model figures come from config.json and the safetensors headers alone: no "
    "model was loaded. KV sizes are exact for mlx-lm's caches (256-token allocation "
    "steps included)."
)


def build_report(
    model_dir: Path | None,
    settings: BudgetSettings,
    snapshot: MemorySnapshot,
    act_dtype_bytes: int | None = None,
    *,
    kv_dtype_bytes: int | None = None,
    weights_bytes: int | None = None,
    aged: Mapping[str, tuple[KVAging, int]] | None = None,
) -> dict[str, Any]:
    """Gather the doctor report.

    Args:
        model_dir: A model folder, or ``None`` for a device-only report.
        settings: Budget settings.
        snapshot: A memory snapshot of this machine.
        act_dtype_bytes: Activation dtype width at run time (the engine's choice: 4 on
            the CPU backend); defaults to config.json's dtype. Also the width float
            weights and recurrent state are counted at.
        kv_dtype_bytes: Width of the KV cache's floats at run time (2 on the CPU
            backend, which stores 16-bit KV); defaults to ``act_dtype_bytes``.
        weights_bytes: Resident weights size, overriding the safetensors headers.
        aged: Presets that age their KV cache: name -> (aging, group); their tiers'
            bytes are reported under ``kv_aged`` (`doctor_aged.aged_section`).

    Returns:
        A JSON-ready dict with ``device``, ``settings`` and, with a model, ``model``,
        ``kv_bytes_per_token`` (``{"16": int, "8": int, "4": int}``, growing layers),
        ``kv_bytes_by_context`` (``{"16": {"1024": int, ...}, ...}``, whole cache),
        ``max_safe_context`` (``{"16": int, ...}``), ``kv_errors`` (precisions this
        model cannot use, with the reason; their values above are ``None``),
        ``kv_layers`` (``{"16": [layer kind dicts], ...}``: per kind and geometry the
        layer count, the bits it is held at, its bytes per token or its fixed bytes)
        ``fixed_kv`` (bounded layers, state checkpoints and their total) and
        ``kv_aged`` (per aged preset: bytes per tier at each length, max safe context).

    Raises:
        ModelLoadError: The model folder or its config/weights are unusable.
    """
    report: dict[str, Any] = {
        "device": _device(snapshot),
        "settings": _settings(settings, snapshot.total_bytes),
    }
    if model_dir is None:
        return report
    model_dir = Path(model_dir)
    # A config that cannot belong to its weights (a million layers over a few MB) is
    # refused from the headers, before a geometry of that size is even built.
    check_layers_present(model_dir, load_config(model_dir))
    geometry = read_geometry(model_dir)
    state = act_dtype_bytes or geometry.act_dtype_bytes
    act = kv_dtype_bytes or state  # what the KV functions count the cache's floats at
    weights_file_bytes = None
    if weights_bytes is None:
        info = read_weights(model_dir)
        weights_file_bytes = info.file_bytes
        weights_bytes = info.resident_bytes(act_dtype_bytes)
    report["model"] = _model(
        model_dir, geometry, act, weights_bytes, weights_file_bytes
    )
    report["model"]["state_dtype_bytes"] = state

    per_token: dict[str, int | None] = {}
    by_context: dict[str, dict[str, int] | None] = {}
    safe: dict[str, int | None] = {}
    errors: dict[str, str] = {}
    layers: dict[str, list[dict] | None] = {}
    for bits in PRECISIONS:
        key = str(bits)
        try:
            per_token[key] = bytes_per_token(geometry, bits, REPORT_GROUP_SIZE, act)
            layers[key] = [
                kind.to_dict()
                for kind in layer_breakdown(
                    geometry, bits, REPORT_GROUP_SIZE, act, state
                )
            ]
            by_context[key] = {
                str(n): kv_bytes_at(
                    geometry,
                    n,
                    bits,
                    REPORT_GROUP_SIZE,
                    act_dtype_bytes=act,
                    state_dtype_bytes=state,
                )
                for n in CONTEXT_POINTS
            }
            safe[key] = max_safe_context(
                snapshot.total_bytes,
                weights_bytes,
                geometry,
                bits,
                REPORT_GROUP_SIZE,
                settings,
                act_dtype_bytes=act,
                state_dtype_bytes=state,
            )
        except ValueError as exc:
            per_token[key] = by_context[key] = safe[key] = layers[key] = None
            errors[key] = str(exc)
    report["kv_bytes_per_token"] = per_token
    report["kv_bytes_by_context"] = by_context
    report["max_safe_context"] = safe
    report["kv_errors"] = errors
    report["kv_layers"] = layers
    each = checkpoint_bytes(geometry, act, state)
    report["fixed_kv"] = {
        "bounded_bytes": each,
        "checkpoints": STATE_CHECKPOINTS if each else 0,
        "checkpoint_bytes_each": each,
        "total_bytes": fixed_kv_bytes(geometry, act, state),
    }
    report["kv_aged"] = aged_section(
        geometry,
        aged or {},
        context_points=CONTEXT_POINTS,
        total_memory=snapshot.total_bytes,
        weights_bytes=weights_bytes,
        settings=settings,
        act_dtype_bytes=act,
    )
    return report


def format_report(report: dict[str, Any]) -> str:
    """Render a report from `build_report` as plain text for a terminal."""
    lines = ["Swapless doctor", ""]
    lines += _format_device(report["device"], report["settings"])
    if "model" in report:
        lines += [""] + _format_model(report["model"])
        lines += [""] + _format_layers(report)
        lines += [""] + _format_kv_table(report)
        aged = format_aged(report.get("kv_aged") or {}, _size, _tokens)
        if aged:
            lines += [""] + aged
        notes = report["model"]["notes"] + [
            f"{bits}-bit KV unavailable: {why}"
            for bits, why in report["kv_errors"].items()
        ]
        if notes:
            lines += ["", "Notes"]
            lines += [_wrap(note, "  - ", "    ") for note in notes]
    lines += [""] + _format_settings(report["settings"])
    return "\n".join(lines) + "\n"


def _device(snapshot: MemorySnapshot) -> dict[str, Any]:
    return {
        "total_bytes": snapshot.total_bytes,
        "available_bytes": snapshot.available_bytes,
        "pressure": snapshot.pressure.value,
        "pressure_source": snapshot.pressure_source,
        "swap_total": snapshot.swap_total,
        "swap_used": snapshot.swap_used,
        "swap_in_rate": snapshot.swap_in_rate,
        "swap_out_rate": snapshot.swap_out_rate,
        "process_rss": snapshot.process_rss,
    }


def _settings(settings: BudgetSettings, total_bytes: int) -> dict[str, Any]:
    return {
        **settings.to_dict(),
        "budget_bytes": memory_budget_bytes(total_bytes, settings),
        "explanations": dict(SETTING_EXPLANATIONS),
    }


def _model(
    model_dir: Path,
    geometry: ModelGeometry,
    act: int,
    weights_bytes: int,
    weights_file_bytes: int | None,
) -> dict[str, Any]:
    quant = geometry.quantization
    return {
        "path": str(model_dir),
        "model_type": geometry.model_type,
        "text_model_type": geometry.text_model_type,
        "layers": geometry.num_layers,
        "layer_summary": layer_summary(geometry),
        "full_attention_layers": geometry.count(LayerKind.FULL),
        "sliding_layers": geometry.count(LayerKind.SLIDING),
        "state_layers": geometry.count(LayerKind.STATE),
        "sliding_window": geometry.sliding_window,
        "attention_heads": geometry.num_attention_heads,
        "kv_heads": geometry.kv_heads,
        "head_dim": geometry.head_dim,
        "v_head_dim": geometry.v_head_dim,
        "dtype": geometry.dtype,
        "act_dtype_bytes": act,
        "quantization": (
            None
            if quant is None
            else {
                "bits": quant.bits,
                "group_size": quant.group_size,
                "method": quant.method,
            }
        ),
        "max_position_embeddings": geometry.max_position_embeddings,
        "weights_bytes": weights_bytes,
        "weights_file_bytes": weights_file_bytes,
        "notes": list(geometry.notes),
    }


def _format_device(device: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    total, available = device["total_bytes"], device["available_bytes"]
    share = available / total if total else 0.0
    if device["swap_total"]:
        swap = f"{_size(device['swap_total'])}, {_size(device['swap_used'])} used"
    else:
        swap = "none configured"
    return [
        "Device",
        _row(
            "Memory",
            f"{_size(total)} total, {_size(available)} available ({share:.0%})",
        ),
        _row("Pressure now", f"{device['pressure']} ({device['pressure_source']})"),
        _row("Swap", swap),
        _row(
            "Budget",
            f"{_size(settings['budget_bytes'])} for weights + KV cache "
            f"({settings['memory_cap_fraction']:.0%} of RAM - "
            f"{_size(settings['reserve_bytes'])} reserve)",
        ),
    ]


def _format_model(model: dict[str, Any]) -> list[str]:
    heads = f"{model['attention_heads']} query heads, {model['kv_heads']} KV heads"
    dims = f"head dim {model['head_dim']}"
    if model["v_head_dim"] != model["head_dim"]:
        dims = f"key dim {model['head_dim']}, value dim {model['v_head_dim']}"
    dtype = model["dtype"] or "not declared (assumed 16-bit)"
    weights = f"{_size(model['weights_bytes'])} in memory"
    if model["weights_file_bytes"] is not None:
        weights += f" ({_size(model['weights_file_bytes'])} on disk)"
    quant = model["quantization"]
    if quant and quant["bits"]:
        weights += f", {quant['bits']}-bit group {quant['group_size']}"
    trained = model["max_position_embeddings"]
    return [
        f"Model  {model['path']}",
        _row("Type", f"{model['model_type']} ({model['layer_summary']})"),
        _row("Attention", f"{heads}, {dims}"),
        _row("Dtype", f"{dtype}; cache at {model['act_dtype_bytes']} bytes/element"),
        _row("Weights", weights),
        _row("Trained context", f"{trained:,} tokens" if trained else "not declared"),
    ]


def _format_layers(report: dict[str, Any]) -> list[str]:
    """One row per layer kind: geometry, cost, and its precision at each KV setting."""
    act = report["model"]["act_dtype_bytes"]
    rows = report["kv_layers"].get("16") or []
    quantized = {
        bits: report["kv_layers"].get(str(bits)) for bits in PRECISIONS if bits != 16
    }
    lines = ["Layers (which part of the cache grows, and at what precision)"]
    order = {LayerKind.FULL: 0, LayerKind.SLIDING: 1, LayerKind.STATE: 2}
    ranked = sorted(enumerate(rows), key=lambda item: order[LayerKind(item[1]["kind"])])
    for index, row in ranked:
        kind = LayerKind(row["kind"])
        heads = f"{row['kv_heads']} KV heads x {row['k_head_dim']}"
        if row["v_head_dim"] != row["k_head_dim"]:
            heads += f"/{row['v_head_dim']}"
        count = f"{row['layers']} layer{'s' if row['layers'] != 1 else ''}"
        if kind is LayerKind.FULL:
            bits_text = ", ".join(
                f"{_size(q[index]['bytes_per_token'])} at {bits}-bit"
                for bits, q in quantized.items()
                if q
            )
            detail = (
                f"{count}, {heads}: {_size(row['bytes_per_token'])}/token unquantized"
                + (f"; {bits_text}" if bits_text else "")
            )
        elif kind is LayerKind.SLIDING:
            detail = (
                f"{count}, {heads}, window {row['window']:,} tokens: at most "
                f"{_size(row['fixed_bytes'])}, kept at {act} bytes/element"
            )
        else:
            detail = (
                f"{count}: {_size(row['fixed_bytes'])} at any length, kept unquantized"
            )
        lines.append(_wrap(f"{KIND_LABELS[kind]}: {detail}", "  ", "    "))
    fixed = report["fixed_kv"]
    if fixed["checkpoints"]:
        lines.append(
            _wrap(
                f"checkpoints: {fixed['checkpoints']} x "
                f"{_size(fixed['checkpoint_bytes_each'])} of the bounded layers for "
                f"turn reuse; {_size(fixed['total_bytes'])} set aside in all",
                "  ",
                "    ",
            )
        )
        lines.append(
            _wrap(
                "8/4-bit KV quantizes the full-attention layers only; sliding-window "
                "and recurrent layers are bounded and stay at the activation dtype.",
                "  ",
                "  ",
            )
        )
    return lines


def _format_kv_table(report: dict[str, Any]) -> list[str]:
    heads = ["per token"] + [_tokens(n) for n in CONTEXT_POINTS] + ["max safe context"]
    widths = [11] + [10] * len(CONTEXT_POINTS) + [18]

    def row(label: str, cells: list[str]) -> str:
        return f"  {label:<8}" + "".join(
            c.rjust(w) for c, w in zip(cells, widths, strict=True)
        )

    lines = [f"KV cache (8- and 4-bit with group {REPORT_GROUP_SIZE})", row("", heads)]
    for bits in PRECISIONS:
        key = str(bits)
        label = f"{bits}-bit*" if bits == 16 else f"{bits}-bit"
        per_token = report["kv_bytes_per_token"][key]
        if per_token is None:
            lines.append(f"  {label:<8}" + "unavailable (see notes)".rjust(sum(widths)))
            continue
        cells = [_size(per_token)]
        cells += [_size(v) for v in report["kv_bytes_by_context"][key].values()]
        safe = report["max_safe_context"][key]
        cells.append("unbounded" if safe is None else f"{safe:,} tokens")
        lines.append(row(label, cells))
    lines += [
        "  * 16-bit means unquantized: the cache is stored in the activation dtype.",
        "  Max safe context is what memory allows; the model's trained context may be",
        "  shorter.",
    ]
    return lines


def _format_settings(settings: dict[str, Any]) -> list[str]:
    values = {
        "memory_cap_fraction": f"memory cap {settings['memory_cap_fraction']:.0%}",
        "reserve_bytes": f"reserve {_size(settings['reserve_bytes'])}",
        "safety_factor": f"safety factor {settings['safety_factor']:g}",
    }
    lines = ["Defaults"]
    for key, text in values.items():
        lines.append(_wrap(f"{text}: {settings['explanations'][key]}.", "  ", "    "))
    lines.append(_wrap(FROM_CONFIG_NOTE, "  ", "  "))
    return lines


def _row(label: str, value: str) -> str:
    return f"  {label:<{LABEL_WIDTH}}{value}"


def _wrap(text: str, first: str, rest: str) -> str:
    return textwrap.fill(text, TEXT_WIDTH, initial_indent=first, subsequent_indent=rest)


def _tokens(n: int) -> str:
    return f"{n // 1024}K"


def _size(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"
