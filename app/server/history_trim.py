"""Trimming a client's history like a chat: the same policy, no store.

The app's chats decide and trim through `ConversationSession`, which reads and writes
the conversation database. A server client's history arrives with each request
instead, so this module asks the same pure policy (`plan_trim`) the same questions,
checks the plan against the exact rendered prompt the same way (the summary gets the
room that is left, and more of the oldest turns go while not even a minimal summary
would fit), and carries it out with the same `Trimmer` (summary, then splice or
rebuild of the live cache). The result is a `TrimRecord` the server remembers for the
client's next requests.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from app.core.cancel import CancelToken
from app.core.chat.conversation_session import SUMMARY_MARGIN
from app.core.chat.trimmer import Trimmer, TrimOutcome
from app.core.presets.presets import Preset
from app.core.trim.policy import (
    MIN_SUMMARY_TOKENS,
    HistoryMessage,
    TrimPlan,
    TrimRequest,
    plan_trim,
)
from app.server.errors import ContextLengthExceeded
from app.server.openai_chat.client_history import (
    ClientHistory,
    ModelView,
    TrimRecord,
    head_with_summary,
)


@dataclass(frozen=True)
class TemplateCosts:
    """What the chat template adds, measured once per model.

    Attributes:
        message_overhead: Tokens a message costs beyond its text.
        style: How summaries are placed (`model_messages.summary_style`).
    """

    message_overhead: int
    style: str


def measure_template(engine) -> TemplateCosts:
    """Measure the loaded model's template (rendering only, any thread)."""
    from app.core.chat.model_messages import summary_style

    probe = "x"
    rendered = len(engine.render([{"role": "user", "content": probe}], False))
    overhead = max(rendered - engine.count_tokens(probe), 0)
    return TemplateCosts(overhead, summary_style(engine.render))


def fixed_tokens(engine, history: ClientHistory) -> int:
    """Tokens of the client's system messages plus the generation prompt."""
    systems = [m.as_dict() for m in history.messages[: history.system_count]]
    try:
        return len(engine.render(systems, True))
    except Exception:  # a template that cannot render a prompt without a user turn
        return 0


def plan_for(
    engine,
    view: ModelView,
    history: ClientHistory,
    costs: TemplateCosts,
    *,
    prompt_tokens: int,
    max_tokens: int,
    limit: int,
    preset: Preset,
    pressure: str,
    reserve: int = 0,
    counts: Sequence[int] | None = None,
) -> TrimPlan:
    """Ask the trim policy about a request (nothing is changed).

    The history the policy may drop is the view's body before the new message; a
    summary already in the view is folded into the next one, as in a chat. ``reserve``
    tokens are kept free for recall (`history_recall`), as a chat's planner does.
    ``counts`` (a history too long to render whole, `history_bound`) are the older
    messages' tokens counted within a bound, instead of counting each whole.
    """
    *older, new = view.body
    history_messages = [
        HistoryMessage(
            key=index,
            role=message.role,
            tokens=(
                counts[index]
                if counts is not None
                else engine.count_tokens(message.content) + costs.message_overhead
            ),
        )
        for index, message in enumerate(older)
    ]
    request = TrimRequest(
        prompt_tokens=prompt_tokens + reserve,
        max_tokens=max_tokens,
        history=history_messages,
        new_message_tokens=engine.count_tokens(new.content)
        + costs.message_overhead
        + reserve,
        fixed_tokens=fixed_tokens(engine, history),
        limit=limit,
        keep_ratio=preset.keep_ratio,
        summary_max_tokens=preset.summary_max_tokens,
        auto_trim=preset.auto_trim,
        pressure=pressure,
        reserved_tokens=reserve,
    )
    return plan_trim(request)


def fit_plan(
    engine,
    view: ModelView,
    history: ClientHistory,
    plan: TrimPlan,
    costs: TemplateCosts,
    *,
    limit: int,
    max_tokens: int,
    preset: Preset,
    details: dict,
    reserve: int = 0,
) -> tuple[int, int]:
    """Check a plan against the exact rendered prompt; return (messages to drop, summary budget).

    ``reserve`` tokens are kept free for recall while that leaves a minimal summary
    room; otherwise recall gives way (it takes whatever is left after the trim).

    Raises:
        ContextLengthExceeded: When no trim makes the request fit.
    """
    *older, new = view.body
    systems = list(history.messages[: history.system_count])
    # Under memory pressure the plan's threshold is below the limit: aim for it.
    target = min(plan.threshold, limit)
    first_kept = len(plan.drop)
    while True:
        kept = older[first_kept:]
        ids = engine.render([m.as_dict() for m in (*systems, *kept, new)], True)
        room = target - max_tokens - len(ids) - costs.message_overhead - SUMMARY_MARGIN
        if room - reserve >= MIN_SUMMARY_TOKENS or first_kept >= len(older):
            break
        if room >= MIN_SUMMARY_TOKENS and len(older) - first_kept <= 2:
            break  # recall gives way before the last kept turn does
        first_kept += 1
        while first_kept < len(older) and older[first_kept].role != "user":
            first_kept += 1
    # Recall gives way before the request is refused.
    room = max(room - reserve, min(room, MIN_SUMMARY_TOKENS))
    if room < MIN_SUMMARY_TOKENS or first_kept == 0:
        raise ContextLengthExceeded(
            f"This request cannot fit in the limit of {target} tokens even with all "
            f"earlier messages summarised (the newest message and the reply's "
            f"{max_tokens} tokens need {len(ids) + max_tokens}). Shorten the message "
            "or lower max_tokens.",
            {**details, "needed_without_history": len(ids) + max_tokens},
        )
    # Half of the share not kept, at most: the rest is headroom for the next requests,
    # so a conversation does not trim again on every request.
    headroom_cap = int((1 - preset.keep_ratio) * target / 2)
    budget = min(room, preset.summary_max_tokens, max(headroom_cap, MIN_SUMMARY_TOKENS))
    return first_kept, budget


def apply_trim(
    engine,
    key: str,
    view: ModelView,
    history: ClientHistory,
    costs: TemplateCosts,
    *,
    drop: int,
    summary_budget: int,
    preset: Preset,
    limit: int,
    cancel: CancelToken,
    random_weights: bool,
    whole: bool = True,
) -> tuple[TrimOutcome, TrimRecord]:
    """Summarise the view's ``drop`` oldest body messages and fix the cache of ``key``.

    ``whole`` False: the view is too long to render whole (`history_bound`), so the
    summary is extractive (bounded per message; the model's would render it all) and
    the cache is rebuilt from the kept part (a splice renders the old view to align).

    Returns:
        What the trim did, and the record standing for the client's messages it
        covers (earlier summaries included).
    """
    systems = history.messages[: history.system_count]
    old_messages = view.messages()[:-1]  # what the cache was built from
    # Summarised as the client sent them: a recall block before one is not its text.
    start = view.first_body_index
    dropped = history.messages[start : start + drop]
    kept = view.body[drop:-1]
    mode = preset.summary_mode
    if mode == "model" and (random_weights or not whole):
        mode = "extractive"  # a random-weight model's summary would be noise
    trimmer = Trimmer(
        engine,
        key,
        preset.kv_settings(),
        costs.style,
        position_room=limit,
        cancel=cancel,
    )
    started = time.perf_counter()
    summary, method, note = trimmer.write_summary(
        mode,
        summary_budget,
        old_messages,
        [(m.role, m.content) for m in dropped],
        len(kept),
        view.record.summary if view.record else "",
    )
    summary_done = time.perf_counter()
    head = head_with_summary(systems, summary, costs.style)
    new_messages = [m.as_dict() for m in (*head, *kept)]
    used, cache_note, computed, held = trimmer.fix_cache(
        preset.trim_method if whole else "rebuild",
        old_messages,
        len(view.head) + drop,
        new_messages,
        len(head),
    )
    finished = time.perf_counter()
    summary_tokens = engine.count_tokens(summary)
    outcome = TrimOutcome(
        summary=summary,
        summary_tokens=summary_tokens,
        summary_method=method,
        cache_method=used,
        note="; ".join(n for n in (note, cache_note) if n),
        dropped_messages=drop,
        summary_ms=(summary_done - started) * 1000,
        cache_ms=(finished - summary_done) * 1000,
        computed_tokens=computed,
        context_tokens=held,
    )
    record = TrimRecord(
        covered=view.first_body_index + drop,
        summary=summary,
        summary_tokens=summary_tokens,
    )
    return outcome, record
