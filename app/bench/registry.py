"""The measurements, in the order a run performs them.

Each entry names a module with ``NAME``, ``TITLE``, ``available(ctx) -> str | None``
(None when it can run, else why not) and ``run(ctx) -> PartResult``. A measurement whose
feature is still missing from the build stays listed and reports itself skipped, so a
later build only has to fill the module in.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# One entry per measurement, in run order: its name and its module. A new measurement
# is one line here (limits first: the speed parts report fractions of them).
_MODULES = {
    "limits": "app.bench.parts.limits",
    "engine_overhead": "app.bench.parts.engine_speed.engine_overhead",
    "native_kernel": "app.bench.parts.engine_speed.native_kernel",
    "peers": "app.bench.parts.peers.peers",
    "kv_bytes": "app.bench.parts.kv_bytes",
    "turn_reuse": "app.bench.parts.turn_reuse",
    "splice": "app.bench.parts.splice",
    "long_conversation": "app.bench.parts.long_conversation",
    "long_document": "app.bench.parts.long_document",
    "prefix_cache": "app.bench.parts.prefix_cache",
    "context_speed": "app.bench.parts.context_speed",
    "aged_kv": "app.bench.parts.aged_kv.aged_kv",
    "architectures": "app.bench.parts.architectures",
    "fidelity": "app.bench.parts.fidelity",
    "recall": "app.bench.parts.recall.recall",
    "recall_view": "app.bench.parts.recall.in_view",
    "server": "app.bench.parts.serving.server",
    "agent_session": "app.bench.parts.serving.agent_session",
    "structured": "app.bench.parts.serving.structured",
    "reasoning": "app.bench.parts.reasoning",
    "ui": "app.bench.parts.ui_responsiveness",
}
MEASUREMENTS: tuple[str, ...] = tuple(_MODULES)


def select(only: str | list[str] | None) -> list[str]:
    """Return the measurement names to run, in run order.

    Args:
        only: None for all, or names (a list or one comma-separated string).

    Raises:
        ValueError: Naming an unknown measurement and the known ones.
    """
    if only is None:
        return list(MEASUREMENTS)
    names = only.split(",") if isinstance(only, str) else list(only)
    wanted = {n.strip() for n in names if n.strip()}
    unknown = sorted(wanted - set(MEASUREMENTS))
    if unknown:
        raise ValueError(
            f"unknown measurement {unknown[0]!r}; choose from {', '.join(MEASUREMENTS)}"
        )
    if not wanted:
        raise ValueError(f"--only needs at least one of {', '.join(MEASUREMENTS)}")
    return [name for name in MEASUREMENTS if name in wanted]


def module(name: str) -> ModuleType:
    """Import and return the module of a measurement."""
    return importlib.import_module(_MODULES[name])
