"""Reuse the KV of shared prefixes (system prompts, tool text) across conversations.

A prefix entry is keyed by a hash of the model identity, the cache precision (an aged
cache's tiers included) and the prefix token ids, so a changed model or precision never
reuses stale KV. It holds every
kind of cache entry: full-attention keys and values sliced at the prefix boundary, and
the sliding windows and recurrent state as they were at that boundary (the state
checkpoint the engine takes at the end of the system prompt). Entries live in
memory (LRU, byte cap) and on disk under SWAPLESS_HOME as safetensors (mlx-lm's
``save_prompt_cache`` with our own metadata: nothing in the file ties it to a model
otherwise; aged entries are read back by `cache_files`), within a disk cap enforced by LRU eviction at every write. A write that
would leave the disk nearly full is skipped, and one that fails (MLX raises
RuntimeError on a full disk) loses only that disk copy: its partial file is deleted at
once, or by the next start if the process died. A corrupt or truncated file is deleted
and the prefix recomputed; entries of models that no longer exist are removed. Under
memory pressure the in-memory entries are the first to go.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import struct
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import (
    ArraysCache,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    save_prompt_cache,
)

from app.core.engine.cache import cache_layers
from app.core.engine.cache.aged_cache import AgedKVCache
from app.core.engine.cache.cache_files import load_cache_file
from app.core.engine.cache.prefix_cache_settings import PrefixCacheSettings
from app.core.files import partial_files, private_files
from app.core.presets.generation_settings import KVSettings

__all__ = [
    "PrefixCache",
    "PrefixCacheSettings",
    "PrefixEntry",
    "prefix_key",
    "read_metadata",
]

FORMAT = "swapless-prefix-v1"
SUFFIX = ".safetensors"
# How version 0.1 named a file being written ("<key>.safetensors.tmp.safetensors").
LEGACY_TEMPORARY = "*.tmp*"

logger = logging.getLogger(__name__)


@dataclass
class PrefixEntry:
    """Cached KV of one prefix (engine-internal: holds MLX arrays)."""

    key: str
    token_ids: list[int]
    layers: list
    nbytes: int


def prefix_key(model_identity: str, kv: KVSettings, token_ids: list[int]) -> str:
    """Return the key of a prefix for a model and a cache precision."""
    digest = hashlib.sha256()
    digest.update(f"{FORMAT}|{model_identity}|{kv.bits}|{kv.group_size}|".encode())
    if kv.aging is not None:
        digest.update(f"aged:{kv.aging.spec}|".encode())
    digest.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    return digest.hexdigest()[:40]


def read_metadata(path: Path) -> dict | None:
    """Read our metadata from a prefix file's safetensors header, without MLX.

    Returns:
        The metadata, or None when the file is not a readable prefix file.
    """
    try:
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > 64 * 1024**2:
                return None
            header = json.loads(handle.read(length))
    except (OSError, ValueError, struct.error):
        return None
    metadata = header.get("__metadata__", {})
    # save_prompt_cache flattens our dict under the key "0.<name>".
    ours = {k.split(".", 1)[1]: v for k, v in metadata.items() if k.startswith("0.")}
    return ours if ours.get("format") == FORMAT else None


def _is_temporary(path: Path) -> bool:
    return partial_files.is_partial(path) or ".tmp" in path.name


def _slice_layers(layers: list, length: int) -> list:
    """Copy the first ``length`` tokens of each layer into fresh, independent caches.

    Full-attention entries are sliced (into mlx-lm's own ``KVCache`` /
    ``QuantizedKVCache``, so the file loads anywhere); sliding-window and recurrent
    entries are copied whole, so they must already hold exactly ``length`` tokens
    (`ConversationCache.layers_at` takes them from the checkpoint at the boundary).
    """
    sliced = [
        cache_layers.restore(cache_layers.snapshot(layer))
        if cache_layers.is_bounded(layer)
        else cache_layers.sliced_copy(layer, length)
        for layer in layers
    ]
    mx.eval([layer.state for layer in sliced if not layer.empty()])
    return sliced


def cacheable(layers: list) -> bool:
    """True when every entry is of a kind a prefix file can hold, and none is empty.

    Full attention (plain, quantized or aged, with contiguous positions), sliding
    windows and recurrent state: all are saved by mlx-lm's ``save_prompt_cache`` under
    their own class names and read back by `cache_files`.
    """
    return bool(layers) and all(
        type(layer) in _CACHEABLE and not layer.empty() for layer in layers
    )


_CACHEABLE = (
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    ArraysCache,
    cache_layers.DenseViewQuantizedKVCache,
    AgedKVCache,
)


class PrefixCache:
    """The two-level (memory, disk) store of prefix KV entries.

    Args:
        settings: Caps and folder.
    """

    def __init__(self, settings: PrefixCacheSettings | None = None):
        self.settings = settings or PrefixCacheSettings()
        self._memory: OrderedDict[str, PrefixEntry] = OrderedDict()
        self._lengths: dict[
            int, int
        ] = {}  # prefix length -> entries known (memory or disk)
        self._scanned = False

    @property
    def folder(self) -> Path:
        """The folder of prefix files."""
        if self.settings.folder is not None:
            from app.core.files import private_files

            return private_files.make_private_dir(self.settings.folder)
        from app.core.files import paths

        return paths.prefix_cache_dir()

    @property
    def memory_bytes(self) -> int:
        """Bytes held by in-memory entries."""
        return sum(entry.nbytes for entry in self._memory.values())

    def disk_bytes(self) -> int:
        """Bytes of prefix files on disk."""
        return sum(path.stat().st_size for path in self._files())

    def _files(self) -> list[Path]:
        return [
            p
            for p in self.folder.glob(f"*{SUFFIX}")
            if p.is_file() and not _is_temporary(p)
        ]

    # -- maintenance -------------------------------------------------------------------

    def scan(self, model_exists=None) -> int:
        """Index the files on disk and remove stale or unreadable ones.

        Args:
            model_exists: ``callable(folder, identity) -> bool``; entries whose model is
                gone or changed are deleted.

        Returns:
            The number of files removed.
        """
        removed = 0
        self._lengths.clear()
        for key in self._memory:
            length = len(self._memory[key].token_ids)
            self._lengths[length] = self._lengths.get(length, 0) + 1
        for path in self._files():
            metadata = read_metadata(path)
            stale = metadata is None
            if metadata is not None and model_exists is not None:
                stale = not model_exists(
                    metadata.get("model_folder", ""), metadata.get("model_identity", "")
                )
            if stale or metadata is None:
                path.unlink(missing_ok=True)
                removed += 1
                continue
            length = int(metadata.get("tokens", 0))
            self._lengths[length] = self._lengths.get(length, 0) + 1
        partial_files.remove_stale(self.folder, legacy_pattern=LEGACY_TEMPORARY)
        self._scanned = True
        return removed

    def drop_memory(self) -> int:
        """Forget every in-memory entry (memory pressure); return the bytes freed."""
        freed = self.memory_bytes
        self._memory.clear()
        return freed

    # -- lookup ------------------------------------------------------------------------

    def lookup(
        self, model_identity: str, kv: KVSettings, prompt_ids: list[int]
    ) -> tuple[PrefixEntry, str] | None:
        """Find the longest cached prefix of ``prompt_ids``.

        Returns:
            (entry, "memory" or "disk"), or None. The entry's layers are the cache's own:
            callers copy them before use.
        """
        if not self._scanned:
            self.scan()
        for length in sorted(self._lengths, reverse=True):
            if length >= len(prompt_ids) or length < self.settings.min_prefix_tokens:
                continue
            key = prefix_key(model_identity, kv, prompt_ids[:length])
            entry = self._memory.get(key)
            if entry is not None:
                self._memory.move_to_end(key)
                return entry, "memory"
            entry = self._load_file(key, prompt_ids[:length])
            if entry is not None:
                self._remember(entry)
                return entry, "disk"
        return None

    def _load_file(self, key: str, token_ids: list[int]) -> PrefixEntry | None:
        path = self.folder / f"{key}{SUFFIX}"
        if not path.is_file():
            return None
        try:
            layers, metadata = load_cache_file(str(path))
            mx.eval([layer.state for layer in layers])
            stored_ids = json.loads(metadata.get("token_ids", "[]"))
        except Exception:  # truncated or corrupt: recompute rather than crash
            path.unlink(missing_ok=True)
            return None
        if stored_ids != token_ids or not cacheable(layers):
            path.unlink(missing_ok=True)
            return None
        os.utime(path)  # LRU on disk goes by modification time
        nbytes = sum(layer.nbytes for layer in layers)
        return PrefixEntry(
            key=key, token_ids=list(token_ids), layers=layers, nbytes=nbytes
        )

    # -- storing -----------------------------------------------------------------------

    def contains(
        self, model_identity: str, kv: KVSettings, token_ids: list[int]
    ) -> bool:
        """True when this exact prefix is cached in memory or on disk."""
        key = prefix_key(model_identity, kv, token_ids)
        return key in self._memory or (self.folder / f"{key}{SUFFIX}").is_file()

    def store(
        self,
        model_identity: str,
        model_folder: str,
        kv: KVSettings,
        token_ids: list[int],
        layers: list,
    ) -> PrefixEntry | None:
        """Cache the first ``len(token_ids)`` entries of ``layers`` as a prefix.

        Returns:
            The new entry, or None when the prefix is too short or the cache kind cannot
            be stored.
        """
        if len(token_ids) < self.settings.min_prefix_tokens or not cacheable(layers):
            return None
        key = prefix_key(model_identity, kv, token_ids)
        if key in self._memory:
            return self._memory[key]
        sliced = _slice_layers(layers, len(token_ids))
        entry = PrefixEntry(
            key=key,
            token_ids=list(token_ids),
            layers=sliced,
            nbytes=sum(layer.nbytes for layer in sliced),
        )
        self._remember(entry)
        self._lengths[len(token_ids)] = self._lengths.get(len(token_ids), 0) + 1
        self._write(entry, model_identity, model_folder, kv)
        return entry

    def _remember(self, entry: PrefixEntry) -> None:
        self._memory[entry.key] = entry
        self._memory.move_to_end(entry.key)
        while self._memory and self.memory_bytes > self.settings.memory_cap_bytes:
            self._memory.popitem(last=False)

    def _write(
        self, entry: PrefixEntry, model_identity: str, model_folder: str, kv: KVSettings
    ) -> None:
        if entry.nbytes > self.settings.disk_cap_bytes:
            return
        path = self.folder / f"{entry.key}{SUFFIX}"
        if path.is_file():
            os.utime(path)
            return
        metadata = {
            "format": FORMAT,
            "model_identity": model_identity,
            "model_folder": model_folder,
            "kv_bits": str(kv.bits),
            "kv_group": str(kv.group_size),
            "kv_aging": kv.aging.spec if kv.aging is not None else "",
            "tokens": str(len(entry.token_ids)),
            "token_ids": json.dumps(entry.token_ids),
        }
        if not self._room_for(entry.nbytes):
            return
        # Write to a temporary name first so a crash never leaves a half file in place;
        # the name says who writes it, so a later start can delete what a dead
        # writer left (`partial_files`).
        partial = partial_files.partial_path(path)
        try:
            save_prompt_cache(str(partial), entry.layers, metadata)
            os.chmod(partial, private_files.PRIVATE_FILE_MODE)  # the prompt's token ids
            os.replace(partial, path)
        except (OSError, RuntimeError) as exc:
            # MLX reports a full disk as RuntimeError. Only this disk copy is lost:
            # the entry stays in memory, and the partial file must not keep the space.
            partial.unlink(missing_ok=True)
            logger.warning("prefix cache file %s not written: %s", path.name, exc)
            return
        self.enforce_disk_cap()

    def _room_for(self, nbytes: int) -> bool:
        """True when writing ``nbytes`` leaves the free disk the settings ask for."""
        try:
            free = shutil.disk_usage(self.folder).free
        except OSError:
            return False
        return free - nbytes >= self.settings.min_free_disk_bytes

    def enforce_disk_cap(self) -> int:
        """Delete the least recently used files until the folder fits its cap.

        Returns:
            The number of files deleted.
        """
        files = sorted(self._files(), key=lambda p: p.stat().st_mtime_ns)
        total = sum(p.stat().st_size for p in files)
        deleted = 0
        while files and total > self.settings.disk_cap_bytes:
            oldest = files.pop(0)
            total -= oldest.stat().st_size
            metadata = read_metadata(oldest)
            oldest.unlink(missing_ok=True)
            deleted += 1
            if metadata is not None:
                length = int(metadata.get("tokens", 0))
                if self._lengths.get(length, 0) > 0 and not self._has_memory_length(
                    length
                ):
                    self._lengths[length] -= 1
                    if self._lengths[length] == 0:
                        del self._lengths[length]
        return deleted

    def _has_memory_length(self, length: int) -> bool:
        return any(len(e.token_ids) == length for e in self._memory.values())
