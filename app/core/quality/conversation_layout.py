"""Token layouts of probe conversations: where a trim cuts, where an answer sits.

A trim keeps the system prompt and the newest turns and puts a summary where the
oldest turns were. In token ids (the chat template applied): the untrimmed context is
``head + dropped + kept``; the trimmed one is ``head + summary + kept``. A splice keeps
the cache entries of ``head`` and ``kept`` and computes only the summary's; a rebuild
prefills the trimmed context afresh. Pure: it takes the model's ``render`` function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.core.chat.model_messages import build_messages
from app.core.token_ids import common_prefix_length

Render = Callable[[list[dict], bool], list[int]]


@dataclass(frozen=True)
class TrimLayout:
    """The ids of both contexts and the splice coordinates.

    Attributes:
        untrimmed_ids: System prompt, dropped turns and kept turns.
        trimmed_ids: System prompt, summary and kept turns.
        keep: Entries kept at the start (the shared head).
        drop_until: Index in ``untrimmed_ids`` of the first kept-turn token.
        insert_ids: The summary's ids, which replace ``untrimmed_ids[keep:drop_until]``.
    """

    untrimmed_ids: list[int]
    trimmed_ids: list[int]
    keep: int
    drop_until: int
    insert_ids: list[int]

    @property
    def kept_tokens(self) -> int:
        """Tokens of the kept turns."""
        return len(self.untrimmed_ids) - self.drop_until


class NotAdditive(ValueError):
    """The chat template does not render a conversation as the sum of its turns."""


def trim_layout(
    render: Render,
    system_prompt: str,
    dropped: Sequence[tuple[str, str]],
    kept: Sequence[tuple[str, str]],
    summary: str,
    style: str,
) -> TrimLayout:
    """Lay out a trim of ``dropped`` (replaced by ``summary``) before ``kept``.

    Raises:
        NotAdditive: When rendering the turns one after another does not give the
            rendered whole (splicing is impossible with such a template).
    """
    old = build_messages(system_prompt, [], [*dropped, *kept], style=style)
    new = build_messages(system_prompt, [summary], list(kept), style=style)
    head_count = len(new) - len(kept)
    old_ids = render(old, False)
    head_ids = render(new[:head_count], False)
    new_ids = render(new, False)
    # The kept turns are where the two contexts end alike. Not len(render(old head)):
    # a reasoning template (Qwen3's) writes an empty thinking block into the reply
    # that ends a rendering, which that reply lacks once more turns follow.
    kept_ids = new_ids[len(head_ids) :]
    drop_until = len(old_ids) - len(kept_ids)
    if (
        new_ids[: len(head_ids)] != head_ids
        or drop_until < 0
        or old_ids[drop_until:] != kept_ids
    ):
        raise NotAdditive("the chat template does not render messages additively")
    keep = min(common_prefix_length(old_ids, head_ids), drop_until)
    return TrimLayout(
        untrimmed_ids=old_ids,
        trimmed_ids=new_ids,
        keep=keep,
        drop_until=drop_until,
        insert_ids=head_ids[keep:],
    )


def continuation(
    render: Render, messages: list[dict], question: Sequence[dict]
) -> tuple[list[int], list[int]]:
    """The ids a question adds after ``messages``, split before its reply.

    Args:
        render: The model's renderer.
        messages: The conversation so far (as rendered into the cache).
        question: The user's question and the assistant's reply.

    Returns:
        ``(question_ids, reply_ids)``: the tokens after the rendered ``messages`` up to
        the reply's first token, and the reply's tokens (end-of-turn excluded). A
        template that renders the last reply differently once a question follows
        (Qwen3 drops the empty thinking block it gives a final reply) makes
        ``question_ids`` start where the two renderings part: the part of the context
        both share, then the question as the model sees it (``len(messages)`` ids
        are then fewer than the rendered context).
    """
    context = render(messages, False)
    asked = render([*messages, question[0]], True)
    whole = render([*messages, *question], False)
    if whole[: len(asked)] != asked:
        raise NotAdditive("the chat template does not render messages additively")
    shared = common_prefix_length(context, asked)
    return asked[shared:], whole[len(asked) :]


def reply_start(
    encode: Callable[[str], list[int]], reply_ids: list[int], reply: str
) -> int:
    """How many of ``reply_ids`` the template writes before the reply's own text.

    Zero for most templates; a reasoning template (Qwen3's) renders a finished reply
    as ``<think>\n\n</think>\n\n`` + text, and those tokens come first.
    """
    text_ids = encode(reply)
    if not text_ids or reply_ids[: len(text_ids[:1])] == text_ids[:1]:
        return 0
    for index, token in enumerate(reply_ids):
        if token == text_ids[0] and reply_ids[index : index + 2] == text_ids[:2]:
            return index
    return 0


def answer_span(
    encode: Callable[[str], list[int]], reply_ids: list[int], reply: str, answer: str
) -> tuple[int, int]:
    """Where ``answer`` sits in the reply's ids, as ``(start, end)`` indices.

    The reply is tokenized as a whole (``reply_ids``); the span starts after the ids
    the reply's text before the answer shares with them and ends after those the text
    up to the answer's end shares, so a tokenizer that merges the space before the
    answer into it is scored on the tokens it really writes.

    Raises:
        ValueError: If ``answer`` is not in ``reply`` or covers no token.
    """
    at = reply.rindex(answer)
    start = common_prefix_length(encode(reply[:at].rstrip()), reply_ids)
    end = common_prefix_length(encode(reply[: at + len(answer)]), reply_ids)
    if end <= start:
        raise ValueError(f"the answer {answer!r} covers no token of the reply")
    return start, end
