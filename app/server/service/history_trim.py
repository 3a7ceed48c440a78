"""Trimming a client's history like a chat: the same policy, no store.

The app's chats decide and trim through `ConversationSession`, which reads and writes
the conversation database. A server client's history arrives with each request
instead, so this module asks the same pure policy (`plan_trim`) the same questions,
checks the plan against the exact rendered prompt the same way (the summary gets the
room that is left, and more of the oldest turns go while not even a minimal summary
would fit), and carries it out with the same `Trimmer` (summary, then splice or
rebuild of the live cache). The result is a `TrimRecord` the server remembers for the
client's next requests.

Bounding what the older history costs before it is rendered whole (issue #31, point
15): one 8 MiB *older* message (one the trim drops anyway) was rendered and tokenized
whole on the request's worker thread before its first event, about 0.5 GiB each. The
newest message and the system messages are already bounded before tokenizing
(`completion`'s ``_refuse_unreadably_long``); `count_history` bounds the rest the same
way: each older message's texts are first bounded from their characters
(`PromptTokenizer.fewest_tokens`; one already past what is left is not tokenized at
all), else counted in pieces of 64 Ki characters stopping once past what is left
(`PromptTokenizer.count_at_least`), newest first, since a trim keeps the newest. When
the counts stay within `RENDER_WHOLE_FACTOR` times the limit, the history is rendered
whole as before (a conversation just over its limit keeps its exact prompt, so its
cache is continued and spliced). Past that, the first trim is planned from these
counts and carried out without rendering the dropped messages (an extractive summary,
bounded per message, and a rebuild of the kept part). `tokenize_need` is what this
work may hold at once, counted in the request's ledger (`app.server.admission`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from app.core.cancel import CancelToken
from app.core.chat.conversation_session import SUMMARY_MARGIN
from app.core.chat.trimmer import Trimmer, TrimOutcome
from app.core.engine.prompt_tokenizer import COUNT_PIECE_CHARS, PromptTokenizer
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
from app.server.openai_chat.openai_request import ChatMessage


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
    ``counts`` (a history too long to render whole, `count_history`) are the older
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

    ``whole`` False: the view is too long to render whole (`count_history`), so the
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


# -- bounding the history before it is rendered (#31 point 15) -----------------------

RENDER_WHOLE_FACTOR = 2
"""A history counted within this many times the limit is rendered whole."""
WORK_BYTES_PER_TOKEN = 256
"""Bytes tokenizing holds per token while it runs (a fast tokenizer's encoding with
its offsets): measured 111 MiB for 560,002 tokens (1 M characters) of the tiny
model's, about 200 bytes a token, rounded up."""


@dataclass(frozen=True)
class HistoryCounts:
    """The older messages of a view, counted within a bound.

    Attributes:
        counts: Tokens of each older body message's texts (``view.body[:-1]``), in
            order: exact while the running total (newest first) stays within the
            bound, else a lower bound.
        bounded: True when the total is past the bound: the view must not be
            rendered whole (plan the trim from ``counts``).
    """

    counts: tuple[int, ...]
    bounded: bool


def message_texts(message: ChatMessage) -> list[str]:
    """The texts of a message the template renders (content, reasoning, call
    arguments)."""
    texts = [message.content, message.reasoning_content]
    texts.extend(call.arguments for call in message.tool_calls)
    return [text for text in texts if text]


def count_within(tokenizer: PromptTokenizer, text: str, cap: int) -> int:
    """Tokens of ``text``: exact for a short text, else a lower bound that is past
    ``cap`` when the text is; never tokenizes more than about ``cap`` tokens and one
    piece of it."""
    fewest = tokenizer.fewest_tokens(text)
    if fewest > cap:
        return fewest
    return tokenizer.count_at_least(text, cap)


def count_history(
    tokenizer: PromptTokenizer, view: ModelView, limit: int, overhead: int
) -> HistoryCounts:
    """Count the view's older messages, newest first, within ``RENDER_WHOLE_FACTOR``
    times ``limit`` (``overhead`` tokens added per message, as the template adds)."""
    *older, _new = view.body
    bound = RENDER_WHOLE_FACTOR * limit
    counts = [0] * len(older)
    total = 0
    for index in range(len(older) - 1, -1, -1):
        count = overhead
        for text in message_texts(older[index]):
            if total > bound:
                # Past the bound every older message goes: a lower bound will do,
                # nothing more is tokenized (20,000 short messages were each
                # counted).
                count += tokenizer.fewest_tokens(text)
            else:
                count += count_within(tokenizer, text, max(0, bound - total - count))
        counts[index] = count
        total += count
    return HistoryCounts(tuple(counts), total > bound)


def view_chars(view: ModelView) -> int:
    """Characters of the view's texts (a cheap first test: a short view is rendered
    whole without counting)."""
    return sum(
        len(text)
        for message in (*view.head, *view.body)
        for text in message_texts(message)
    )


def needs_counting(view: ModelView) -> bool:
    """True when the view is long enough that rendering it whole might cost more
    than the bound (a short one is rendered whole at once, as always)."""
    return view_chars(view) > COUNT_PIECE_CHARS


def tokenize_need(limit: int, body_bytes: int) -> int:
    """Bytes a request's tokenizing may hold at once: its largest render (at most
    `RENDER_WHOLE_FACTOR` times the limit, and at most one token per byte of its
    body) plus one counting piece; for the request's ledger."""
    tokens = min(body_bytes, RENDER_WHOLE_FACTOR * limit + COUNT_PIECE_CHARS)
    return WORK_BYTES_PER_TOKEN * max(0, tokens)
