"""Refusals with the numbers: a prompt too long for the limit, in the words clients
act on, and a request refused from a bound on its size before it is tokenized."""

from __future__ import annotations

from app.core.engine.prompt_tokenizer import COUNT_PIECE_CHARS
from app.server.errors import ContextLengthExceeded, RequestError, ServiceUnavailable
from app.server.openai_chat.openai_request import ChatRequest


def too_long_message(details: dict, reason: str) -> str:
    """Anthropic's words for a prompt over the limit (agents parse the numbers)."""
    prompt, limit = details["prompt_tokens"], details["effective_limit"]
    if prompt + details["max_tokens"] <= limit:  # refused for memory, not length
        return reason
    if prompt > limit:
        return f"prompt is too long: {prompt} tokens > {limit} maximum"
    return (
        # Claude Code parses exactly these words and retries with fewer max_tokens.
        f"input length and `max_tokens` exceed context limit: {prompt} + "
        f"{details['max_tokens']} > {limit}, decrease input length or `max_tokens` "
        "and try again"
    )


def refusal(reason: str, pressure: str, details: dict) -> RequestError:
    """The refusal of a plan: unavailable under critical memory pressure, else too
    long (with the numbers in ``details``)."""
    if pressure == "critical":
        return ServiceUnavailable(reason, "memory_pressure", details)
    return ContextLengthExceeded(reason, details)


# Up to one counting piece of characters a request is tokenized whole and refused with
# its exact size (cheap at that size); past it only a lower bound is counted, in
# pieces, as far as the limit.
EXACT_REFUSAL_CHARS = COUNT_PIECE_CHARS


def refuse_unreadably_long(
    engine, request: ChatRequest, preset, max_tokens: int, limit: int
) -> None:
    """Refuse, before tokenizing anything, a request that cannot fit whatever it holds.

    What no trim can remove (the system messages and the newest message; everything
    when auto-trim is off) is bounded from below by its characters
    (`PromptTokenizer.fewest_tokens`); past the limit, tokenizing it would only cost
    memory (2.1 GiB for one 8 MiB message) to reach the same refusal.

    Raises:
        ContextLengthExceeded: The lower bound alone is over the limit.
    """
    messages = request.messages
    if preset.auto_trim and not getattr(request, "never_trim", False):
        messages = (*(m for m in messages[:-1] if m.role == "system"), messages[-1])
    if sum(len(m.content) for m in messages) <= EXACT_REFUSAL_CHARS:
        # Cheap to count exactly: the full path refuses with the exact prompt size,
        # which clients act on (Claude Code reads "prompt is too long: N tokens").
        return
    tokenizer = engine.tokenizer
    fewest = sum(tokenizer.fewest_tokens(m.content) for m in messages)
    if fewest + max_tokens <= limit:
        # Within the bound from characters: count the long texts in pieces, up to
        # what is left of the limit, before the whole prompt is rendered and
        # tokenized at once (which held gigabytes for a few MiB of text).
        fewest = 0
        for message in messages:
            fewest += tokenizer.count_at_least(
                message.content, max(0, limit - max_tokens - fewest)
            )
            if fewest + max_tokens > limit:
                break
    if fewest + max_tokens > limit:
        raise ContextLengthExceeded(
            f"The request needs at least {fewest:,} prompt tokens plus {max_tokens:,} "
            f"for the reply, over the limit of {limit:,} tokens"
            + (
                " (the newest message alone does not fit, so trimming cannot help)."
                if preset.auto_trim
                else "."
            ),
            {
                "prompt_tokens_at_least": fewest,
                "max_tokens": max_tokens,
                "effective_limit": limit,
                "auto_trim": preset.auto_trim,
            },
        )
