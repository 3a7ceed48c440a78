"""The engine: one long-lived thread that owns MLX, the model and every KV cache.

MLX streams belong to the thread that created them (mlx >= 0.31.2), so the model is
loaded and every generation runs on the same thread. Callers on any thread (the CLI's
main thread, a Qt worker) submit requests and receive events in order through a
`TurnHandle`; an exception raised on the engine thread travels to the consumer and is
re-raised there; a cancel flag is checked after every token.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.engine.events import GenerationEvent, ModelInfo
from app.core.errors import KnownError
from app.core.generation_settings import KVSettings, SamplingSettings

_DONE = object()
logger = logging.getLogger(__name__)


def _model_unchanged(folder: str, identity: str) -> bool:
    """True when ``folder`` still holds the model whose identity is ``identity``."""
    from app.core.engine.loader import model_identity, read_config
    from app.core.errors import ModelLoadError

    path = Path(folder)
    if not path.is_dir():
        return False
    try:
        return model_identity(path, read_config(path)) == identity
    except ModelLoadError:
        return False


@dataclass(frozen=True)
class CacheState:
    """A snapshot of one conversation's cache.

    Attributes:
        tokens: Tokens the cache holds.
        kv_bytes: Bytes its live arrays occupy (every layer kind).
        kv_bits: Precision of the growing (full-attention) entries.
        next_position: Rotary position of the next token (ahead of ``tokens`` after
            splices).
        kv_layers: Which entries are at which precision (`events.LayerGroup`s).
        checkpoint_bytes: Bytes of the state checkpoints kept for turn reuse.
    """

    tokens: int
    kv_bytes: int
    kv_bits: int
    next_position: int = 0
    kv_layers: tuple = ()
    checkpoint_bytes: int = 0


@dataclass(frozen=True)
class PrefillReport:
    """What filling or splicing a cache cost.

    Attributes:
        seconds: Wall time on the engine thread.
        reused_tokens: Entries kept without recomputation.
        computed_tokens: Tokens run through the model.
        context_tokens: Tokens the cache holds afterwards.
        kv_bytes: Bytes the cache holds afterwards.
    """

    seconds: float
    reused_tokens: int
    computed_tokens: int
    context_tokens: int
    kv_bytes: int


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


class TurnHandle:
    """The consumer's side of one streamed turn.

    Iterate it to receive `PrefillProgress` and `GenerationEvent` objects in order; the
    iteration ends after the event whose ``finish_reason`` is set. `cancel` may be
    called from any thread.
    """

    def __init__(self):
        self._events: queue.Queue = queue.Queue()
        self._cancel = threading.Event()
        self.final: GenerationEvent | None = None

    def cancel(self) -> None:
        """Ask the engine to stop after the current token."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        """True once `cancel` was called."""
        return self._cancel.is_set()

    def _put(self, item: Any) -> None:
        self._events.put(item)

    def __iter__(self) -> Iterator[Any]:
        while True:
            item = self._events.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.error
            if isinstance(item, GenerationEvent) and item.finished:
                self.final = item
            yield item

    def wait(self) -> GenerationEvent:
        """Consume every event and return the final one."""
        for _ in self:
            pass
        if self.final is None:
            raise RuntimeError("turn ended without a final event")
        return self.final

    def text(self) -> str:
        """Consume every event and return the whole reply text."""
        parts = [e.text for e in self if isinstance(e, GenerationEvent)]
        return "".join(parts)


class Engine:
    """Owns the model and the conversation caches on one dedicated thread.

    Args:
        max_idle_caches: Conversation caches kept besides the active one; older ones
            are dropped (their conversations re-prefill on their next turn).
        prefix_cache: A ready `PrefixCache` (tests); by default one is built on the
            engine thread from ``prefix_cache_settings``.
        budget_settings: Memory cap, reserve and safety factor (`BudgetSettings`).
        prefix_cache_settings: Limits of the prefix cache (`PrefixCacheSettings`).
    """

    def __init__(
        self,
        max_idle_caches: int = 2,
        prefix_cache=None,
        budget_settings=None,
        prefix_cache_settings=None,
    ):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()
        self._loaded = None
        self._caches: OrderedDict[str, Any] = OrderedDict()
        self._max_idle_caches = max_idle_caches
        self._info: ModelInfo | None = None
        self._closed = False
        self._prefix_cache = prefix_cache
        self._prefix_cache_settings = prefix_cache_settings
        self._budget_settings = budget_settings
        self._budget = None

    # -- thread plumbing -------------------------------------------------------------

    def _ensure_thread(self) -> None:
        with self._thread_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._serve, name="swapless-engine", daemon=True
                )
                self._thread.start()

    def _serve(self) -> None:
        while True:
            function, args, future = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(function(*args))
            except BaseException as exc:  # travels to the caller through the future
                future.set_exception(exc)

    def submit(self, function: Callable, *args) -> Future:
        """Run ``function(*args)`` on the engine thread; return its future."""
        if self._closed:
            raise RuntimeError("the engine was shut down")
        self._ensure_thread()
        future: Future = Future()
        self._jobs.put((function, args, future))
        return future

    def shutdown(self, timeout: float = 5.0) -> None:
        """Wait (up to ``timeout`` s) for the jobs already queued, then refuse new ones.

        The thread itself is parked, never ended: an MLX thread that exits after
        importing model modules aborts the whole process ("terminate called without an
        active exception", measured with mlx 0.32.4), so it stays until the process
        exits (it is a daemon thread).
        """
        if self._thread is None or not self._thread.is_alive():
            self._closed = True
            return
        drained = self.submit(lambda: None)
        self._closed = True
        with contextlib.suppress(Exception):  # a failing last job was reported already
            drained.result(timeout)

    # -- model -----------------------------------------------------------------------

    @property
    def model_info(self) -> ModelInfo | None:
        """The loaded model, or None."""
        return self._info

    def load(self, folder: str | Path) -> ModelInfo:
        """Load a model folder on the engine thread (blocking); drops all caches."""
        return self.submit(self._load, folder).result()

    def load_async(self, folder: str | Path) -> Future:
        """Like `load` but returns a future."""
        return self.submit(self._load, folder)

    def _load(self, folder: str | Path) -> ModelInfo:
        import mlx.core as mx

        from app.core.engine.loader import load_model_folder

        self._caches.clear()
        self._loaded = None
        self._info = None
        mx.clear_cache()
        from app.core.engine import memory_guard

        settings = memory_guard.settings_or_default(self._budget_settings)
        memory_guard.check_before_load(folder, settings)
        loaded = load_model_folder(folder)
        self._loaded = loaded
        self._info = loaded.info
        self._budget = memory_guard.device_budget(loaded.info, settings)
        memory_guard.apply_backend_limits(self._budget)
        self.prefix_cache.scan(model_exists=_model_unchanged)
        return loaded.info

    @property
    def prefix_cache(self):
        """The shared prefix (KV) cache; created on first use."""
        if self._prefix_cache is None:
            from app.core.engine.prefix_cache import PrefixCache

            self._prefix_cache = PrefixCache(self._prefix_cache_settings)
        return self._prefix_cache

    @property
    def device_budget(self):
        """The loaded model's `DeviceBudget`, or None (no model, or unknown geometry)."""
        return self._budget

    def trained_context(self) -> int | None:
        """The context length the loaded model was trained for, if its config says."""
        if self._budget is None:
            return None
        return self._budget.geometry.max_position_embeddings

    def max_safe_context(self, bits: int, group: int = 64) -> int | None:
        """Tokens a conversation may hold at a KV precision on this device.

        The memory budget's max safe context, and never more than the context the
        model was trained for (past it, replies degrade even with memory to spare).
        None when neither is known.
        """
        if self._budget is None:
            return None
        trained = self._budget.geometry.max_position_embeddings
        try:
            memory = self._budget.max_context(bits, group)
        except ValueError:
            memory = None
        limits = [limit for limit in (memory, trained) if limit]
        return min(limits) if limits else None

    def set_budget_settings(self, settings) -> None:
        """Use new budget settings (memory cap, reserve, safety factor) from now on."""
        self.submit(self._set_budget_settings, settings).result()

    def _set_budget_settings(self, settings) -> None:
        from dataclasses import replace

        self._budget_settings = settings
        if self._budget is not None:
            self._budget = replace(self._budget, settings=settings)

    def _guard(
        self, cache, prompt_ids: list[int], kv: KVSettings, sampling, max_context
    ) -> None:
        """Refuse, before allocating, a request that does not fit its limits."""
        from app.core.budget.memory_budget import check_request_fits

        limits = [max_context, self.max_safe_context(kv.bits, kv.group_size)]
        limits = [limit for limit in limits if limit]
        if limits:
            check_request_fits(len(prompt_ids), sampling.max_tokens, min(limits))
        if self._budget is not None:
            # Checkpoints of sliding/recurrent state count too (the budget's fixed part
            # sets room aside for them).
            held = sum(c.resident_bytes for c in self._caches.values())
            if self._prefix_cache is not None:
                held += self._prefix_cache.memory_bytes
            self._budget.check_growth(
                held,
                cache.offset,
                len(prompt_ids) + sampling.max_tokens,
                kv.bits,
                kv.group_size,
            )

    def _require_model(self):
        if self._loaded is None:
            raise KnownError("No model is loaded.")
        return self._loaded

    # -- prompts ---------------------------------------------------------------------

    def render(
        self, messages: list[dict], add_generation_prompt: bool = True
    ) -> list[int]:
        """Return the token ids of ``messages`` under the model's chat template."""
        return self.submit(self._render, messages, add_generation_prompt).result()

    def _render(self, messages: list[dict], add_generation_prompt: bool) -> list[int]:
        loaded = self._require_model()
        text = loaded.tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=False
        )
        return list(loaded.tokenizer.encode(text, add_special_tokens=False))

    def count_tokens(self, text: str) -> int:
        """Return how many tokens ``text`` is, without special tokens."""
        return self.submit(self._count_tokens, text).result()

    def _count_tokens(self, text: str) -> int:
        return len(
            self._require_model().tokenizer.encode(text, add_special_tokens=False)
        )

    # -- caches ----------------------------------------------------------------------

    def _cache_for(self, key: str, kv: KVSettings):
        from app.core.engine.conversation_cache import ConversationCache

        loaded = self._require_model()
        cache = self._caches.get(key)
        if cache is not None and not cache.matches_precision(kv):
            cache = None  # a different quantization cannot be continued; re-prefill
        if cache is None:
            cache = ConversationCache(loaded.model, kv)
        cache.kv = kv
        self._caches[key] = cache
        self._caches.move_to_end(key)
        while len(self._caches) > self._max_idle_caches + 1:
            self._caches.popitem(last=False)
        return cache

    def cache_state(self, key: str) -> CacheState:
        """Return the size of a conversation's cache (zeros if it has none)."""
        return self.submit(self._cache_state, key).result()

    def _cache_state(self, key: str) -> CacheState:
        cache = self._caches.get(key)
        if cache is None:
            return CacheState(tokens=0, kv_bytes=0, kv_bits=16)
        return CacheState(
            tokens=cache.offset,
            kv_bytes=cache.nbytes,
            kv_bits=cache.bits_in_use,
            next_position=cache.next_position,
            kv_layers=cache.layer_groups(),
            checkpoint_bytes=cache.checkpoint_nbytes,
        )

    def cached_token_ids(self, key: str) -> list[int]:
        """Return the token ids a conversation's cache holds."""
        return self.submit(
            lambda: list(getattr(self._caches.get(key), "token_ids", []))
        ).result()

    def drop_cache(self, key: str) -> None:
        """Forget a conversation's cache (its next turn re-prefills)."""
        self.submit(self._caches.pop, key, None).result()

    def live_kv_bytes(self) -> int:
        """Bytes held by every conversation cache (safe from any thread, approximate).

        Includes the state checkpoints kept for turn reuse.
        """
        return sum(cache.resident_bytes for cache in list(self._caches.values()))

    # -- generation ------------------------------------------------------------------

    def chat(
        self,
        key: str,
        messages: list[dict],
        kv: KVSettings,
        sampling: SamplingSettings,
        max_context: int | None = None,
    ) -> TurnHandle:
        """Start a reply to a chat; the conversation's cache is reused and extended.

        Args:
            key: The conversation's cache key.
            messages: ``{"role", "content"}`` dicts, system prompt first.
            kv: KV precision.
            sampling: Sampling settings.
            max_context: The conversation's token limit; a prompt that would pass it
                (or the device's max safe context) is refused with a `BudgetError`.

        Returns:
            A handle streaming the turn's events.
        """
        handle = TurnHandle()
        started = time.perf_counter()
        self.submit(
            self._run_chat, key, messages, kv, sampling, handle, started, max_context
        )
        return handle

    def generate(
        self,
        key: str,
        prompt_ids: list[int],
        kv: KVSettings,
        sampling: SamplingSettings,
        max_context: int | None = None,
    ) -> TurnHandle:
        """Start a reply to already-tokenized prompt ids on a conversation's cache."""
        handle = TurnHandle()
        started = time.perf_counter()
        self.submit(
            functools.partial(self._run_ids, max_context=max_context),
            key,
            prompt_ids,
            kv,
            sampling,
            handle,
            started,
        )
        return handle

    def _run_chat(
        self, key, messages, kv, sampling, handle, started, max_context=None
    ) -> None:
        try:
            prompt_ids = self._render(messages, True)
            prefix_len = self._system_prefix_length(messages, prompt_ids)
        except BaseException as exc:
            handle._put(_Failure(exc))
            handle._put(_DONE)
            return
        self._run_ids(
            key,
            prompt_ids,
            kv,
            sampling,
            handle,
            started,
            prefix_len=prefix_len,
            max_context=max_context,
        )

    def _system_prefix_length(self, messages: list[dict], prompt_ids: list[int]) -> int:
        """Tokens of the leading system message, when they are a prefix of the prompt."""
        if not messages or messages[0].get("role") != "system":
            return 0
        prefix = self._render(messages[:1], False)
        return len(prefix) if prompt_ids[: len(prefix)] == prefix else 0

    def _attach_prefix(self, cache, prompt_ids: list[int], kv: KVSettings) -> str:
        """Fill an empty conversation cache from the prefix cache; return the source."""
        if cache.offset or self._info is None:
            return "memory"
        found = self.prefix_cache.lookup(self._info.identity, kv, prompt_ids)
        if found is None:
            return "memory"
        entry, source = found
        cache.adopt(entry.layers, entry.token_ids)
        return source

    def _remember_prefix(
        self, cache, prompt_ids: list[int], prefix_len: int, kv
    ) -> None:
        settings = self.prefix_cache.settings
        if prefix_len < settings.min_prefix_tokens or self._info is None:
            return
        if kv.quantized and cache.bits_in_use != kv.bits:
            return  # not yet quantized: the stored KV would not match its key
        prefix = prompt_ids[:prefix_len]
        if cache.token_ids[:prefix_len] != prefix:
            return
        if self.prefix_cache.contains(self._info.identity, kv, prefix):
            return
        # Exactly the prefix: sliced attention entries and, for sliding/recurrent
        # entries, the checkpoint taken at the prefix boundary (None without one).
        layers = cache.layers_at(prefix_len)
        if layers is not None:
            self.prefix_cache.store(
                self._info.identity, self._info.folder, kv, prefix, layers
            )

    def set_prefix_cache_settings(self, settings) -> None:
        """Use new prefix-cache limits; a lower disk cap is enforced at once."""
        self.submit(self._set_prefix_cache_settings, settings).result()

    def _set_prefix_cache_settings(self, settings) -> None:
        self._prefix_cache_settings = settings
        if self._prefix_cache is not None:
            self._prefix_cache.settings = settings
            self._prefix_cache.enforce_disk_cap()

    def release_memory(self) -> int:
        """Free what can be rebuilt: prefix entries in memory, idle caches, MLX's pool.

        Called under memory pressure. Returns the bytes of KV released.
        """
        return self.submit(self._release_memory).result()

    def _release_memory(self) -> int:
        import mlx.core as mx

        freed = self.prefix_cache.drop_memory() if self._prefix_cache is not None else 0
        while len(self._caches) > 1:
            _, cache = self._caches.popitem(last=False)
            freed += cache.nbytes
        mx.clear_cache()
        return freed

    def _run_ids(
        self,
        key,
        prompt_ids,
        kv,
        sampling,
        handle,
        started,
        finish=True,
        prefix_len=0,
        max_context=None,
    ) -> None:
        from app.core.engine.generation import run_turn

        try:
            loaded = self._require_model()
            cache = self._cache_for(key, kv)
            self._guard(cache, prompt_ids, kv, sampling, max_context)
            source = self._attach_prefix(cache, prompt_ids, kv)
            run_turn(
                loaded,
                cache,
                prompt_ids,
                kv,
                sampling,
                is_cancelled=handle._cancel.is_set,
                emit=handle._put,
                reuse_source=source,
                started=started,
                checkpoint_at=(prefix_len,) if prefix_len else (),
            )
            try:
                self._remember_prefix(cache, prompt_ids, prefix_len, kv)
            except Exception:  # a lost cache entry must not fail a finished reply
                logger.warning("could not store a prefix cache entry", exc_info=True)
        except BaseException as exc:
            handle._put(_Failure(exc))
        finally:
            if finish:
                handle._put(_DONE)

    def prefill(
        self, key: str, ids: list[int], kv: KVSettings, exact: bool = False
    ) -> PrefillReport:
        """Fill a conversation's cache with ``ids`` without generating (blocking).

        With ``exact``, entries a splice moved are recomputed, so the cache equals a
        fresh prefill of ``ids``.
        """
        return self.submit(self._prefill, key, ids, kv, exact).result()

    def _prefill(
        self, key: str, ids: list[int], kv: KVSettings, exact: bool = False
    ) -> PrefillReport:
        from app.core.engine.generation import prefill_only

        started = time.perf_counter()
        cache = self._cache_for(key, kv)
        reused, computed = prefill_only(
            self._require_model(), cache, ids, kv, exact=exact
        )
        return PrefillReport(
            seconds=time.perf_counter() - started,
            reused_tokens=reused,
            computed_tokens=computed,
            context_tokens=cache.offset,
            kv_bytes=cache.nbytes,
        )

    def splice(
        self, key: str, keep: int, drop_until: int, insert_ids: list[int]
    ) -> PrefillReport:
        """Replace cached entries ``[keep, drop_until)`` by the KV of ``insert_ids``.

        Raises:
            SpliceUnsupported: When the model's cache cannot be spliced (rebuild instead).
        """
        return self.submit(self._splice, key, keep, drop_until, insert_ids).result()

    def _splice(
        self, key: str, keep: int, drop_until: int, insert_ids: list[int]
    ) -> PrefillReport:
        started = time.perf_counter()
        cache = self._caches.get(key)
        if cache is None:
            raise KeyError(f"no cache for {key!r}")
        computed = cache.splice(keep, drop_until, insert_ids)
        return PrefillReport(
            seconds=time.perf_counter() - started,
            reused_tokens=cache.offset - computed,
            computed_tokens=computed,
            context_tokens=cache.offset,
            kv_bytes=cache.nbytes,
        )

    def side_generate(
        self,
        key: str,
        prompt_ids: list[int],
        kv: KVSettings,
        sampling: SamplingSettings,
    ) -> TurnHandle:
        """Generate on top of a conversation's cache, then take the request off again.

        Used for model summaries: the history is already in the cache, so only the
        request is prefilled; afterwards the cache is trimmed back to the part of the
        history the request shared, so the conversation continues as before.
        """
        handle = TurnHandle()
        started = time.perf_counter()
        self.submit(self._run_side, key, prompt_ids, kv, sampling, handle, started)
        return handle

    def _run_side(self, key, prompt_ids, kv, sampling, handle, started) -> None:
        from app.core.engine.conversation_cache import common_prefix_length

        cache = self._caches.get(key)
        shared = common_prefix_length(cache.token_ids, prompt_ids) if cache else 0
        try:
            self._run_ids(key, prompt_ids, kv, sampling, handle, started, finish=False)
        finally:
            cache = self._caches.get(key)
            if cache is not None:
                cache.trim_to(min(shared, cache.offset))
            handle._put(_DONE)

    # -- memory ----------------------------------------------------------------------

    @staticmethod
    def mlx_memory() -> tuple[int, int, int]:
        """Return MLX (active, cache, peak) bytes; counters are safe to read anywhere."""
        import mlx.core as mx

        return (
            int(mx.get_active_memory()),
            int(mx.get_cache_memory()),
            int(mx.get_peak_memory()),
        )
