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
from typing import Any

from app.core.budget.context_state import DeviceLimit, effective_limit
from app.core.cancel import CancelToken
from app.core.chat.model_messages import build_messages, summary_style
from app.core.chat.reasoning_turns import with_reasoning
from app.core.chat.tool_loop import ToolLoop, tool_tokens, with_tool_calls
from app.core.chat.tool_setup import ToolSetup
from app.core.chat.trim_fit import SUMMARY_MARGIN, fit_plan, trim_conversation
from app.core.chat.trimmer import TrimOutcome
from app.core.chat.turn_events import (
    ChatTurn,
    Recalled,
    Trimmed,
    TrimStarted,
)
from app.core.chat.turn_report import conversation_cache_key
from app.core.errors import BudgetError
from app.core.presets.presets import Preset, preset_from_dict
from app.core.reasoning.thinking import reply_room
from app.core.recall.block import recall_budget, with_recall
from app.core.recall.recaller import RecallResult, recall_for
from app.core.store import Store
from app.core.store.calls.tool_calls import StoredToolCall
from app.core.store.records import Message, ModelContext, RecalledMessage
from app.core.trim.policy import (
    Action,
    HistoryMessage,
    TrimPlan,
    TrimRequest,
    plan_trim,
)

MAX_TRIM_ROUNDS = 3
__all__ = ["MAX_TRIM_ROUNDS", "SUMMARY_MARGIN", "ConversationSession", "save_preset"]
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
        tools: The MCP tools this conversation offers and who answers consent
            (None: no tools; may be set later through ``tools``).
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
        tools: ToolSetup | None = None,
    ):
        self.engine = engine
        self.store = store
        self.conversation_id = conversation_id
        self.pressure = pressure
        self.device_limit = device_limit
        self.seed = seed
        self.tools = tools
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
        messages = with_reasoning(messages, context.messages)
        return with_tool_calls(messages, context.messages, self._calls(context))

    def _calls(self, context: ModelContext) -> dict[int, list[StoredToolCall]]:
        replies = [m.id for m in context.messages if m.role == "assistant"]
        if not replies:
            return {}
        return self.store.tool_calls(self.conversation_id, replies)

    def template_tools(self) -> list[dict[str, Any]] | None:
        """The tools rendered into every prompt of this conversation (None: none)."""
        if self.tools is None or not self.engine.supports_tools():
            return None
        return self.tools.template_tools()

    def _message_tokens(self, message: Message) -> int:
        # Re-tokenize rather than trust the generated count: a reply's text can
        # tokenize to more tokens than were generated (e.g. replacement characters).
        count = self._token_counts.get(message.id)
        if count is None:
            count = self.engine.count_tokens(
                with_recall(message.content, message.recalled)
            )
            if message.role == "assistant":
                made = self.store.tool_calls(self.conversation_id, [message.id])
                count += tool_tokens(made.get(message.id, []), self.engine.count_tokens)
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
        tools = self.template_tools()
        prompt_ids = self.engine.render(
            self.model_messages(context, user_text), True, tools
        )
        history = [
            HistoryMessage(key=m.id, role=m.role, tokens=self._message_tokens(m))
            for m in context.messages
        ]
        fixed = len(
            self.engine.render(
                build_messages(context.system_prompt, [], [], None), True, tools
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
    ) -> tuple[set[int], int]:
        """Check a plan against the exact rendered prompt (`trim_fit.fit_plan`).

        Raises:
            BudgetError: When no trim makes the request fit.
        """
        dropped, budget, self._turn_reserve = fit_plan(
            self, plan, context, user_text, self._turn_reserve
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
        events = trim_conversation(self, plan, context, user_text, cancel)
        for event in events:
            if isinstance(event, Trimmed):
                self.trims += 1
                self.last_trim = event.outcome
            yield event

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
        # One reply, or several with tool calls between them (`tool_loop`).
        return ToolLoop(self, cancel).run(messages, outcome, recall)

    def cancel(self) -> None:
        """Stop the turn in progress, if any (safe from any thread)."""
        token = self._cancel
        if token is not None:
            token.cancel()
