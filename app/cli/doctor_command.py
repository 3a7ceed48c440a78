"""`swapless doctor`: the checkup a user reads before choosing a model and settings.

Works from config.json and the safetensors headers alone, so a model is judged before it
is loaded (and without importing MLX).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subcommands) -> None:
    """Add the subcommand to the parser."""
    parser = subcommands.add_parser(
        "doctor",
        help="memory checkup: how many tokens fit at 16/8/4-bit KV on this machine",
        description="Report this machine's memory and, for a model folder, the KV bytes "
        "per token and the max safe context at each KV precision.",
    )
    parser.add_argument("--model", metavar="DIR", help="an mlx-lm model folder")
    parser.add_argument(
        "--preset",
        metavar="NAME",
        help="the preset whose thinking choice and budget are stated "
        "(default: the settings' default preset)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run)


def aged_presets() -> dict:
    """Presets that age their KV cache: name -> (aging, group).

    A user preset file that does not load leaves only the built-in presets here (the
    doctor is a checkup; `swapless presets` names the bad file).
    """
    from app.core.errors import SettingsError
    from app.core.presets.presets import all_presets, builtin_presets

    try:
        presets = all_presets()
    except SettingsError:
        presets = builtin_presets()
    return {
        name: (preset.kv_aging, preset.kv_group)
        for name, preset in presets.items()
        if preset.kv_aging is not None
    }


def run(args: argparse.Namespace) -> int:
    """Print the report."""
    from app.core.budget.runtime_profile import resident_weights_bytes, runtime_profile
    from app.core.doctor.doctor import build_report, format_report
    from app.core.doctor.doctor_thinking import format_thinking, thinking_section
    from app.core.memory.probe import MemoryProbe
    from app.core.presets.presets import get_preset
    from app.core.settings import load_settings

    app_settings = load_settings()
    settings = app_settings.budget()
    # Checked first: a wrong name is one line and exit 2, before any work.
    preset = get_preset(args.preset or app_settings.default_preset)
    profile = runtime_profile()
    model_dir = Path(args.model).expanduser() if args.model else None
    weights = None
    layout = None
    if model_dir is not None:
        from app.core.budget.model_config import load_config

        config = load_config(model_dir)
        weights = resident_weights_bytes(model_dir, config, profile)
        layout = _weights_layout(config, profile)
    report = build_report(
        model_dir,
        settings,
        MemoryProbe().sample(),
        act_dtype_bytes=profile.act_dtype_bytes,
        kv_dtype_bytes=profile.kv_dtype_bytes,
        weights_bytes=weights,
        aged=aged_presets(),
    )
    quality_lines: list[str] = []
    if model_dir is not None:
        report["quality"], quality_lines = _quality(model_dir)
    report["thinking"] = thinking_section(preset, model_dir)
    report["runtime"] = {
        "backend": profile.backend,
        "act_dtype_bytes": profile.act_dtype_bytes,
        "kv_dtype_bytes": profile.kv_dtype_bytes,
        "dense_weights": profile.dense_weights,
        "native_kernel": _native_kernel() if profile.dense_weights else None,
        "weights_layout": layout,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report), end="")
        print("\n".join(["", *format_thinking(report["thinking"], _row), ""]))
        print(
            f"Runtime: MLX {profile.backend} backend"
            + (
                "; quantized weights are dequantized to float32 (unless the native "
                "kernel below serves them) and the KV cache is float32 (the fast path "
                "on CPU)."
                if profile.dense_weights
                else "; weights stay as stored."
            )
        )
        if report["runtime"]["native_kernel"]:
            print(f"Native quantized kernel: {report['runtime']['native_kernel']}.")
        if layout is not None:
            print(f"This model's weights: {layout['text']}.")
        if quality_lines:
            print()
            print("\n".join(quality_lines))
    return 0


def _row(label: str, value: str) -> str:
    from app.core.doctor.doctor import LABEL_WIDTH

    return f"  {label:<{LABEL_WIDTH}}{value}"


def kernel_notice() -> str | None:
    """The native kernel's state, once per build key (the first start after a setup).

    Returns None when it was said before for these sources and versions, on Metal, or
    when the cache folder cannot be written (the doctor still says it).
    """
    from app.core.budget.runtime_profile import runtime_profile
    from app.core.engine.cpu import native_build

    if not runtime_profile().dense_weights:
        return None
    try:
        told = native_build.cache_root() / (native_build.build_key() + ".told")
        if told.exists():
            return None
        told.parent.mkdir(parents=True, exist_ok=True)
        told.touch()
    except OSError:
        return None
    return (
        f"native quantized kernel: {_native_kernel()} (said once; `swapless doctor` "
        "says it again)."
    )


def _weights_layout(config: dict, profile) -> dict:
    """How the engine will hold this model's weights, and why (no MLX import)."""
    from app.core.budget.runtime_profile import (
        PACKED,
        kernel_gap,
        quantization_of,
        weights_layout,
    )

    layout = weights_layout(config, profile)
    quantization = quantization_of(config)
    gap = kernel_gap(quantization) if quantization else None
    if layout == PACKED:
        text = (
            "quantized layers stay packed, served by the native kernel (float32 "
            "scales and biases; its self-test runs at load, and float32 replaces "
            "them if it fails)"
        )
    elif not profile.dense_weights:
        text = "held as stored"
    elif not quantization:
        text = "float32 (the model is not quantized)"
    elif gap is not None:
        text = f"dequantized to float32: {gap}"
    else:
        text = "dequantized to float32 (the native kernel is not available)"
    return {"layout": layout, "kernel_gap": gap, "text": text}


def _native_kernel() -> str:
    """One line on the CPU backend's native quantized kernel (no MLX import)."""
    from app.core.engine.cpu import native_build

    if native_build.disabled():
        return f"switched off ({native_build.DISABLE_ENV}=0)"
    built = native_build.state()
    if built.path is None:
        return built.reason + "; quantized weights are dequantized to float32"
    if native_build.decode_block_disabled():
        block = f"the decode block is switched off ({native_build.DECODE_BLOCK_ENV}=0)"
    else:
        block = (
            "a decode token through a Llama/Qwen2-family block runs as two native "
            "operations (RMSNorm, projections, RoPE; projections, SiLU, residuals)"
        )
    return (
        f"{built.reason}; 4/8-bit affine layers stay packed when its self-test "
        f"passes on the loaded model; {block}"
    )


def _quality(model_dir: Path) -> tuple[dict, list[str]]:
    """Stored quality results of the model and the presets they warn about."""
    from app.core.errors import StoreError
    from app.core.models.model_identity import folder_identity
    from app.core.presets.presets import all_presets
    from app.core.quality.preset_quality import (
        doctor_lines,
        preset_quality,
        stored_to_dict,
    )
    from app.core.store import Store

    identity = folder_identity(model_dir)
    if identity is None:
        return {"results": {}, "warnings": []}, []
    try:
        with Store.open() as store:
            stored = store.latest_quality(identity)
    except StoreError as exc:
        return {"results": {}, "warnings": [], "error": str(exc)}, [
            f"Quality: the stored results cannot be read ({exc})."
        ]
    rows = preset_quality(all_presets(), stored)
    data = {
        "model_identity": identity,
        "results": stored_to_dict(stored),
        "warnings": [row.warning for row in rows if row.warning],
    }
    return data, doctor_lines(rows, stored)
