"""The engine: the model and every KV cache, on the one thread that runs MLX.

Callers on any thread (the CLI's main thread, a Qt worker, a server request) submit
requests to the `EngineThread` and receive events in order through a `TurnHandle`; an
exception raised on the engine thread travels to the consumer and is re-raised there; a
cancel token is checked after every token and between prefill chunks. Tokenizing needs
no MLX and runs on the caller's thread (`PromptTokenizer`); what each cache holds is
published after every change, so it is read without waiting for the engine thread.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.core.cancel import CancelToken
from app.core.engine.cache import prefix_reuse
from app.core.engine.cache.cache_registry import CacheRegistry
from app.core.engine.engine_thread import EngineThread
from app.core.engine.events import ModelInfo
from app.core.engine.prompt_tokenizer import PromptTokenizer
from app.core.engine.turn_handle import (
    DONE,
    CacheState,
    Failure,
    PrefillReport,
    TurnHandle,
)
from app.core.errors import KnownError
from app.core.presets.generation_settings import KVSettings, SamplingSettings
from app.core.tools.turn_tools import TurnTools

if TYPE_CHECKING:  # imported where used: loading them imports mlx
    from app.core.budget.device_budget import DeviceBudget
    from app.core.engine.loader import LoadedModel
from app.core.reasoning.thinking import (
    ThinkingSettings,
    reply_room,
    template_arguments,
)

__all__ = ["CacheState", "Engine", "PrefillReport", "TurnHandle"]
logger = logging.getLogger(__name__)


class Engine(EngineThread):
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
        super().__init__()
        self._loaded: LoadedModel | None = None
        self._tokenizer: PromptTokenizer | None = None
        self._caches = CacheRegistry(max_idle_caches)
        self._info: ModelInfo | None = None
        self._prefix_cache = prefix_cache
        self._prefix_cache_settings = prefix_cache_settings
        self._budget_settings = budget_settings
        self._budget: DeviceBudget | None = None

    @classmethod
    def from_settings(cls, settings=None) -> Engine:
        """An engine with the memory budget and prefix-cache cap of app settings.

        Args:
            settings: `AppSettings`; the user's saved settings when None.

        The prefix cache itself is created later, on the engine thread: its module
        imports MLX, which must not happen on a UI thread.
        """
        from app.core.engine.cache.prefix_cache_settings import PrefixCacheSettings

        if settings is None:
            from app.core.settings import load_settings

            settings = load_settings()
        return cls(
            budget_settings=settings.budget(),
            prefix_cache_settings=PrefixCacheSettings(
                disk_cap_bytes=settings.prefix_cache_disk_cap_bytes
            ),
        )

    # -- model -----------------------------------------------------------------------

    @property
    def model_info(self) -> ModelInfo | None:
        """The loaded model, or None."""
        return self._info

    def load(self, folder: str | Path) -> ModelInfo:
        """Load a model folder on the engine thread (blocking); drops all caches."""
        return self.submit(self._load, folder).result()

    def load_demo(self) -> ModelInfo:
        """Build the demo model on first use (on the engine thread), then load it."""
        from app.core.modelkit.demo_model import ensure_demo_model

        # Building writes MLX arrays, so it runs on the engine thread like all MLX work.
        folder = self.submit(ensure_demo_model).result()
        return self.load(folder)

    def _load(self, folder: str | Path) -> ModelInfo:
        import mlx.core as mx

        from app.core.engine.loader import load_model_folder, model_unchanged

        self._caches.clear()
        self._loaded = None
        self._tokenizer = None
        self._info = None
        mx.clear_cache()
        from app.core.engine import memory_guard

        settings = memory_guard.settings_or_default(self._budget_settings)
        memory_guard.check_before_load(folder, settings)
        loaded = load_model_folder(folder)
        # Before anything keeps the model: no budget means not loaded (issue #31).
        budget = memory_guard.device_budget(loaded.info, settings)
        self._loaded = loaded
        self._tokenizer = PromptTokenizer(loaded.tokenizer)
        self._info = loaded.info
        self._budget = budget
        memory_guard.apply_backend_limits(self._budget)
        self.prefix_cache.scan(model_exists=model_unchanged)
        return loaded.info

    @property
    def prefix_cache(self):
        """The shared prefix (KV) cache; created on first use."""
        if self._prefix_cache is None:
            from app.core.engine.cache.prefix_cache import PrefixCache

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

    def max_safe_context(self, bits: int, group: int = 64, aging=None) -> int | None:
        """Tokens a conversation may hold at a KV precision on this device (or None).

        See `memory_guard.max_safe_context` (``aging``: an aged cache's tiers).
        """
        from app.core.engine.memory_guard import max_safe_context

        return max_safe_context(self._budget, bits, group, aging)

    def set_budget_settings(self, settings) -> None:
        """Use new budget settings (memory cap, reserve, safety factor) from now on."""
        self.submit(self._set_budget_settings, settings).result()

    def _set_budget_settings(self, settings) -> None:
        self._budget_settings = settings
        if self._budget is not None:
            self._budget = replace(self._budget, settings=settings)

    def _chunk_limit(self):
        """The budget's largest prefill chunk (None without a budget)."""
        return self._budget.prefill_chunk if self._budget is not None else None

    def _guard(
        self, key, cache, prompt_ids: list[int], kv: KVSettings, sampling, max_context
    ) -> None:
        """Refuse, before allocating, a request that does not fit (`admit_request`)."""
        from app.core.engine.memory_guard import admit_request

        admit_request(
            self._budget,
            self._caches,
            self._prefix_cache.memory_bytes if self._prefix_cache is not None else 0,
            key=key,
            cache=cache,
            max_context=max_context,
            prompt_tokens=len(prompt_ids),
            max_tokens=sampling.max_tokens,
            kv=kv,
        )

    def _require_model(self) -> LoadedModel:
        if self._loaded is None:
            raise KnownError("No model is loaded.")
        return self._loaded

    # -- prompts ---------------------------------------------------------------------

    @property
    def tokenizer(self) -> PromptTokenizer:
        """The loaded model's tokenizer, safe to call from any thread.

        Raises:
            KnownError: No model is loaded.
        """
        tokenizer = self._tokenizer
        if tokenizer is None:
            raise KnownError("No model is loaded.")
        return tokenizer

    def render(
        self,
        messages: list[dict],
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
        thinking: ThinkingSettings | None = None,
    ) -> list[int]:
        """Return the token ids of ``messages`` under the model's chat template.

        Runs on the calling thread (no MLX is involved), memoised by `PromptTokenizer`.
        ``tools`` (OpenAI's function shape) are rendered by the template too;
        ``thinking`` sets its thinking switch (none: the template's default).
        """
        tokenizer = self.tokenizer
        args = (
            template_arguments(tokenizer.reasoning, thinking, tokenizer.chat_template)
            if thinking is not None
            else None
        )
        return tokenizer.render(
            messages, add_generation_prompt, tools, template_args=args
        )

    def tool_call_format(self):
        """How the loaded model writes tool calls (`CallFormat`): its own, or the
        generic Qwen3-style one when its template has no tool support."""
        from app.core.tools.model_format import call_format_or_generic

        return call_format_or_generic(self._require_model().tokenizer)

    def supports_tools(self) -> bool:
        """True when the loaded model's template renders tools and its call format
        is known (`app.core.tools.model_format`)."""
        from app.core.tools.model_format import supports_tools

        loaded = self._require_model()
        return supports_tools(loaded.tokenizer)

    def count_tokens(self, text: str) -> int:
        """Return how many tokens ``text`` is, without special tokens (any thread)."""
        return self.tokenizer.count(text)

    # -- caches ----------------------------------------------------------------------

    def _cache_for(self, key: str, kv: KVSettings):
        return self._caches.for_turn(key, self._require_model().model, kv)

    def cache_state(self, key: str) -> CacheState:
        """Return the size of a conversation's cache (zeros if it has none).

        Answers at once from any thread, also while the engine is generating: it reads
        what the engine thread published after the cache last changed.
        """
        return self._caches.state(key)

    def cached_token_ids(self, key: str) -> list[int]:
        """Return the token ids a conversation's cache holds."""
        return self.submit(
            lambda: list(getattr(self._caches.get(key), "token_ids", []))
        ).result()

    @property
    def max_idle_caches(self) -> int:
        """Conversation caches kept besides the active one (within the budget)."""
        return self._caches.max_idle

    def set_max_idle_caches(self, count: int) -> None:
        """Keep up to ``count`` idle caches from the next turn on (e.g. server clients).

        Does not wait: it is queued behind the engine's current work, so a UI thread
        may call it while a reply is being generated.

        Raises:
            ValueError: ``count`` is negative.
        """
        if count < 0:
            raise ValueError(f"max_idle_caches must be >= 0, got {count!r}")
        self.submit(setattr, self._caches, "max_idle", count)

    def fork_cache(self, source: str, target: str, length: int, kv: KVSettings) -> int:
        """Copy the first ``length`` tokens of ``source``'s cache into ``target``'s.

        Both stay live: a branch (a subagent, an edited turn) starts from the shared
        prefix without cutting the cache it came from. Blocks until done.

        Returns:
            Tokens copied: ``length``, or 0 when ``source`` cannot give exactly that
            prefix (no cache, another precision, a spliced cache, or sliding/recurrent
            layers without a checkpoint there); ``target`` is then left as it was.
        """
        return self.submit(self._fork_cache, source, target, length, kv).result()

    def _fork_cache(self, source: str, target: str, length: int, kv: KVSettings) -> int:
        origin = self._caches.get(source)
        if origin is None or not origin.matches_precision(kv):
            return 0
        layers = origin.layers_at(length)
        if layers is None:
            return 0
        tokens = origin.token_ids[:length]
        self._cache_for(target, kv).adopt(layers, tokens)
        self._caches.publish(target)
        return length

    def drop_cache(self, key: str) -> None:
        """Forget a conversation's cache (its next turn re-prefills)."""
        self.submit(self._caches.forget, key).result()

    def live_kv_bytes(self) -> int:
        """Bytes held by every conversation cache (safe from any thread, approximate)."""
        return self._caches.total_bytes()

    # -- generation ------------------------------------------------------------------

    def chat(
        self,
        key: str,
        messages: list[dict],
        kv: KVSettings,
        sampling: SamplingSettings,
        max_context: int | None = None,
        cancel: CancelToken | None = None,
        tools: TurnTools | None = None,
        thinking: ThinkingSettings | None = None,
    ) -> TurnHandle:
        """Start a reply to a chat; the conversation's cache is reused and extended.

        Args:
            key: The conversation's cache key.
            messages: ``{"role", "content"}`` dicts, system prompt first.
            kv: KV precision.
            sampling: Sampling settings.
            max_context: The conversation's token limit; a prompt that would pass it
                (or the device's max safe context) is refused with a `BudgetError`.
            cancel: Stops the reply after the current token (or prefill chunk).
            tools: Tools offered and output constraint: tools are rendered by the
                template (and kept with the system prompt in the prefix cache), calls
                come out as tool-call events, a grammar constrains decoding.
            thinking: A reasoning model's switch and budget (ignored by others).

        Returns:
            A handle streaming the turn's events.
        """
        # Rendering needs no MLX: it runs here, not on the engine thread.
        template_tools = tools.template_tools() if tools is not None else None
        # The thinking budget is room of its own: the answer keeps its max_tokens,
        # and the memory check below counts both.
        room = reply_room(sampling.max_tokens, thinking, self.tokenizer.reasoning)
        if room != sampling.max_tokens:
            sampling = replace(sampling, max_tokens=room)
        prompt_ids = self.render(messages, True, template_tools, thinking)
        if template_tools:
            from app.core.tools.model_format import stable_prefix_length

            prefix_len = stable_prefix_length(
                lambda m, g: self.render(m, g, template_tools, thinking),
                messages,
                prompt_ids,
            )
        else:
            prefix_len = prefix_reuse.system_prefix_length(
                lambda m, g: self.render(m, g, None, thinking), messages, prompt_ids
            )
        return self.generate(
            key,
            prompt_ids,
            kv,
            sampling,
            max_context,
            cancel,
            prefix_len=prefix_len,
            tools=tools,
            thinking_budget=thinking.budget if thinking else 0,
        )

    def generate(
        self,
        key: str,
        prompt_ids: list[int],
        kv: KVSettings,
        sampling: SamplingSettings,
        max_context: int | None = None,
        cancel: CancelToken | None = None,
        *,
        prefix_len: int = 0,
        tools: TurnTools | None = None,
        thinking_budget: int = 0,
    ) -> TurnHandle:
        """Start a reply to already-tokenized prompt ids on a conversation's cache.

        Args:
            prefix_len: Leading tokens (a system prompt) worth storing in the prefix
                cache for other conversations; see `chat` for the others.
            thinking_budget: Most reasoning tokens of a reasoning model (0: none).
        """
        handle = TurnHandle(cancel)
        self.submit(
            functools.partial(
                self._run_ids,
                prefix_len=prefix_len,
                max_context=max_context,
                tools=tools,
                thinking_budget=thinking_budget,
            ),
            key,
            prompt_ids,
            kv,
            sampling,
            handle,
            time.perf_counter(),
        )
        return handle

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
        freed += self._caches.drop_idle()
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
        tools=None,
        thinking_budget=0,
    ) -> None:
        from app.core.engine.generation import run_turn

        try:
            loaded = self._require_model()
            emit, processors, close_reasoning = handle._put, None, False
            if tools is not None:
                from app.core.engine.tool_hooks import TurnHooks

                hooks = TurnHooks.build(
                    loaded.tokenizer,
                    tools,
                    reasoning=self.tokenizer.reasoning,
                    prompt_ids=prompt_ids,
                )
                emit, processors = hooks.wrap(handle._put), hooks.logits_processors
                close_reasoning = hooks.closes_reasoning
            cache = self._cache_for(key, kv)
            self._guard(key, cache, prompt_ids, kv, sampling, max_context)
            source = prefix_reuse.attach_prefix(
                self.prefix_cache, self._info, cache, prompt_ids, kv
            )
            run_turn(
                loaded,
                cache,
                prompt_ids,
                kv,
                sampling,
                is_cancelled=handle._cancel,
                emit=emit,
                reuse_source=source,
                started=started,
                # The system prompt's end: where trims rebuild from and prefixes come
                # from, for caches with sliding-window or recurrent layers.
                checkpoint_at=(prefix_len,) if prefix_len else (),
                logits_processors=processors,
                reasoning=self.tokenizer.reasoning,
                thinking_budget=thinking_budget,
                chunk_limit=self._chunk_limit(),
                close_reasoning=close_reasoning,
            )
            try:
                prefix_reuse.remember_prefix(
                    self.prefix_cache, self._info, cache, prompt_ids, prefix_len, kv
                )
            except Exception:  # a lost cache entry must not fail a finished reply
                logger.warning("could not store a prefix cache entry", exc_info=True)
        except BaseException as exc:
            handle._put(Failure(exc))
        finally:
            self._caches.publish(key)
            if finish:
                handle._put(DONE)

    def prefill(
        self, key: str, ids: list[int], kv: KVSettings, exact=False, cancel=None
    ) -> PrefillReport:
        """Fill a conversation's cache with ``ids`` without generating (blocking).

        With ``exact``, entries a splice moved are recomputed, so the cache equals a
        fresh prefill of ``ids``; a ``cancel`` token stops it between chunks.
        """
        return self.submit(self._prefill, key, ids, kv, exact, cancel).result()

    def _prefill(self, key, ids, kv, exact, cancel) -> PrefillReport:
        from app.core.engine.generation import prefill_only

        started = time.perf_counter()
        cache = self._cache_for(key, kv)
        poll = cancel or (lambda: False)
        try:
            reused, computed = prefill_only(
                self._require_model(),
                cache,
                ids,
                kv,
                exact=exact,
                is_cancelled=poll,
                chunk_limit=self._chunk_limit(),
            )
        finally:
            self._caches.publish(key)
        return PrefillReport.after(cache, started, reused, computed)

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
        try:
            computed = cache.splice(keep, drop_until, insert_ids)
        finally:
            self._caches.publish(key)
        return PrefillReport.after(cache, started, cache.offset - computed, computed)

    def cut_reasoning(self, key: str, rendered: list[int]):
        """Cut the last reply's reasoning out of a conversation's cache (blocking).

        Args:
            key: The conversation's cache key.
            rendered: The history's rendering for the next turn
                (`app.core.reasoning.history`).

        Returns:
            A `ReasoningCutReport`, or None when the conversation has no cache.
        """

        def job():
            from app.core.engine.reasoning_cache import cut_reasoning

            cache = self._caches.get(key)
            if cache is None:
                return None
            try:
                return cut_reasoning(cache, rendered)
            finally:
                self._caches.publish(key)

        return self.submit(job).result()

    def side_generate(
        self,
        key: str,
        prompt_ids: list[int],
        kv: KVSettings,
        sampling: SamplingSettings,
        cancel: CancelToken | None = None,
    ) -> TurnHandle:
        """Generate on top of a conversation's cache, then take the request off again.

        Used for model summaries: the history is already in the cache, so only the
        request is prefilled; afterwards the cache is trimmed back to the part of the
        history the request shared, so the conversation continues as before.
        """
        handle = TurnHandle(cancel)
        started = time.perf_counter()
        self.submit(self._run_side, key, prompt_ids, kv, sampling, handle, started)
        return handle

    def _run_side(self, key, prompt_ids, kv, sampling, handle, started) -> None:
        from app.core.engine.cache.conversation_cache import common_prefix_length

        cache = self._caches.get(key)
        shared = common_prefix_length(cache.token_ids, prompt_ids) if cache else 0
        try:
            self._run_ids(key, prompt_ids, kv, sampling, handle, started, finish=False)
        finally:
            cache = self._caches.get(key)
            if cache is not None:
                cache.trim_to(min(shared, cache.offset))
                self._caches.publish(key)
            handle._put(DONE)

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
