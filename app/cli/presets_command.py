"""`swapless presets`: list the built-in and user task presets with their settings."""

from __future__ import annotations

import argparse
import json


def register(subcommands) -> None:
    """Add the subcommand to the parser."""
    parser = subcommands.add_parser(
        "presets", help="list task presets and their settings"
    )
    parser.add_argument(
        "--json", action="store_true", help="one JSON object keyed by name"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the presets."""
    from app.core.presets.presets import all_presets, builtin_presets

    presets = all_presets()
    builtin = set(builtin_presets())
    if args.json:
        print(json.dumps({name: p.to_dict() for name, p in presets.items()}, indent=2))
        return 0
    for name, preset in presets.items():
        origin = "built-in" if name in builtin else "user"
        print(f"{name} ({origin}): {preset.description}")
        aging = preset.kv_aging
        kv = (
            f"KV aged ({aging.label()}) g{preset.kv_group}"
            if aging is not None
            else f"KV {preset.kv_bits}-bit g{preset.kv_group}"
        )
        print(
            f"    {kv}, max_context "
            f"{preset.max_context}, keep {preset.keep_ratio:.0%}, "
            f"auto-trim {'on' if preset.auto_trim else 'off'} ({preset.trim_method}, "
            f"{preset.summary_mode} summaries), temperature {preset.temperature}, "
            f"max_tokens {preset.max_tokens}"
            + (
                f", segments of {preset.segment_tokens} tokens"
                if preset.segmenting
                else ""
            )
        )
    return 0
