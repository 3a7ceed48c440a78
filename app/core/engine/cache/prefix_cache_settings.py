"""Limits of the prefix cache, importable without MLX (settings screens, the CLI).

The cache itself (`prefix_cache.PrefixCache`) holds MLX arrays and is built by the
engine on its own thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_MEMORY_CAP_BYTES = 512 * 1024**2
DEFAULT_DISK_CAP_BYTES = 2 * 1024**3
# Shorter prefixes prefill in well under a second; caching them costs more than it saves.
DEFAULT_MIN_PREFIX_TOKENS = 64
# A cache file is skipped rather than written if it would leave less free disk than
# this: the conversations, the settings and other programs need the room more.
DEFAULT_MIN_FREE_DISK_BYTES = 1024**3


@dataclass(frozen=True)
class PrefixCacheSettings:
    """Limits of the prefix cache.

    Attributes:
        memory_cap_bytes: Bytes of KV kept in memory across conversations.
        disk_cap_bytes: Bytes of prefix files kept on disk.
        min_prefix_tokens: Prefixes shorter than this are not cached.
        folder: Where the files live (default: ``paths.prefix_cache_dir()``).
        min_free_disk_bytes: Free disk a file write must leave; otherwise the entry
            is kept in memory only.
    """

    memory_cap_bytes: int = DEFAULT_MEMORY_CAP_BYTES
    disk_cap_bytes: int = DEFAULT_DISK_CAP_BYTES
    min_prefix_tokens: int = DEFAULT_MIN_PREFIX_TOKENS
    folder: Path | None = None
    min_free_disk_bytes: int = DEFAULT_MIN_FREE_DISK_BYTES
