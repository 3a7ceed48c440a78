"""Rendering and counting tokens from any thread, without the engine thread.

Tokenization needs no MLX: the chat template is Jinja and the tokenizer is Rust. Sending
it to the engine thread made a trimmed turn wait behind generation and cost ~18 blocking
round trips, most of them rendering the same prompt again. The session, the long-document
runner and the server call this object directly; it memoises what repeats within and
across turns: each message text's token count, and the last few rendered prompts.

The wrapped tokenizer is the mlx-lm `TokenizerWrapper` of the loaded model. Only its
stateless calls are used here (``apply_chat_template``, ``encode``); the streaming
detokenizer, which has state, stays with the engine thread.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from functools import cached_property
from typing import Any

from app.core.reasoning.markers import ReasoningFormat, detect

# Rendered prompts kept: a turn renders the same prompt a few times (plan, fit, send),
# and the next turn starts with the previous prompt as its prefix.
RENDER_CACHE_ENTRIES = 32
# Message texts whose counts are kept (a long conversation has a few thousand).
COUNT_CACHE_ENTRIES = 8192
# Longer texts are never kept: 32 renders of an 8 MiB request held gigabytes, and such
# a text is usually one that was refused.
MAX_CACHED_CHARS = 256 * 1024
# Texts longer than this are counted in pieces of about this many characters
# (`count_at_least`), so tokenizing one holds one piece's tokens at a time.
COUNT_PIECE_CHARS = 64 * 1024
# Normalizers may compose characters (NFC: "e" + accent -> "é"), so a text can have
# more characters than the tokens it becomes spell; this covers it with room to spare.
_NORMALIZER_SLACK = 4


class _LRU:
    """A small thread-safe least-recently-used map."""

    def __init__(self, capacity: int):
        self._capacity = capacity
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)


class PromptTokenizer:
    """Thread-safe, memoising chat-template rendering and token counting.

    Args:
        tokenizer: The model's tokenizer (mlx-lm ``TokenizerWrapper`` or a Hugging Face
            tokenizer with ``apply_chat_template`` and ``encode``).
    """

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer
        self._renders = _LRU(RENDER_CACHE_ENTRIES)
        self._counts = _LRU(COUNT_CACHE_ENTRIES)
        self._max_token_chars: int | None = None

    @cached_property
    def reasoning(self) -> ReasoningFormat:
        """How the model marks its reasoning (`markers.detect`; none for most)."""
        return detect(self._tokenizer)

    @property
    def chat_template(self) -> str | None:
        """The chat template's text, when it is one string."""
        template = getattr(self._tokenizer, "chat_template", None)
        return template if isinstance(template, str) else None

    def render(
        self,
        messages: Sequence[dict],
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
        template_args: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """Return the token ids of ``messages`` under the model's chat template.

        Args:
            messages: ``{"role", "content"}`` dicts (with ``tool_calls`` or
                ``tool_call_id`` for tool turns).
            add_generation_prompt: Append the assistant's turn header.
            tools: Tool definitions the template renders (OpenAI's function shape).
            template_args: Further template arguments (the thinking switch:
                `app.core.reasoning.thinking.template_arguments`).

        Returns:
            A new list (callers may change it); empty for no messages, which is
            what a conversation without a system prompt has before its first
            message (chat templates refuse to render an empty conversation).
        """
        if not messages:
            return []
        # Every field counts (tool calls, reasoning), not just role and text.
        key = (
            add_generation_prompt,
            json.dumps(list(messages), sort_keys=True),
            json.dumps(tools, sort_keys=True) if tools else None,
            json.dumps(dict(template_args or {}), sort_keys=True, default=str),
        )
        cached = self._renders.get(key)
        if cached is None:
            extra = {"tools": tools} if tools else {}
            text = self._tokenizer.apply_chat_template(
                self._with_template_fields(messages),
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                **extra,
                **dict(template_args or {}),
            )
            cached = tuple(self.encode(text))
            if len(text) <= MAX_CACHED_CHARS:
                self._renders.put(key, cached)
        return list(cached)

    def _with_template_fields(self, messages: Sequence[dict]) -> list[dict]:
        """The messages with reasoning also under the name this template reads.

        Swapless gives a reply's reasoning as ``reasoning_content`` (Qwen3's and most
        templates' name); gpt-oss's published template reads it from ``thinking``
        (and keeps it before a tool call), so there it is given under both names.
        """
        template = self.chat_template or ""
        if "message.thinking" not in template and "'thinking' in message" not in (
            template.replace('"', "'")
        ):
            return list(messages)
        return [
            {**m, "thinking": m["reasoning_content"]}
            if m.get("reasoning_content") and "thinking" not in m
            else m
            for m in messages
        ]

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens (not memoised)."""
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def count(self, text: str) -> int:
        """How many tokens ``text`` is, without special tokens (memoised per text)."""
        cached = self._counts.get(text)
        if cached is None:
            cached = len(self.encode(text))
            if len(text) <= MAX_CACHED_CHARS:
                self._counts.put(text, cached)
        return cached

    def count_at_least(self, text: str, cap: int) -> int:
        """A lower bound on the tokens of ``text``, exact up to ``cap``; tokenized in
        pieces, stopping once past ``cap``, and never memoised when long.

        The pieces are cut just before a whitespace that follows a non-space, where
        pre-tokenizers split anyway; each cut is still allowed to have added up to two
        tokens (a tokenizer's prefix space), which are taken off. So an 8 MiB message
        is refused after tokenizing about ``cap`` tokens' worth of it, holding one
        piece's tokens at a time, instead of 2.1 GiB for the whole (#31 point 15).

        Returns:
            The exact count when the text is short (one piece), else the count of
            the pieces read minus the slack of their cuts; a value over ``cap``
            means the text is longer than ``cap`` tokens.
        """
        if len(text) <= COUNT_PIECE_CHARS:
            return self.count(text)
        total = 0
        cuts = 0
        start = 0
        while start < len(text):
            end = _piece_end(text, start, COUNT_PIECE_CHARS)
            total += len(self.encode(text[start:end]))
            start = end
            if start < len(text):
                cuts += 1
            if total - 2 * cuts > cap:
                break
        return max(0, total - 2 * cuts)

    def fewest_tokens(self, text: str) -> int:
        """A lower bound on the tokens of ``text``, found without tokenizing it.

        No token spells more characters than the longest entry of the vocabulary
        (byte-level vocabularies spell one byte per character, and a character is at
        least one byte), so a text of ``n`` characters is at least ``n`` divided by
        that length (with slack for normalizers). A request whose bound is already
        past the limit is refused without the cost of tokenizing it: an 8 MiB
        message took 2.1 GiB to tokenize.
        """
        longest = self.max_token_chars
        return len(text) // (longest * _NORMALIZER_SLACK) if longest else 0

    @property
    def max_token_chars(self) -> int:
        """The most characters one token spells (0 when the vocabulary is unknown)."""
        if self._max_token_chars is None:
            try:
                vocab = self._tokenizer.get_vocab()
                self._max_token_chars = max((len(t) for t in vocab), default=0)
            except Exception:  # noqa: BLE001 - a tokenizer without a vocabulary: no bound
                self._max_token_chars = 0
        return self._max_token_chars

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids."""
        return self._tokenizer.decode(list(ids))

    @property
    def hits(self) -> int:
        """Renders and counts answered from memory (for tests and the benchmark)."""
        return self._renders.hits + self._counts.hits


def _piece_end(text: str, start: int, size: int) -> int:
    """Where a piece of about ``size`` characters from ``start`` ends: before the
    last whitespace that follows a non-space in its second half, else at ``size``."""
    end = start + size
    if end >= len(text):
        return len(text)
    for index in range(end, start + size // 2, -1):
        if text[index].isspace() and not text[index - 1].isspace():
            return index
    return end
