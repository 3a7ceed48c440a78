"""Decide, before a turn, whether the conversation must be trimmed and what to keep.

Rules: trim *before* generating when prompt + max_tokens would pass the threshold (the
effective limit, or a lower share of it under memory pressure); keep the system prompt,
keep whole recent messages adding up to at most ``keep_ratio × limit`` (never split a
message; the new user message is always kept; the kept part starts with a user message),
and replace everything older — earlier summaries included — with one summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

DEFAULT_WARNING_TRIM_RATIO = 0.75
# A summary shorter than this says too little to be worth its place.
MIN_SUMMARY_TOKENS = 32


class Action(Enum):
    """What the chat session must do before the turn."""

    PROCEED = "proceed"
    TRIM = "trim"
    REFUSE = "refuse"


@dataclass(frozen=True)
class HistoryMessage:
    """One message of the history as the policy sees it.

    Attributes:
        key: The caller's id for the message (a database id or an index).
        role: ``user`` or ``assistant``.
        tokens: Its token count including chat-template overhead.
    """

    key: object
    role: str
    tokens: int


@dataclass(frozen=True)
class TrimRequest:
    """The numbers the policy decides from.

    Attributes:
        prompt_tokens: Exact tokens of the prompt as it would be sent now (system prompt,
            summaries, history and the new user message, with template overhead).
        max_tokens: Tokens the reply may add.
        history: The history messages in order (not the system prompt, not summaries,
            not the new user message).
        new_message_tokens: Tokens of the new user message.
        fixed_tokens: Tokens of the system prompt and the generation prompt.
        limit: The effective context limit of the conversation.
        keep_ratio: Share of the limit kept when trimming.
        summary_max_tokens: Upper bound on the summary that replaces the dropped part.
        auto_trim: When False, an over-long request is refused, never cut.
        pressure: System memory pressure: ``normal``, ``warning`` or ``critical``.
        warning_ratio: Under ``warning``, trim once this share of the limit is passed.
        reserved_tokens: Room kept for recalled messages, already counted in
            ``prompt_tokens`` and ``new_message_tokens`` (a trim it alone causes is
            still a trim for the limit; under pressure its cause stays pressure).
    """

    prompt_tokens: int
    max_tokens: int
    history: list[HistoryMessage]
    new_message_tokens: int
    fixed_tokens: int
    limit: int
    keep_ratio: float
    summary_max_tokens: int
    auto_trim: bool = True
    pressure: str = "normal"
    warning_ratio: float = DEFAULT_WARNING_TRIM_RATIO
    reserved_tokens: int = 0


@dataclass(frozen=True)
class TrimPlan:
    """The decision.

    Attributes:
        action: Proceed, trim, or refuse.
        reason: A sentence for the user (empty when proceeding quietly).
        threshold: Tokens (prompt + max_tokens) above which a trim happens now.
        projected_tokens: Prompt + max_tokens as the request stands.
        drop: Keys of the history messages to replace with a summary, oldest first.
        keep: Keys of the history messages kept, oldest first.
        after_trim_tokens: Upper bound of prompt + max_tokens after the trim.
        refuse_after_trim: Trim, then still refuse the turn (critical pressure).
        cause: Why a trim happens, empty unless ``TRIM``: ``limit`` (the turn would
            pass the limit), ``pressure`` (memory pressure is high, so the trim came
            early) or ``critical`` (critical pressure); the store's `TRIM_CAUSES`.
        limit: The conversation's limit in tokens.
    """

    action: Action
    reason: str
    threshold: int
    projected_tokens: int
    drop: list = field(default_factory=list)
    keep: list = field(default_factory=list)
    after_trim_tokens: int = 0
    refuse_after_trim: bool = False
    cause: str = ""
    limit: int = 0


def trim_cause(projected: int, limit: int, pressure: str) -> str:
    """Why a turn of ``projected`` tokens trims: the limit, or memory pressure first."""
    if pressure == "critical":
        return "critical"
    if pressure == "warning" and projected <= limit:
        return "pressure"
    return "limit"


def trim_threshold(limit: int, pressure: str, warning_ratio: float) -> int:
    """Return the prompt + max_tokens total above which a trim happens."""
    if pressure == "warning":
        return int(limit * warning_ratio)
    return limit


def choose_kept(history: list[HistoryMessage], budget: int) -> int:
    """Return the index of the first history message kept.

    Walks back from the newest message while whole messages fit in ``budget``; the kept
    part then starts at a user message so no reply is kept without its question.
    """
    used = 0
    first = len(history)
    for index in range(len(history) - 1, -1, -1):
        if used + history[index].tokens > budget:
            break
        used += history[index].tokens
        first = index
    while first < len(history) and history[first].role != "user":
        first += 1
    return first


def plan_trim(request: TrimRequest) -> TrimPlan:
    """Decide what to do before a turn.

    Args:
        request: The conversation's numbers.

    Returns:
        The plan. ``REFUSE`` carries a reason with the numbers and the limit.
    """
    projected = request.prompt_tokens + request.max_tokens
    threshold = trim_threshold(request.limit, request.pressure, request.warning_ratio)
    critical = request.pressure == "critical"
    if projected <= threshold and not critical:
        return TrimPlan(
            Action.PROCEED, "", threshold, projected, after_trim_tokens=projected
        )

    too_long = (
        f"This request needs {request.prompt_tokens} prompt tokens + {request.max_tokens} "
        f"reply tokens = {projected}, over the conversation's limit of {request.limit}"
    )
    if not request.auto_trim:
        return TrimPlan(
            Action.REFUSE,
            f"{too_long}. Auto-trim is off: shorten the message, lower max_tokens, or "
            "turn auto-trim on.",
            threshold,
            projected,
        )

    keep_budget = int(request.keep_ratio * request.limit) - request.new_message_tokens
    first_kept = choose_kept(request.history, max(keep_budget, 0))
    if first_kept == 0 and request.history:
        # Everything fits the keep share, yet the request is over: an earlier summary
        # takes the room. Fold the oldest turn into a new, shorter summary.
        first_kept = choose_kept(
            request.history, sum(m.tokens for m in request.history[1:])
        )
    base = request.fixed_tokens + request.new_message_tokens + request.max_tokens

    def kept_tokens(first: int) -> int:
        return sum(m.tokens for m in request.history[first:])

    # The summary takes what room is left, up to its configured maximum; if not even a
    # minimal summary fits, keep fewer turns.
    while (
        first_kept < len(request.history)
        and request.limit - base - kept_tokens(first_kept) < MIN_SUMMARY_TOKENS
    ):
        first_kept = choose_kept(request.history, kept_tokens(first_kept + 1))
    summary_budget = min(
        request.summary_max_tokens, request.limit - base - kept_tokens(first_kept)
    )
    drop = [m.key for m in request.history[:first_kept]]
    keep = [m.key for m in request.history[first_kept:]]
    after = base + kept_tokens(first_kept) + max(summary_budget, 0)
    if critical:
        reason = (
            "System memory pressure is critical: Swapless will not start a new prefill "
            "until it falls. Close other apps or wait, then send again."
        )
        if drop:
            return TrimPlan(
                Action.TRIM,
                reason
                + f" The oldest {len(drop)} messages were summarised to free memory.",
                threshold,
                projected,
                drop=drop,
                keep=keep,
                after_trim_tokens=after,
                refuse_after_trim=True,
                cause=trim_cause(
                    projected - request.reserved_tokens, request.limit, request.pressure
                ),
                limit=request.limit,
            )
        return TrimPlan(Action.REFUSE, reason, threshold, projected)
    if not drop:
        return TrimPlan(
            Action.REFUSE,
            f"{too_long}, and there is no older history left to summarise. Shorten the "
            "message or lower max_tokens.",
            threshold,
            projected,
        )
    if summary_budget < MIN_SUMMARY_TOKENS or after > request.limit:
        return TrimPlan(
            Action.REFUSE,
            f"{too_long}; even after summarising the history it would need up to {after}. "
            "Shorten the message or lower max_tokens.",
            threshold,
            projected,
        )
    reason = f"Summarised the oldest {len(drop)} messages to stay within {request.limit} tokens"
    if request.pressure == "warning":
        reason += f" (memory pressure is high, so the trim came at {threshold} tokens)"
    return TrimPlan(
        Action.TRIM,
        reason + ".",
        threshold,
        projected,
        drop=drop,
        keep=keep,
        after_trim_tokens=after,
        cause=trim_cause(
            projected - request.reserved_tokens, request.limit, request.pressure
        ),
        limit=request.limit,
    )
