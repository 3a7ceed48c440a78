"""A trim, step by step: the plan checked against the exact prompt, then the summary.

The trim policy works from per-message estimates; `fit_plan` renders the trimmed
prompt without its summary for real (with the conversation's tools, when it offers
some), gives the summary the room that is left (at most the preset's
``summary_max_tokens``), and drops more of the oldest turns while not even a minimal
summary would fit; recall's reserve gives way before the last kept turn does.
`trim_conversation` then writes the summary (a dropped reply's tool calls go into it
as one line each, `with_gist`), reshapes the cache and stores the summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from app.core.cancel import CancelToken
from app.core.chat.model_messages import build_messages
from app.core.chat.trimmer import Trimmer
from app.core.chat.turn_events import Trimmed, TrimStarted
from app.core.errors import BudgetError
from app.core.presets.presets import Preset
from app.core.recall.block import with_recall
from app.core.store import Store
from app.core.store.calls.tool_calls import StoredToolCall
from app.core.store.records import ModelContext
from app.core.trim.policy import MIN_SUMMARY_TOKENS, TrimPlan

# Tokens left unused by a summary to absorb merges at message boundaries.
SUMMARY_MARGIN = 8
# Characters of a call's arguments and result a summary's source keeps.
GIST_CHARS = 200


class FitSession(Protocol):
    """What `fit_plan` needs of `ConversationSession`."""

    engine: Any
    preset: Preset

    @property
    def style(self) -> str:
        """How summaries are placed for this model's chat template."""
        ...

    def effective_limit(self) -> int:
        """The conversation's token limit now."""
        ...

    def template_tools(self) -> list[dict[str, Any]] | None:
        """The tools rendered into every prompt (None: none)."""
        ...

    def _overhead(self) -> int: ...


class TrimSession(FitSession, Protocol):
    """What `trim_conversation` needs of `ConversationSession`."""

    store: Store
    conversation_id: int
    cache_key: str

    def fit(
        self, plan: TrimPlan, context: ModelContext, user_text: str | None
    ) -> tuple[set[int], int]:
        """Dropped message ids and the summary's budget (see `fit_plan`)."""
        ...

    def model_messages(self, context: ModelContext) -> list[dict[str, Any]]:
        """What the model sees for ``context``."""
        ...

    def _calls(self, context: ModelContext) -> dict[int, list[StoredToolCall]]: ...

    def _random_weights(self) -> bool: ...


def with_gist(content: str, calls: list[StoredToolCall] | None) -> str:
    """A reply's text with one line per tool call, so a summary keeps the calls' gist."""
    if not calls:
        return content
    lines = [content] if content else []
    for call in calls:
        result = " ".join(call.result.split())[:GIST_CHARS]
        lines.append(f"[called {call.tool}({call.arguments[:GIST_CHARS]}) → {result}]")
    return "\n".join(lines)


def fit_plan(
    session: FitSession,
    plan: TrimPlan,
    context: ModelContext,
    user_text: str | None,
    reserve: int,
) -> tuple[set[int], int, int]:
    """Return (dropped message ids, summary budget, recall reserve left).

    Args:
        session: The conversation's session.
        plan: The policy's plan.
        context: What the model sees now.
        user_text: The new user message, if any.
        reserve: Tokens kept for recall this turn.

    Raises:
        BudgetError: When no trim makes the request fit.
    """
    kept = [m for m in context.messages if m.id not in set(plan.drop)]
    # Under memory pressure the plan's threshold is below the limit: aim for it.
    limit = min(plan.threshold, session.effective_limit())
    while True:
        history = [(m.role, with_recall(m.content, m.recalled)) for m in kept]
        kept_ids = {m.id for m in kept}
        pinned = [*context.pinned] + [
            m for m in context.messages if m.pinned and m.id not in kept_ids
        ]
        ids = session.engine.render(
            build_messages(
                context.system_prompt,
                [],
                history,
                user_text,
                style=session.style,
                pinned=[(m.role, m.content) for m in pinned],
            ),
            True,
            session.template_tools(),
        )
        room = (
            limit
            - session.preset.max_tokens
            - len(ids)
            - session._overhead()
            - SUMMARY_MARGIN
            - reserve
        )
        if room >= MIN_SUMMARY_TOKENS or not kept:
            break
        if room + reserve >= MIN_SUMMARY_TOKENS and len(kept) <= 2:
            # Recall gives way before the last kept turn does.
            reserve = max(room + reserve - MIN_SUMMARY_TOKENS, 0)
            continue
        kept = kept[1:]
        while kept and kept[0].role != "user":
            kept = kept[1:]
    if room < MIN_SUMMARY_TOKENS and room + reserve >= MIN_SUMMARY_TOKENS:
        reserve = max(room + reserve - MIN_SUMMARY_TOKENS, 0)
        room = MIN_SUMMARY_TOKENS
    if room < MIN_SUMMARY_TOKENS:
        raise BudgetError(
            f"This request cannot fit in the conversation's limit of {limit} tokens "
            f"even with all history summarised (the message and the reply's "
            f"{session.preset.max_tokens} tokens need "
            f"{len(ids) + session.preset.max_tokens}). "
            "Shorten the message or lower max_tokens."
        )
    kept_ids = {m.id for m in kept}
    dropped = {m.id for m in context.messages if m.id not in kept_ids}
    # Half of the share not kept, at most: the rest is headroom for the next turns,
    # so a conversation does not trim again on every turn.
    headroom_cap = int((1 - session.preset.keep_ratio) * limit / 2)
    budget = min(
        room, session.preset.summary_max_tokens, max(headroom_cap, MIN_SUMMARY_TOKENS)
    )
    return dropped, budget, reserve


def trim_conversation(
    session: TrimSession,
    plan: TrimPlan,
    context: ModelContext,
    user_text: str | None = None,
    cancel: CancelToken | None = None,
) -> Iterator[TrimStarted | Trimmed]:
    """Replace the plan's dropped messages with one summary (cache and store).

    Yields `TrimStarted` once the exact messages to drop are known, then `Trimmed`.

    Raises:
        BudgetError: Nothing is left to summarise, or no trim makes it fit.
    """
    drop_ids, summary_budget = session.fit(plan, context, user_text)
    messages = list(context.messages)
    dropped = [m for m in messages if m.id in drop_ids]
    kept = [m for m in messages if m.id not in drop_ids]
    if not dropped:
        raise BudgetError(plan.reason or "There is no history left to summarise.")
    yield TrimStarted(dropped_messages=len(dropped), reason=plan.reason)
    old_messages = session.model_messages(context)
    # Each kept call's result is a message of its own in ``old_messages``.
    calls = session._calls(context)
    first_kept_index = (
        len(old_messages) - len(kept) - sum(len(calls.get(m.id, [])) for m in kept)
    )
    previous = "\n".join(s.content for s in context.summaries)
    mode = session.preset.summary_mode
    if mode == "model" and session._random_weights():
        mode = "extractive"  # a random-weight model's summary would be noise
    trimmer = Trimmer(
        session.engine,
        session.cache_key,
        session.preset.kv_settings(),
        session.style,
        position_room=session.effective_limit(),
        cancel=cancel,
    )
    outcome = trimmer.trim(
        system_prompt=context.system_prompt,
        old_messages=old_messages,
        first_kept_index=first_kept_index,
        dropped=[(m.role, with_gist(m.content, calls.get(m.id))) for m in dropped],
        kept=[(m.role, with_recall(m.content, m.recalled)) for m in kept],
        previous_summary=previous,
        summary_mode=mode,
        summary_max_tokens=summary_budget,
        cache_method=session.preset.trim_method,
        pinned=[
            (m.role, m.content)
            for m in [*context.pinned, *(d for d in dropped if d.pinned)]
        ],
    )
    first_id = min([dropped[0].id, *(s.first_message_id for s in context.summaries)])
    session.store.add_summary(
        session.conversation_id,
        first_id,
        dropped[-1].id,
        outcome.summary,
        outcome.summary_tokens,
        outcome.summary_method,
        cause=plan.cause or None,
        limit_tokens=plan.limit or None,
        trim_at_tokens=plan.threshold if plan.cause else None,
    )
    yield Trimmed(outcome)
