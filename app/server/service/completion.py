"""One chat completion, from the client's messages to a stream of events.

For each request: find the summary a previous trim left for this history (so the model
sees what it saw last time and the spliced cache matches), pick the cache of the
conversation it continues, ask the trim policy about it under the current memory
pressure, then trim (and remember the trim) or refuse with the numbers, and stream
the reply, cut at any stop sequence. It runs on a worker thread of the HTTP server;
every MLX step goes to the engine's one thread, where requests queue.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

from app.core.budget.context_state import effective_limit
from app.core.cancel import CancelToken
from app.core.chat.conversation_session import MAX_TRIM_ROUNDS
from app.core.chat.trimmer import TrimOutcome
from app.core.errors import BudgetError
from app.core.presets.generation_settings import SamplingSettings
from app.core.presets.presets import Preset
from app.core.recall.block import recall_budget
from app.core.recall.recaller import RecallResult
from app.core.store.records import RecalledMessage
from app.core.trim.policy import Action
from app.server.errors import ContextLengthExceeded, RequestError, ServiceUnavailable
from app.server.events import Accepted, Finished, TrimApplied
from app.server.openai_chat.client_history import (
    ClientHistory,
    ModelView,
    TrimRecords,
    model_view,
)
from app.server.openai_chat.openai_request import ChatRequest
from app.server.openai_chat.reasoning_fields import (
    ignored_reasoning_note,
    request_thinking,
)
from app.server.service.conversation_index import ConversationIndex
from app.server.service.history_recall import (
    RecallRecords,
    recall_request,
    recall_room,
    recalled_json,
    with_blocks,
)
from app.server.service.history_trim import (
    apply_trim,
    count_history,
    fit_plan,
    needs_counting,
    plan_for,
)
from app.server.service.refusals import (
    refusal,
    refuse_unreadably_long,
    too_long_message,
)
from app.server.service.reply_stream import stream_reply, trim_extension
from app.server.service.request_prompts import RequestPrompts
from app.server.service.served_model import check_served_model, served_model_id

logger = logging.getLogger(__name__)
RECENT_REQUESTS = 32


@dataclass(frozen=True)
class RequestSummary:
    """One finished (or refused) request, for the status and the log.

    Attributes:
        key: The cache key it ran on (empty when refused before choosing one).
        outcome: ``stop``/``length``/``cancelled``, or ``refused``/``failed``.
        prompt_tokens: Prompt tokens the model saw (0 if it never ran).
        cached_tokens: Of those, reused from a cache.
        completion_tokens: Tokens generated.
        trimmed: True when this request trimmed its history.
        tokens_per_s: Decode speed.
        note: Why it was refused or failed.
    """

    key: str
    outcome: str
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    trimmed: bool = False
    tokens_per_s: float = 0.0
    note: str = ""


class CompletionService:
    """Answers chat completion requests on one engine.

    Args:
        engine: The engine (its loaded model is the one served).
        preset: Settings of every request.
        pressure: Returns the system memory pressure level (``normal``, ``warning``,
            ``critical``).
    """

    def __init__(
        self,
        engine,
        preset: Preset,
        pressure: Callable[[], str] = lambda: "normal",
    ):
        self.engine = engine
        self._preset = preset
        self.pressure = pressure
        self.records = TrimRecords()
        self.recalls = RecallRecords()
        self.index = ConversationIndex(
            lambda key: engine.cache_state(key).tokens,
            budget_bytes=self.branch_budget,
            drop=self._drop_cache,
        )
        self.prompts = RequestPrompts(engine)
        self._lock = threading.Lock()
        self._active: set[CancelToken] = set()
        self.recent: deque[RequestSummary] = deque(maxlen=RECENT_REQUESTS)
        self.requests_total = 0

    # -- settings and state ----------------------------------------------------------

    @property
    def preset(self) -> Preset:
        """The settings requests run with."""
        return self._preset

    def set_preset(self, preset: Preset) -> None:
        """Run requests that start from now on with ``preset``."""
        self._preset = preset

    def branch_budget(self) -> int | None:
        """KV bytes the clients' branches may hold together: the memory budget's KV
        room less what the other caches (the app's conversations) hold; None when the
        loaded model's budget is unknown."""
        budget = getattr(self.engine, "device_budget", None)
        live = getattr(self.engine, "live_kv_bytes", None)
        if budget is None or live is None:
            return None
        others = max(0, live() - self.index.branch_bytes())
        return max(0, budget.kv_limit() - others)

    def _drop_cache(self, key: str) -> None:
        drop = getattr(self.engine, "drop_cache", None)
        if drop is not None:
            drop(key)

    def effective_limit(self) -> int:
        """Tokens a request may hold: the preset's limit or the device's, if smaller."""
        preset = self._preset
        return effective_limit(
            preset.max_context,
            preset.kv_bits,
            preset.kv_group,
            self.engine.max_safe_context,
            preset.kv_aging,
        )

    def model_id(self) -> str | None:
        """The served model's id, or None when no model is loaded."""
        info = self.engine.model_info
        return served_model_id(info) if info is not None else None

    @property
    def active_requests(self) -> int:
        """Requests queued or running now."""
        with self._lock:
            return len(self._active)

    def cancel_all(self) -> None:
        """Stop every request in progress (each within a token)."""
        with self._lock:
            tokens = list(self._active)
        for token in tokens:
            token.cancel()

    def forget_conversations(self) -> None:
        """Drop the caches and trims of every client conversation not in progress."""
        for key in self.index.forget_idle():
            self.engine.drop_cache(key)
        self.records.clear()
        self.recalls.clear()

    def prompt_tokens(self, request: ChatRequest) -> int:
        """Tokens the model would see for ``request`` untrimmed (count_tokens).

        Raises:
            RequestError: The template cannot render the messages.
        """
        history = ClientHistory.of(request.messages)
        view = model_view(history, None, "system")
        return len(self.prompts.prompt_ids(view, request))

    # -- a request -------------------------------------------------------------------

    def run(self, request: ChatRequest, cancel: CancelToken) -> Iterator:
        """Answer ``request``; iterate the result (on a worker thread) to run it.

        Yields `Accepted`, then `TrimApplied` (when trimmed), `TextDelta`s and
        `Finished`. Refusals are raised before `Accepted`: `RequestError` (a bad
        model name, an unrenderable history), `ContextLengthExceeded` (over the limit
        and auto-trim off, or no trim makes it fit) or `ServiceUnavailable` (no model,
        critical memory pressure).
        """
        with self._lock:
            self._active.add(cancel)
            self.requests_total += 1
        summary = RequestSummary(key="", outcome="failed")
        finished = None
        try:
            for event in self._answer(request, cancel):
                if isinstance(event, Finished):
                    finished, summary = event, _summary_of(event)
                else:
                    yield event
        except (RequestError, BudgetError) as exc:
            summary = RequestSummary(key="", outcome="refused", note=str(exc))
            raise
        except BaseException as exc:
            summary = RequestSummary(key="", outcome="failed", note=repr(exc))
            raise
        finally:
            self._close(cancel, summary)
        # Only now, with its cache released and the request counted: a client that
        # sends its next request the moment this one ends finds everything settled.
        if finished is not None:
            yield finished

    def _close(self, cancel: CancelToken, summary: RequestSummary) -> None:
        with self._lock:
            self._active.discard(cancel)
        self.recent.append(summary)
        if summary.note:
            logger.info("request %s: %s", summary.outcome, summary.note)
            return
        logger.info(
            "request %s: %s, %d prompt tokens (%d cached), %d generated%s",
            summary.key or "-",
            summary.outcome,
            summary.prompt_tokens,
            summary.cached_tokens,
            summary.completion_tokens,
            ", trimmed" if summary.trimmed else "",
        )

    def _answer(self, request: ChatRequest, cancel: CancelToken) -> Iterator:
        engine = self.engine
        info = check_served_model(engine, request.model)
        preset = self._preset
        sampling = SamplingSettings(
            temperature=_or(request.temperature, preset.temperature),
            top_p=_or(request.top_p, preset.top_p),
            max_tokens=_or(request.max_tokens, preset.max_tokens),
            seed=request.seed,
        )
        limit = self.effective_limit()
        refuse_unreadably_long(engine, request, preset, sampling.max_tokens, limit)
        costs = self.prompts.template_costs(info)
        # A forced call the model's format cannot take is refused before anything runs.
        self.prompts.turn_tools(request)
        history = ClientHistory.of(request.messages)
        pressure = self.pressure()
        if pressure != "normal":
            # Under pressure, what can be rebuilt goes first (prefix entries, idle caches).
            engine.release_memory()
        # Agents compact their own history when told the context is full: a request
        # with tools (or from an agent protocol) is refused with the numbers, never
        # trimmed behind its back.
        never_trim = request.never_trim or bool(request.tools)
        blocks = self.recalls.blocks(history)
        view = with_blocks(
            model_view(history, self.records.lookup(history), costs.style), blocks
        )
        # Recall puts trimmed originals back before the new message (not for agent
        # protocols, which manage their own history).
        recalls = preset.recall and not never_trim
        # A history far over the limit is not rendered whole: its first trim is
        # planned from counts bounded per message (`history_trim`).
        counted = (
            count_history(engine.tokenizer, view, limit, costs.message_overhead)
            if needs_counting(view)
            else None
        )
        bounded = counted is not None and counted.bounded
        if bounded:
            prompt_ids = self.prompts.head_ids(view)
        else:
            prompt_ids = self.prompts.prompt_ids(view, request)
        lease = self.index.acquire(history.hashes, history.system_count, prompt_ids)
        ran = False
        finished = None
        try:
            if lease.fork_from:  # a branch: start from the shared prefix, a copy
                engine.fork_cache(
                    lease.fork_from, lease.key, lease.fork_tokens, preset.kv_settings()
                )
            outcome: TrimOutcome | None = None
            reason = ""
            for _ in range(MAX_TRIM_ROUNDS):
                if bounded and counted is not None:
                    # A lower bound, past twice the limit: a trim is needed.
                    prompt_tokens = self.prompts.bounded_tokens(view, counted, costs)
                else:
                    prompt_ids = self.prompts.prompt_ids(view, request)
                    prompt_tokens = len(prompt_ids)
                details = {
                    "prompt_tokens": prompt_tokens,
                    "max_tokens": sampling.max_tokens,
                    "requested_tokens": prompt_tokens + sampling.max_tokens,
                    "effective_limit": limit,
                    "preset_limit": preset.max_context,
                    "auto_trim": preset.auto_trim,
                    "memory_pressure": pressure,
                }
                plan_with = partial(
                    plan_for,
                    engine,
                    view,
                    history,
                    costs,
                    prompt_tokens=prompt_tokens,
                    max_tokens=sampling.max_tokens,
                    limit=limit,
                    preset=preset,
                    pressure=pressure,
                    counts=counted.counts if bounded and counted else None,
                )
                plan = plan_with()
                reserve = 0
                if plan.action is not Action.PROCEED and recalls:
                    # A trim keeps the recall budget free, as a chat's does.
                    reserved = plan_with(reserve=recall_budget(limit))
                    if reserved.action is not Action.REFUSE:
                        plan, reserve = reserved, recall_budget(limit)
                if plan.action is Action.PROCEED:
                    break
                if never_trim and pressure != "critical":
                    raise ContextLengthExceeded(
                        too_long_message(details, plan.reason), details
                    )
                if plan.action is Action.REFUSE:
                    raise refusal(plan.reason, pressure, details)
                drop, budget = fit_plan(
                    engine,
                    view,
                    history,
                    plan,
                    costs,
                    limit=limit,
                    max_tokens=sampling.max_tokens,
                    preset=preset,
                    details=details,
                    reserve=reserve,
                )
                if not ran:
                    yield Accepted(prompt_tokens)
                ran = True
                outcome, record = apply_trim(
                    engine,
                    lease.key,
                    view,
                    history,
                    costs,
                    drop=drop,
                    summary_budget=budget,
                    preset=preset,
                    limit=limit,
                    cancel=cancel,
                    random_weights=info.random_weights,
                    whole=not bounded,
                )
                bounded = False  # the kept part was rendered and fits: render whole
                self.records.remember(history, record)
                view = with_blocks(model_view(history, record, costs.style), blocks)
                reason = plan.reason
                yield TrimApplied(outcome, plan.reason)
                if plan.refuse_after_trim:
                    raise ServiceUnavailable(plan.reason, "memory_pressure", details)
            else:
                raise ContextLengthExceeded(
                    plan.reason or "The history could not be trimmed to fit.", details
                )
            ran = True
            recall = None
            if recalls and view.record is not None:
                view, recall = self._recall(
                    history, view, blocks, limit, sampling.max_tokens, prompt_tokens
                )
                prompt_ids = self.prompts.prompt_ids(view, request)
                prompt_tokens = len(prompt_ids)
            replies = stream_reply(
                engine,
                lease.key,
                self.prompts.model_messages(view, request),
                request,
                sampling,
                limit,
                cancel,
                prompt_tokens=prompt_tokens,
                kv=preset.kv_settings(),
                accepted=outcome is not None,
                turn_tools=self.prompts.turn_tools(request),
                thinking=request_thinking(preset.thinking_settings(), request),
                extension={
                    **trim_extension(outcome, view, reason, limit, preset, pressure),
                    **ignored_reasoning_note(request.messages, _reasons(engine)),
                    "recalled": recalled_json(recall) if recall else [],
                    "recall_ms": round(recall.ms, 1) if recall else 0.0,
                },
            )
            for event in replies:
                if isinstance(event, Finished):
                    finished = event
                else:
                    yield event
        finally:
            self.index.release(
                lease,
                history.hashes if ran else None,
                prompt_ids if ran else None,
                engine.cache_state(lease.key).kv_bytes,
            )
        yield finished

    def _recall(
        self,
        history: ClientHistory,
        view: ModelView,
        blocks: dict[int, tuple[RecalledMessage, ...]],
        limit: int,
        max_tokens: int,
        prompt_tokens: int,
    ) -> tuple[ModelView, RecallResult]:
        """Put the trimmed originals the new message needs before it (`history_recall`).

        A request sent again unchanged finds its block remembered and already applied.
        """
        last = len(history.messages) - 1
        if last in blocks:
            return view, RecallResult(blocks[last], "", len(blocks[last]), 0.0)
        budget = recall_room(limit, max_tokens, prompt_tokens)
        recall = recall_request(
            self.recalls, history, view, blocks, budget, self.engine.count_tokens
        )
        if not recall.recalled:
            return view, recall
        self.recalls.remember(history.hashes[last], recall.recalled)
        return with_blocks(view, {last: recall.recalled}), recall


def _or(value, default):
    return default if value is None else value


def _reasons(engine) -> bool:
    """Whether the served model writes reasoning (an engine without a tokenizer: no)."""
    tokenizer = getattr(engine, "tokenizer", None)
    return bool(tokenizer is not None and tokenizer.reasoning.has_reasoning)


def _summary_of(event: Finished) -> RequestSummary:
    return RequestSummary(
        key=event.key,
        outcome=event.finish_reason,
        prompt_tokens=event.prompt_tokens,
        cached_tokens=event.cached_tokens,
        completion_tokens=event.completion_tokens,
        trimmed=bool(event.swapless.get("trimmed")),
        tokens_per_s=float(event.swapless.get("tokens_per_s", 0.0)),
    )
