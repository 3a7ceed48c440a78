"""The doctor's section on aged KV caches: bytes per tier and the context that fits.

An aged cache (`app.core.presets.generation_settings.KVAging`) has no single bytes-per-token
figure: its newest tokens cost the activation dtype, a band costs its bits, the oldest
cost the floor's. For every preset that ages its cache the doctor shows, at the usual
context lengths, the bytes of each tier and their total (exact, from
`app.core.budget.aged_budget`), and the longest context the memory budget allows, next
to the uniform rows of the KV table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.core.budget.aged_budget import aged_kv_bytes_at, aged_max_safe_context
from app.core.budget.aged_budget import aged_tier_bytes as tier_bytes
from app.core.budget.memory_budget import BudgetSettings
from app.core.budget.model_geometry import ModelGeometry
from app.core.presets.generation_settings import KVAging


def aged_section(
    geometry: ModelGeometry,
    aged: Mapping[str, tuple[KVAging, int]],
    *,
    context_points: tuple[int, ...],
    total_memory: int,
    weights_bytes: int,
    settings: BudgetSettings,
    act_dtype_bytes: int,
) -> dict[str, Any]:
    """The JSON part of the report: one entry per aged preset.

    Args:
        geometry: The model.
        aged: Preset name -> (its aging, its quantization group).
        context_points: Lengths to report.
        total_memory: RAM of this machine.
        weights_bytes: Resident weights.
        settings: Budget settings.
        act_dtype_bytes: Activation dtype width at run time.

    Returns:
        ``{name: {"aging", "label", "group", "by_context": {"1024": {"total_bytes",
        "tiers": [...]}}, "max_safe_context", "error"}}``; an aging this model cannot
        use has ``error`` set and no figures.
    """
    section: dict[str, Any] = {}
    for name, (aging, group) in aged.items():
        entry: dict[str, Any] = {
            "aging": aging.spec,
            "label": aging.label(),
            "group": group,
            "by_context": None,
            "max_safe_context": None,
            "error": None,
        }
        try:
            entry["by_context"] = {
                str(n): {
                    "total_bytes": aged_kv_bytes_at(
                        geometry, n, aging, group, act_dtype_bytes
                    ),
                    "tiers": [
                        tier.to_dict()
                        for tier in tier_bytes(
                            geometry, n, aging, group, act_dtype_bytes
                        )
                    ],
                }
                for n in context_points
            }
            entry["max_safe_context"] = aged_max_safe_context(
                total_memory,
                weights_bytes,
                geometry,
                aging,
                group,
                settings,
                act_dtype_bytes=act_dtype_bytes,
            )
        except ValueError as exc:
            entry["error"] = str(exc)
        section[name] = entry
    return section


def format_aged(section: dict[str, Any], size, tokens_label) -> list[str]:
    """The text lines of the section (empty when no preset ages its cache).

    Args:
        section: `aged_section`'s result.
        size: Formats bytes (the doctor's).
        tokens_label: Formats a context length (``8K``).
    """
    if not section:
        return []
    lines = [
        "Aged KV cache (presets whose precision falls with age; newest tier first)"
    ]
    for name, entry in section.items():
        lines.append(f"  {name}: {entry['label']} (group {entry['group']})")
        if entry["error"]:
            lines.append(f"    unavailable: {entry['error']}")
            continue
        for n, figures in entry["by_context"].items():
            tiers = ", ".join(
                f"{tier['tokens']:,} {_precision(tier)} {size(tier['nbytes'])}"
                for tier in figures["tiers"]
                if tier["tokens"]
            )
            lines.append(
                f"    {tokens_label(int(n)):>4}: {size(figures['total_bytes'])}"
                + (f" ({tiers})" if tiers else "")
            )
        safe = entry["max_safe_context"]
        lines.append(
            "    max safe context: "
            + ("unbounded" if safe is None else f"{safe:,} tokens")
        )
    return lines


def _precision(tier: dict) -> str:
    if tier["key_bits"] == 16:
        return "exact"
    if tier["key_bits"] == tier["value_bits"]:
        return f"{tier['key_bits']}-bit"
    return f"K{tier['key_bits']}/V{tier['value_bits']}"
