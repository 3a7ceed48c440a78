"""Filling a new conversation's cache from the prefix cache, and feeding it back.

A long system prompt shared by many conversations is computed once: the first turn of
a conversation whose prompt starts with a stored prefix copies that KV (deeply: MLX
slice assignment would otherwise write into the shared buffers) and prefills only the
rest; after a turn, the system prompt's KV is stored for the next conversation. For
models with sliding-window or recurrent layers the stored entry holds their state at the
prefix boundary (the checkpoint the turn took there).
Engine thread only.
"""

from __future__ import annotations

from app.core.presets.generation_settings import KVSettings


def system_prefix_length(render, messages: list[dict], prompt_ids: list[int]) -> int:
    """Tokens of the leading system message, when they are a prefix of the prompt.

    Args:
        render: Renders messages to ids (``render(messages, add_generation_prompt)``).
        messages: The turn's messages.
        prompt_ids: The turn's rendered prompt.
    """
    if not messages or messages[0].get("role") != "system":
        return 0
    prefix = render(messages[:1], False)
    return len(prefix) if prompt_ids[: len(prefix)] == prefix else 0


def attach_prefix(
    prefix_cache, info, cache, prompt_ids: list[int], kv: KVSettings
) -> str:
    """Fill an empty conversation cache from the prefix cache; return the source.

    Returns:
        ``disk`` or ``memory``: where reused entries came from (``memory`` also when
        nothing was attached: the conversation's own cache is in memory).
    """
    if cache.offset or info is None:
        return "memory"
    found = prefix_cache.lookup(info.identity, kv, prompt_ids)
    if found is None:
        return "memory"
    entry, source = found
    # A deep copy, re-wrapped where the model needs it, with a state checkpoint at the
    # prefix boundary so later rewinds can come back to it.
    cache.adopt(entry.layers, entry.token_ids)
    return source


def remember_prefix(
    prefix_cache, info, cache, prompt_ids: list[int], prefix_len: int, kv: KVSettings
) -> None:
    """Store the KV of a turn's system prompt for the next conversations."""
    settings = prefix_cache.settings
    if prefix_len < settings.min_prefix_tokens or info is None:
        return
    if kv.aging is None and kv.quantized and cache.bits_in_use != kv.bits:
        return  # not yet quantized: the stored KV would not match its key
    # An aged cache's prefix is stored with the tiers its entries are in now (exact
    # while the conversation is young): any of them is a state that aging produces.
    prefix = prompt_ids[:prefix_len]
    if cache.token_ids[:prefix_len] != prefix:
        return
    if prefix_cache.contains(info.identity, kv, prefix):
        return
    # Exactly the prefix: sliced attention entries and, for sliding-window and
    # recurrent entries, the checkpoint taken at the prefix boundary (None without).
    layers = cache.layers_at(prefix_len)
    if layers is not None:
        prefix_cache.store(info.identity, info.folder, kv, prefix, layers)
