"""Prefix cache: a new conversation with a long shared system prompt, cold vs warm.

Each repetition uses a system prompt of about 2K tokens that no earlier run has seen:
"cold" starts a conversation with it (full prefill; afterwards the engine stores the
prefix in memory and on disk), "memory" starts a second conversation with the same
system prompt (its KV comes from the in-memory entry), then the in-memory entries are
dropped and "disk" starts a third (its KV is loaded from the file). The order is cold,
memory, disk, cold, memory, disk, …; times are `GenerationEvent.ttft_s`. The engine's
prefix files go to this run's scratch folder (see `context.make_engine`), never to the
user's. The cache is unquantized, as in the turn reuse check.
"""

from __future__ import annotations

from app.bench.context import BenchContext, greedy, kv_settings
from app.bench.results import PartResult, Row, yes_no
from app.bench.settings import TARGETS
from app.bench.stats import pair_ratios, spread_text, summarize

NAME = "prefix_cache"
TITLE = "Prefix cache: cold vs warm from memory vs warm from disk"
KV_BITS_USED = 16
QUESTION = "Given all that, what should I do first?"
CONDITIONS = ("cold", "memory", "disk")


def available(ctx: BenchContext) -> str | None:
    """Available once the engine has a prefix cache that can drop its memory entries."""
    cache = getattr(ctx.engine, "prefix_cache", None)
    if cache is None or not hasattr(cache, "drop_memory"):
        return "not available in this build: the engine has no prefix cache yet"
    return None


def run(ctx: BenchContext) -> PartResult:
    """Time interleaved cold/memory/disk first turns and return their ratios."""
    s = ctx.settings
    engine = ctx.engine
    kv = kv_settings(KV_BITS_USED)
    times: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    sources: dict[str, list[str]] = {c: [] for c in CONDITIONS}
    reused: dict[str, list[int]] = {c: [] for c in CONDITIONS}
    prompt_tokens = 0
    for rep in range(s.prefix_pairs):
        system = f"Session {rep}. " + ctx.filler(s.prefix_tokens, seed=900 + rep)
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": QUESTION},
        ]
        for condition in CONDITIONS:
            if condition == "disk":
                engine.submit(engine.prefix_cache.drop_memory).result()
            key = f"bench-prefix-{rep}-{condition}"
            engine.drop_cache(key)
            final = engine.chat(key, messages, kv, greedy(2)).wait()
            engine.drop_cache(key)
            times[condition].append(final.ttft_s)
            sources[condition].append(final.reuse_source)
            reused[condition].append(final.reused_tokens)
            prompt_tokens = final.prompt_tokens
    engine.submit(engine.prefix_cache.drop_memory).result()
    memory = summarize(pair_ratios(times["memory"], times["cold"]))
    disk = summarize(pair_ratios(times["disk"], times["cold"]))
    result = PartResult()
    result.figures = {
        "kv_bits": KV_BITS_USED,
        "prompt_tokens": prompt_tokens,
        "ttft_s": {c: summarize(times[c]) for c in CONDITIONS},
        "reuse_source": sources,
        "reused_tokens": reused,
        "memory_vs_cold": memory,
        "disk_vs_cold": disk,
    }
    result.ratios["prefix_memory_vs_cold"] = memory["median"]
    result.ratios["prefix_disk_vs_cold"] = disk["median"]
    result.ratio_stats["prefix_memory_vs_cold"] = memory
    result.ratio_stats["prefix_disk_vs_cold"] = disk
    held = {
        key: TARGETS[key].holds(stats["median"])
        for key, stats in (
            ("prefix_memory_vs_cold", memory),
            ("prefix_disk_vs_cold", disk),
        )
    }
    result.targets_met.update(held)
    label = f"{prompt_tokens}-token prompt, {KV_BITS_USED}-bit KV"
    result.rows = [
        Row(
            f"New conversation TTFT, prefix from memory ÷ cold ({label})",
            f"{memory['median']:.3f}",
            spread_text(memory, 3),
            TARGETS["prefix_memory_vs_cold"].text(),
            yes_no(held["prefix_memory_vs_cold"]),
        ),
        Row(
            f"New conversation TTFT, prefix from disk ÷ cold ({label})",
            f"{disk['median']:.3f}",
            spread_text(disk, 3),
            TARGETS["prefix_disk_vs_cold"].text(),
            yes_no(held["prefix_disk_vs_cold"]),
        ),
        Row(
            "New conversation TTFT cold / memory / disk (absolute)",
            " / ".join(f"{summarize(times[c])['median']:.3f} s" for c in CONDITIONS),
        ),
    ]
    expected = {"cold": "none", "memory": "memory", "disk": "disk"}
    for condition, wanted in expected.items():
        if any(source != wanted for source in sources[condition]):
            result.notes.append(
                f"Prefix cache: the {condition!r} runs reported reuse sources "
                f"{sources[condition]} (expected {wanted!r} every time)."
            )
    return result
