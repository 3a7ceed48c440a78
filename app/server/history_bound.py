"""Bounding what a client's older history costs before it is rendered whole.

A request waits on its worker thread with its history rendered and tokenized: one
8 MiB *older* message (one the trim would drop anyway) cost about 0.5 GiB there
before the request's first event (issue #31, point 15). The newest message and the
system messages are already bounded before tokenizing (`completion`'s
``_refuse_unreadably_long``); this module bounds the rest the same way:

* each older message's texts are first bounded from their characters
  (`PromptTokenizer.fewest_tokens`): one already past what is left of the bound is
  not tokenized at all;
* otherwise it is counted in pieces of 64 Ki characters, stopping once past what is
  left (`PromptTokenizer.count_at_least`); newest first, since a trim keeps the
  newest messages and drops the oldest.

When the counts stay within `RENDER_WHOLE_FACTOR` times the limit, the history is
rendered whole as before (a conversation just over its limit keeps its exact prompt,
so its cache is continued and spliced). Past that, the first trim is planned from
these counts and carried out without rendering the dropped messages: an extractive
summary (bounded per message) and a rebuild of the kept part.

`tokenize_need` is what this work may hold at once, counted in the request's ledger
(`app.server.admission`) while it waits.

Imports: the engine's prompt tokenizer (any thread) and the server's history types.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.engine.prompt_tokenizer import COUNT_PIECE_CHARS, PromptTokenizer
from app.server.openai_chat.client_history import ModelView
from app.server.openai_chat.openai_request import ChatMessage

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
