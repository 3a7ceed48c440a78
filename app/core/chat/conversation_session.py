"""A stored conversation driven turn by turn: the one chat loop of the CLI and the app.

Each turn: read what the model should see from the store (system prompt + summaries +
untrimmed messages), let the trim policy decide against the effective limit and the
system memory pressure, trim if needed, save the user message, stream the reply into
the store (throttled partial saves), and finish with a `TurnReport`.

A turn is a `ChatTurn`: an iterator of frozen events (`turn_events`) that runs as the
consumer iterates it, on the consumer's thread; only MLX work goes to the engine thread
(tokenizing runs here, through the engine's thread-safe tokenizer). One `CancelToken`
stops it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from app.core.budget.context_state import DeviceLimit, effective_limit
from app.core.cancel import CancelToken
from app.core.chat.model_messages import build_messages, summary_style
from app.core.chat.reasoning_turns import align_cache, with_reasoning
from app.core.chat.trimmer import Trimmer, TrimOutcome
from app.core.chat.turn_events import (
    ChatTurn,
    Recalled,
    Trimmed,
    TrimStarted,
    TurnFinished,
)
from app.core.chat.turn_report import TurnReport, conversation_cache_key, reply_stats
from app.core.engine.events import GenerationEvent
from app.core.errors import BudgetError
from app.core.presets.presets import Preset, preset_from_dict
from app.core.reasoning.thinking import reply_room
from app.core.recall.block import recall_budget, with_recall
from app.core.recall.recaller import RecallResult, recall_for
from app.core.store import Store
from app.core.store.records import Message, ModelContext, RecalledMessage
from app.core.store.reply_saver import ReplySaver
from app.core.trim.policy import (
    MIN_SUMMARY_TOKENS,
    Action,
    HistoryMessage,
    TrimPlan,
    TrimRequest,
    plan_trim,
)
from app.core.turn.parts import REASONING

MAX_TRIM_ROUNDS = 3
# Tokens left unused by a summary to absorb merges at message boundaries.
SUMMARY_MARGIN = 8
PressureSource = Callable[[], str]


def _normal_pressure() -> str:
    return "normal"


def save_preset(store: Store, conversation_id: int, preset: Preset) -> None:
    """Store ``preset`` as the conversation's settings (used from its next turn)."""
    store.update_conversation(
        conversation_id,
        preset=preset.name,
        settings=preset.to_dict(),
        system_prompt=preset.system_prompt,
    )


class ConversationSession:
    """Runs turns of one stored conversation on the engine.

    Args:
        engine: A loaded engine.
        store: The open store.
        conversation_id: The conversation.
        pressure: Returns the system memory pressure level now.
        device_limit: Returns the device's max safe context for a KV precision
            (bits, group), or None when unknown.
        seed: Sampling seed for reproducible replies.
    """

    def __init__(
        self,
        engine,
        store: Store,
        conversation_id: int,
        *,
        pressure: PressureSource = _normal_pressure,
        device_limit: DeviceLimit | None = None,
        seed: int | None = None,
    ):
        self.engine = engine
        self.store = store
        self.conversation_id = conversation_id
        self.pressure = pressure
        self.device_limit = device_limit
        self.seed = seed
        self.cache_key = conversation_cache_key(conversation_id)
        self.trims = 0
        self.last_trim: TrimOutcome | None = None
        self._cancel: CancelToken | None = None
        self._style: str | None = None
        self._token_counts: dict[int, int] = {}
        self._template_overhead: int | None = None
        # Tokens recall may use this turn (the plan's reserve, or less when the
        # message fits only with less).
        self._turn_reserve = 0
        conversation = store.get_conversation(conversation_id)
        self.preset = preset_from_dict(
            conversation.preset or "chat", conversation.settings
        )

    @classmethod
    def start(
        cls,
        engine,
        store: Store,
        preset: Preset,
        *,
        model: str,
        system_prompt: str | None = None,
        **kwargs,
    ) -> ConversationSession:
        """Create a new stored conversation and return its session."""
        if system_prompt is not None:
            preset = preset.with_changes(system_prompt=system_prompt)
        conversation_id = store.create_conversation(
            model=model,
            preset=preset.name,
            settings=preset.to_dict(),
            system_prompt=preset.system_prompt,
        )
        return cls(engine, store, conversation_id, **kwargs)

    # -- settings --------------------------------------------------------------------

    def apply_preset(self, preset: Preset) -> None:
        """Use ``preset`` from the next turn on and save it with the conversation."""
        self.preset = preset
        save_preset(self.store, self.conversation_id, preset)

    @property
    def style(self) -> str:
        """How summaries are placed for this model's chat template."""
        if self._style is None:
            self._style = summary_style(self.engine.render)
        return self._style

    def effective_limit(self) -> int:
        """The smaller of the preset's max_context and the device's max safe context."""
        return effective_limit(
            self.preset.max_context,
            self.preset.kv_bits,
            self.preset.kv_group,
            self.device_limit,
            self.preset.kv_aging,
        )

    # -- what the model sees ---------------------------------------------------------

    def context(self) -> ModelContext:
        """What the store says the model should see now."""
        return self.store.context_for_model(self.conversation_id)

    def model_messages(
        self,
        context: ModelContext,
        user_text: str | None = None,
        recalled: tuple[RecalledMessage, ...] = (),
    ) -> list[dict]:
        """The chat messages for ``context`` plus an optional new user message.

        A user message that had trimmed originals recalled before it is sent with its
        stored recall block, so every later turn renders the same tokens.
        A reply's reasoning travels as ``reasoning_content`` (Hugging Face's key): the
        model's own template decides whether it keeps it.
        """
        messages = build_messages(
            context.system_prompt,
            [s.content for s in context.summaries],
            [(m.role, with_recall(m.content, m.recalled)) for m in context.messages],
            None if user_text is None else with_recall(user_text, recalled),
            style=self.style,
            pinned=[(m.role, m.content) for m in context.pinned],
        )
        return with_reasoning(messages, context.messages)

    def _message_tokens(self, message: Message) -> int:
        # Re-tokenize rather than trust the generated count: a reply's text can
        # tokenize to more tokens than were generated (e.g. replacement characters).
        count = self._token_counts.get(message.id)
        if count is None:
            count = self.engine.count_tokens(
                with_recall(message.content, message.recalled)
            )
            self._token_counts[message.id] = count
        return count + self._overhead()

    def recall_reserve(self) -> int:
        """Tokens the trim keeps free for recalled messages (0 when recall is off)."""
        if not self.preset.recall:
            return 0
        return recall_budget(self.effective_limit())

    def _overhead(self) -> int:
        if self._template_overhead is None:
            probe = "x"
            rendered = len(
                self.engine.render([{"role": "user", "content": probe}], False)
            )
            self._template_overhead = max(rendered - self.engine.count_tokens(probe), 0)
        return self._template_overhead

    def plan(self, user_text: str) -> tuple[TrimPlan, ModelContext, list[int]]:
        """Decide about trimming for a new user message; nothing is changed."""
        context = self.context()
        prompt_ids = self.engine.render(self.model_messages(context, user_text))
        history = [
            HistoryMessage(key=m.id, role=m.role, tokens=self._message_tokens(m))
            for m in context.messages
        ]
        fixed = len(
            self.engine.render(
                build_messages(context.system_prompt, [], [], None), True
            )
        )
        plan = plan_trim(self._request(prompt_ids, history, fixed, user_text, 0))
        # Room for recall is best effort: a message that fits only without it is sent
        # without recall.
        # A turn that fits without trimming gives recall the room left under the
        # threshold; a trim keeps the whole reserve free.
        reserve = self.recall_reserve()
        self._turn_reserve = 0
        if not reserve:
            return plan, context, prompt_ids
        if plan.action is Action.PROCEED:
            left = plan.threshold - plan.projected_tokens
            self._turn_reserve = min(reserve, max(left, 0)) if context.summaries else 0
            return plan, context, prompt_ids
        request = self._request(prompt_ids, history, fixed, user_text, reserve)
        reserved = plan_trim(request)
        if reserved.action is not Action.REFUSE or plan.action is Action.REFUSE:
            plan, self._turn_reserve = reserved, reserve
        return plan, context, prompt_ids

    def _request(
        self,
        prompt_ids: list[int],
        history: list[HistoryMessage],
        fixed: int,
        user_text: str,
        reserve: int,
    ) -> TrimRequest:
        return TrimRequest(
            prompt_tokens=len(prompt_ids) + reserve,
            max_tokens=reply_room(  # the thinking budget is room of its own
                self.preset.max_tokens,
                self.preset.thinking_settings(),
                self.engine.tokenizer.reasoning,
            ),
            history=history,
            new_message_tokens=self.engine.count_tokens(user_text)
            + self._overhead()
            + reserve,
            fixed_tokens=fixed,
            limit=self.effective_limit(),
            keep_ratio=self.preset.keep_ratio,
            summary_max_tokens=self.preset.summary_max_tokens,
            auto_trim=self.preset.auto_trim,
            pressure=self.pressure(),
            reserved_tokens=reserve,
        )

    # -- trimming --------------------------------------------------------------------

    def fit(
        self, plan: TrimPlan, context: ModelContext, user_text: str | None
    ) -> tuple[set, int]:
        """Check a plan against the exact rendered prompt; return (dropped ids, summary budget).

        The policy works from per-message estimates; here the trimmed prompt without its
        summary is rendered for real, the summary gets the room that is left (at most
        the preset's summary_max_tokens), and more of the oldest turns are dropped while
        not even a minimal summary would fit.

        Raises:
            BudgetError: When no trim makes the request fit.
        """
        kept = [m for m in context.messages if m.id not in set(plan.drop)]
        # Under memory pressure the plan's threshold is below the limit: aim for it.
        limit = min(plan.threshold, self.effective_limit())
        reserve = self._turn_reserve
        while True:
            history = [(m.role, with_recall(m.content, m.recalled)) for m in kept]
            kept_ids = {m.id for m in kept}
            pinned = [*context.pinned] + [
                m for m in context.messages if m.pinned and m.id not in kept_ids
            ]
            ids = self.engine.render(
                build_messages(
                    context.system_prompt,
                    [],
                    history,
                    user_text,
                    style=self.style,
                    pinned=[(m.role, m.content) for m in pinned],
                )
            )
            room = (
                limit
                - self.preset.max_tokens
                - len(ids)
                - self._overhead()
                - SUMMARY_MARGIN
                - reserve
            )
            if room >= MIN_SUMMARY_TOKENS or not kept:
                break
            if room + reserve >= MIN_SUMMARY_TOKENS and len(kept) <= 2:
                # Recall gives way before the last kept turn does.
                reserve = max(room + reserve - MIN_SUMMARY_TOKENS, 0)
                self._turn_reserve = reserve
                continue
            kept = kept[1:]
            while kept and kept[0].role != "user":
                kept = kept[1:]
        if room < MIN_SUMMARY_TOKENS and room + reserve >= MIN_SUMMARY_TOKENS:
            reserve = max(room + reserve - MIN_SUMMARY_TOKENS, 0)
            room = MIN_SUMMARY_TOKENS
            self._turn_reserve = reserve
        if room < MIN_SUMMARY_TOKENS:
            raise BudgetError(
                f"This request cannot fit in the conversation's limit of {limit} tokens "
                f"even with all history summarised (the message and the reply's "
                f"{self.preset.max_tokens} tokens need {len(ids) + self.preset.max_tokens}). "
                "Shorten the message or lower max_tokens."
            )
        kept_ids = {m.id for m in kept}
        dropped = {m.id for m in context.messages if m.id not in kept_ids}
        # Half of the share not kept, at most: the rest is headroom for the next turns,
        # so a conversation does not trim again on every turn.
        headroom_cap = int((1 - self.preset.keep_ratio) * limit / 2)
        budget = min(
            room, self.preset.summary_max_tokens, max(headroom_cap, MIN_SUMMARY_TOKENS)
        )
        return dropped, budget

    def trim(
        self,
        plan: TrimPlan,
        context: ModelContext,
        user_text: str | None = None,
        cancel: CancelToken | None = None,
    ) -> Iterator[TrimStarted | Trimmed]:
        """Replace the plan's dropped messages with one summary (cache and store).

        Yields `TrimStarted` once the exact messages to drop are known, then `Trimmed`.
        """
        drop_ids, summary_budget = self.fit(plan, context, user_text)
        messages = list(context.messages)
        dropped = [m for m in messages if m.id in drop_ids]
        kept = [m for m in messages if m.id not in drop_ids]
        if not dropped:
            raise BudgetError(plan.reason or "There is no history left to summarise.")
        yield TrimStarted(dropped_messages=len(dropped), reason=plan.reason)
        old_messages = self.model_messages(context)
        first_kept_index = len(old_messages) - len(kept)
        previous = "\n".join(s.content for s in context.summaries)
        mode = self.preset.summary_mode
        if mode == "model" and self._random_weights():
            mode = "extractive"  # a random-weight model's summary would be noise
        trimmer = Trimmer(
            self.engine,
            self.cache_key,
            self.preset.kv_settings(),
            self.style,
            position_room=self.effective_limit(),
            cancel=cancel,
        )
        outcome = trimmer.trim(
            system_prompt=context.system_prompt,
            old_messages=old_messages,
            first_kept_index=first_kept_index,
            dropped=[(m.role, m.content) for m in dropped],
            kept=[(m.role, with_recall(m.content, m.recalled)) for m in kept],
            previous_summary=previous,
            summary_mode=mode,
            summary_max_tokens=summary_budget,
            cache_method=self.preset.trim_method,
            pinned=[
                (m.role, m.content)
                for m in [*context.pinned, *(d for d in dropped if d.pinned)]
            ],
        )
        first_id = min(
            [dropped[0].id, *(s.first_message_id for s in context.summaries)]
        )
        self.store.add_summary(
            self.conversation_id,
            first_id,
            dropped[-1].id,
            outcome.summary,
            outcome.summary_tokens,
            outcome.summary_method,
            cause=plan.cause or None,
            limit_tokens=plan.limit or None,
            trim_at_tokens=plan.threshold if plan.cause else None,
        )
        self.trims += 1
        self.last_trim = outcome
        yield Trimmed(outcome)

    def _random_weights(self) -> bool:
        info = getattr(self.engine, "model_info", None)
        return bool(info and info.random_weights)

    # -- turns -----------------------------------------------------------------------

    def send(self, user_text: str, cancel: CancelToken | None = None) -> ChatTurn:
        """Send a user message, trimming first if needed; iterate the result to run it.

        Args:
            user_text: The user's message.
            cancel: Stops the turn (a new token when None; `cancel` uses it too).

        Returns:
            The turn's events: `TrimStarted`/`Trimmed`, the engine's
            `PrefillProgress`/`GenerationEvent`, then `TurnFinished`. Iterating raises
            `BudgetError` when the request cannot fit (with the numbers) or pressure
            is critical; the user message is not saved then.
        """
        token = self._start(cancel)
        return ChatTurn(self._send_events(user_text, token), token)

    def _send_events(self, user_text: str, cancel: CancelToken) -> Iterator:
        outcome = None
        if self.pressure() != "normal" and hasattr(self.engine, "release_memory"):
            # Under pressure, what can be rebuilt goes first (prefix entries, idle caches).
            self.engine.release_memory()
        # Token estimates per message can be a little off at template boundaries, so
        # the exact rendered prompt is checked again after a trim.
        for _ in range(MAX_TRIM_ROUNDS):
            plan, context, _ = self.plan(user_text)
            if plan.action is Action.PROCEED:
                break
            if plan.action is Action.REFUSE:
                raise BudgetError(plan.reason)
            for event in self.trim(plan, context, user_text, cancel):
                if isinstance(event, Trimmed):
                    outcome = event.outcome
                yield event
            if plan.refuse_after_trim:
                raise BudgetError(plan.reason)
        else:
            raise BudgetError(
                plan.reason or "The conversation could not be trimmed to fit."
            )
        recall = self.recall(context, user_text)
        if recall.recalled:
            yield Recalled(recall.recalled, recall.cut, recall.ms)
        self.store.add_message(
            self.conversation_id,
            "user",
            user_text,
            token_count=self.engine.count_tokens(user_text),
            recalled=recall.recalled,
        )
        if not self.store.get_conversation(self.conversation_id).title:
            self.store.auto_title(self.conversation_id)
        yield from self._generate(
            self.model_messages(context, user_text, recall.recalled),
            cancel,
            outcome,
            recall,
        )

    def recall(
        self, context: ModelContext, user_text: str, budget: int | None = None
    ) -> RecallResult:
        """Find the trimmed originals ``user_text`` needs, within the recall budget.

        Messages a kept turn already recalled are in the model's view and are not
        recalled twice; with recall off in the preset nothing is. ``budget``
        defaults to the room the last `plan` left for recall.
        """
        if not self.preset.recall or not context.summaries:
            return RecallResult((), "", 0, 0.0)
        in_view = [r.message_id for m in context.messages for r in m.recalled]
        in_view += [m.id for m in context.pinned]
        return recall_for(
            self.store,
            self.conversation_id,
            user_text,
            self._turn_reserve if budget is None else budget,
            self.engine.count_tokens,
            exclude=in_view,
            # A value restated in view makes a trimmed older one out of date.
            newer=[(m.role, m.content) for m in context.messages],
        )

    def regenerate(self, cancel: CancelToken | None = None) -> ChatTurn:
        """Drop the last reply and generate it again for the same user message."""
        token = self._start(cancel)
        return ChatTurn(self._regenerate_events(token), token)

    def _regenerate_events(self, cancel: CancelToken) -> Iterator:
        context = self.context()
        messages = list(context.messages)
        if not messages or messages[-1].role != "assistant":
            raise BudgetError("There is no reply to regenerate.")
        self.store.delete_message(messages[-1].id)
        context = self.context()
        yield from self._generate(self.model_messages(context), cancel, None)

    def edit_and_resend(
        self, message_id: int, new_text: str, cancel: CancelToken | None = None
    ) -> ChatTurn:
        """Replace a user message (and everything after it) and send the new text."""
        token = self._start(cancel)
        return ChatTurn(self._edit_events(message_id, new_text, token), token)

    def _edit_events(self, message_id: int, new_text: str, cancel: CancelToken):
        context = self.context()
        messages = list(context.messages)
        index = next((i for i, m in enumerate(messages) if m.id == message_id), None)
        if index is None or messages[index].role != "user":
            raise BudgetError(
                "Only a user message that was not summarised can be edited."
            )
        for message in reversed(messages[index:]):
            self.store.delete_message(message.id)
        yield from self._send_events(new_text, cancel)

    def _start(self, cancel: CancelToken | None) -> CancelToken:
        self._cancel = cancel if cancel is not None else CancelToken()
        return self._cancel

    def _generate(
        self,
        messages: list[dict],
        cancel: CancelToken,
        outcome: TrimOutcome | None,
        recall: RecallResult | None = None,
    ) -> Iterator:
        kv = self.preset.kv_settings()
        sampling = self.preset.sampling_settings(self.seed)
        message_id = self.store.begin_reply(self.conversation_id)
        saver = ReplySaver(self.store, message_id)
        thinking = self.preset.thinking_settings()
        handle = self.engine.chat(
            self.cache_key,
            messages,
            kv,
            sampling,
            max_context=self.effective_limit(),
            cancel=cancel,
            thinking=thinking,
        )
        try:
            for event in handle:
                if isinstance(event, GenerationEvent) and event.text:
                    saver.add(event.text, reasoning=event.channel == REASONING)
                yield event
        except GeneratorExit:
            # The consumer stopped listening (a closed pipe, a client gone): like a
            # Stop, the reply is kept as far as it got and the engine stops.
            handle.cancel()
            saver.finish(stopped=True)
            raise
        except BaseException as exc:
            handle.cancel()
            saver.fail(exc)
            raise
        final = handle.final
        saver.finish(reply_stats(final), stopped=final.finish_reason == "cancelled")
        report = TurnReport.from_final(
            final,
            reply=saver.text,
            conversation_id=self.conversation_id,
            message_id=message_id,
            effective_max_context=self.effective_limit(),
            preset_max_context=self.preset.max_context,
        )
        report = replace(report, reasoning=saver.reasoning)
        report = align_cache(self.engine, self.cache_key, messages, report, thinking)
        report = self._with_trim(report, outcome)
        if recall is not None and recall.recalled:
            report = replace(
                report,
                recalled=recall.recalled,
                recall_cut=recall.cut,
                recall_ms=recall.ms,
            )
        yield TurnFinished(report)

    def _with_trim(self, report: TurnReport, outcome: TrimOutcome | None) -> TurnReport:
        if outcome is None:
            return report
        return replace(
            report,
            trimmed=True,
            trim_ms=outcome.total_ms,
            trim_cache_ms=outcome.cache_ms,
            trim_method=outcome.cache_method,
            summary_tokens=outcome.summary_tokens,
            summary_method=outcome.summary_method,
            trim_note=outcome.note,
        )

    def cancel(self) -> None:
        """Stop the turn in progress, if any (safe from any thread)."""
        token = self._cancel
        if token is not None:
            token.cancel()
