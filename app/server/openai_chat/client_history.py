"""A client's conversation as the server sees it, and the trims remembered across requests.

OpenAI clients resend the whole history on every request, trimmed or not. When the
server trims a conversation (a summary in place of its oldest messages, spliced into
the cache), it remembers "this client history prefix was replaced by summary S"; the
client's next request, which still starts with that same prefix, is mapped onto the
trimmed form again, so it matches the spliced cache token for token and the model sees
what it saw before. Prefixes are identified by a chain of hashes of whole messages, so
a client that edits an old message simply gets no summary for the changed part.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

from app.core.chat.model_messages import MERGED, summary_text
from app.server.openai_chat.openai_request import ChatMessage

# Summaries kept (a few KB each); the oldest unused ones go first.
MAX_TRIM_RECORDS = 512


def prefix_hashes(messages: tuple[ChatMessage, ...]) -> tuple[str, ...]:
    """``result[i]`` identifies ``messages[: i + 1]`` (every rendered field, in order)."""
    chain = hashlib.sha256()
    hashes = []
    for message in messages:
        chain.update(json.dumps(message.as_dict(), sort_keys=True).encode("utf-8"))
        hashes.append(chain.copy().hexdigest())
    return tuple(hashes)


@dataclass(frozen=True)
class ClientHistory:
    """The messages of one request and their prefix hashes.

    Attributes:
        messages: The client's messages, as sent.
        hashes: `prefix_hashes` of them.
        system_count: How many leading messages are system messages (kept always).
    """

    messages: tuple[ChatMessage, ...]
    hashes: tuple[str, ...]
    system_count: int

    @classmethod
    def of(cls, messages: tuple[ChatMessage, ...]) -> ClientHistory:
        """Build the history of a request's messages."""
        count = 0
        while count < len(messages) - 1 and messages[count].role == "system":
            count += 1
        return cls(messages, prefix_hashes(messages), count)


@dataclass(frozen=True)
class TrimRecord:
    """A summary standing for the client messages before ``covered``.

    Attributes:
        covered: Client messages ``[system_count, covered)`` are replaced by it.
        summary: The summary text.
        summary_tokens: Its tokens.
    """

    covered: int
    summary: str
    summary_tokens: int


@dataclass(frozen=True)
class ModelView:
    """What the model sees for a request: the client's history with any summary applied.

    Attributes:
        head: Leading system messages (plus the summary, when there is one).
        body: The remaining client messages, the last one being the new message.
        first_body_index: Index in the client's messages of ``body[0]``.
        system_count: Leading system messages of the client's history.
        record: The summary applied, or None.
    """

    head: tuple[ChatMessage, ...]
    body: tuple[ChatMessage, ...]
    first_body_index: int
    system_count: int
    record: TrimRecord | None

    def messages(self) -> list[dict]:
        """Every message as the engine renders it."""
        return [m.as_dict() for m in (*self.head, *self.body)]

    @property
    def summarized_messages(self) -> int:
        """Client messages the model sees only through the summary."""
        return self.first_body_index - self.system_count


def head_with_summary(
    systems: tuple[ChatMessage, ...], summary: str | None, style: str
) -> tuple[ChatMessage, ...]:
    """The leading messages of a trimmed view: system prompt(s), then the summary.

    With the ``merged`` style (templates that refuse a second system message) the
    summary is appended to the system prompt, as the app's chats do.
    """
    if summary is None:
        return systems
    text = summary_text(summary)
    if style == MERGED:
        merged = "\n\n".join([*(m.content for m in systems if m.content), text])
        return (ChatMessage("system", merged),)
    return (*systems, ChatMessage("system", text))


def model_view(
    history: ClientHistory, record: TrimRecord | None, style: str
) -> ModelView:
    """Apply ``record`` (or nothing) to a client's history."""
    systems = history.messages[: history.system_count]
    start = record.covered if record else history.system_count
    return ModelView(
        head=head_with_summary(systems, record.summary if record else None, style),
        body=history.messages[start:],
        first_body_index=start,
        system_count=history.system_count,
        record=record,
    )


class TrimRecords:
    """Summaries standing for client history prefixes; thread-safe, bounded LRU.

    Args:
        capacity: Records kept.
    """

    def __init__(self, capacity: int = MAX_TRIM_RECORDS):
        self.capacity = capacity
        self._records: OrderedDict[str, TrimRecord] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def lookup(self, history: ClientHistory) -> TrimRecord | None:
        """The record covering the longest prefix of ``history`` (the newest message
        excluded: a summary never stands for the message being answered)."""
        with self._lock:
            for end in range(len(history.messages) - 1, history.system_count, -1):
                record = self._records.get(history.hashes[end - 1])
                if record is not None and record.covered == end:
                    self._records.move_to_end(history.hashes[end - 1])
                    return record
        return None

    def remember(self, history: ClientHistory, record: TrimRecord) -> None:
        """Remember that ``record`` replaces ``history``'s messages before its end."""
        with self._lock:
            key = history.hashes[record.covered - 1]
            self._records[key] = record
            self._records.move_to_end(key)
            while len(self._records) > self.capacity:
                self._records.popitem(last=False)

    def clear(self) -> None:
        """Forget every record."""
        with self._lock:
            self._records.clear()
