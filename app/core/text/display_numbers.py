"""Numbers as the window shows them: sizes, token counts, per-reply stats.

Plain functions without Qt, so every widget words a number the same way and tests can
check the wording directly.
"""

from __future__ import annotations

from app.core.store.records import Message, ReplyStats


def format_bytes(n: float | None) -> str:
    """``3_221_225_472`` → ``"3.0 GiB"``; None → ``"–"``."""
    if n is None:
        return "–"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def format_count(n: int) -> str:
    """``12345`` → ``"12,345"``."""
    return f"{n:,}"


def format_stats(stats: ReplyStats) -> str:
    """One line under a reply: speed, time to first token, tokens, KV precision.

    Fields the store does not have (an imported reply, an old row) are left out.
    """
    parts = []
    if stats.tokens_per_s is not None:
        parts.append(f"{stats.tokens_per_s:.1f} tok/s")
    if stats.ttft_s is not None:
        parts.append(f"TTFT {stats.ttft_s:.2f} s")
    if stats.generated_tokens is not None:
        noun = "token" if stats.generated_tokens == 1 else "tokens"
        parts.append(f"{format_count(stats.generated_tokens)} {noun}")
    if stats.kv_bits is not None:
        parts.append("KV 16-bit" if stats.kv_bits == 16 else f"KV {stats.kv_bits}-bit")
    if stats.reused_tokens:
        parts.append(f"{format_count(stats.reused_tokens)} reused")
    return " · ".join(parts)


def message_footer(message: Message) -> str:
    """The line under a message: its stats, and whether it was stopped or failed."""
    if message.role != "assistant":
        return ""
    stats = format_stats(message.stats)
    if message.stats.reasoning_tokens:
        # The footer counts both: the thought's tokens are part of the reply's cost.
        thought = f"{message.stats.reasoning_tokens:,} reasoning tokens"
        stats = f"{stats} · {thought}" if stats else thought
    if message.state == "interrupted":
        return "Stopped" + (f" · {stats}" if stats else "")
    if message.state == "error":
        return f"Failed: {message.error or 'unknown error'}"
    if message.state == "generating":
        return "Generating…"
    if not message.content.strip():
        # Not an empty bubble left unexplained: the model chose to stop at once.
        ended = "No text: the model ended its reply at once"
        return ended + (f" · {stats}" if stats else "")
    return stats
