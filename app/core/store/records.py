"""The typed rows the store hands to its callers.

Callers never see sqlite rows or dicts: every read returns one of these frozen
dataclasses, so the UI and the CLI can rely on field names and types, and a schema
change shows up here instead of at a distance. This module also owns the one
timestamp format of the database.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

Role = Literal["system", "user", "assistant"]
MessageState = Literal["complete", "generating", "interrupted", "error"]
SummaryMethod = Literal["model", "extractive"]
TrimCause = Literal["limit", "pressure", "critical"]
DocumentStatus = Literal["reading", "complete", "interrupted", "error"]

ROLES: tuple[Role, ...] = ("system", "user", "assistant")
MESSAGE_STATES: tuple[MessageState, ...] = (
    "complete",
    "generating",
    "interrupted",
    "error",
)
SUMMARY_METHODS: tuple[SummaryMethod, ...] = ("model", "extractive")
TRIM_CAUSES: tuple[TrimCause, ...] = ("limit", "pressure", "critical")
"""Why a trim happened: the turn would pass the limit, memory pressure made it come
early, or pressure was critical."""
DOCUMENT_STATUSES: tuple[DocumentStatus, ...] = (
    "reading",
    "complete",
    "interrupted",
    "error",
)

# Fixed width and UTC, so the strings sort in time order inside SQLite too.
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def format_time(moment: datetime) -> str:
    """Return the database form of an aware datetime (ISO-8601, UTC, microseconds)."""
    if moment.tzinfo is None:
        raise ValueError(
            f"timestamp {moment!r} has no time zone; pass an aware datetime"
        )
    return moment.astimezone(UTC).strftime(_TIME_FORMAT)


def parse_time(text: str) -> datetime:
    """Return the aware UTC datetime stored as ``text`` by `format_time`."""
    return datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=UTC)


def utc_now() -> datetime:
    """Return the current time in UTC (the store's default clock)."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class Conversation:
    """One conversation and the settings it runs with.

    Attributes:
        id: Primary key.
        title: Shown in the conversation list; empty until named or auto-titled.
        created_at: When the conversation was created.
        updated_at: When it last gained content (a message, summary or document);
            renaming or changing settings does not move it up the list.
        model: Model folder path or Hugging Face repo id, or None if not chosen yet.
        preset: Name of the preset it was started from, or None.
        settings: The preset's settings as this conversation uses them, copied so
            that editing the preset later does not rewrite history.
        system_prompt: Sent first to the model; empty for none.
    """

    id: int
    title: str
    created_at: datetime
    updated_at: datetime
    model: str | None
    preset: str | None
    settings: dict[str, Any] = field(hash=False)
    system_prompt: str

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Conversation:
        """Build from a ``conversations`` row."""
        return cls(
            id=row["id"],
            title=row["title"],
            created_at=parse_time(row["created_at"]),
            updated_at=parse_time(row["updated_at"]),
            model=row["model"],
            preset=row["preset"],
            settings=json.loads(row["settings"]),
            system_prompt=row["system_prompt"],
        )


@dataclass(frozen=True)
class ReplyStats:
    """Measurements of one generated reply; every field is optional.

    Attributes:
        prompt_tokens: Tokens in the prompt that produced the reply.
        generated_tokens: Tokens the model generated.
        reused_tokens: Prompt tokens served from the prefix (KV) cache.
        ttft_s: Seconds from request to first token.
        tokens_per_s: Generation speed.
        peak_memory_bytes: Peak memory while generating.
        kv_bits: KV-cache quantisation bits, or None for unquantised.
        reasoning_tokens: Tokens of a reasoning model's thoughts in the reply.
        reasoning_s: Seconds the model spent reasoning.
    """

    prompt_tokens: int | None = None
    generated_tokens: int | None = None
    reused_tokens: int | None = None
    ttft_s: float | None = None
    tokens_per_s: float | None = None
    peak_memory_bytes: int | None = None
    kv_bits: int | None = None
    reasoning_tokens: int | None = None
    reasoning_s: float | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ReplyStats:
        """Build from the stats columns of a ``messages`` row (or an export dict)."""
        return cls(**{name: row.get(name) for name in STATS_COLUMNS})

    def as_dict(self) -> dict[str, Any]:
        """Return the stats keyed by column name."""
        return {name: getattr(self, name) for name in STATS_COLUMNS}


STATS_COLUMNS: tuple[str, ...] = (
    "prompt_tokens",
    "generated_tokens",
    "reused_tokens",
    "ttft_s",
    "tokens_per_s",
    "peak_memory_bytes",
    "kv_bits",
    "reasoning_tokens",
    "reasoning_s",
)


@dataclass(frozen=True)
class RecalledMessage:
    """A trimmed message put back, verbatim, before a new user message.

    Attributes:
        message_id: The original message.
        role: ``user`` or ``assistant``.
        text: Its text (cut at a sentence when it alone passed the recall budget).
        cut: Whether ``text`` was cut.
    """

    message_id: int
    role: str
    text: str
    cut: bool = False

    def to_json(self) -> dict[str, Any]:
        """What `swapless chat --json` and the server report."""
        return {"message_id": self.message_id, "role": self.role, "text": self.text}


def recalled_to_json(recalled: tuple[RecalledMessage, ...] | list) -> str | None:
    """The stored form of a recall block (NULL when nothing was recalled)."""
    if not recalled:
        return None
    return json.dumps([{**r.to_json(), "cut": r.cut} for r in recalled])


def recalled_from_json(text: str | None) -> tuple[RecalledMessage, ...]:
    """Read a stored recall block (an empty tuple for NULL)."""
    if not text:
        return ()
    return tuple(
        RecalledMessage(
            int(item["message_id"]),
            str(item["role"]),
            str(item["text"]),
            bool(item.get("cut", False)),
        )
        for item in json.loads(text)
    )


@dataclass(frozen=True)
class Message:
    """One message of a conversation.

    Attributes:
        id: Primary key; ids grow with time, so they give the message order.
        conversation_id: The conversation it belongs to.
        role: ``system``, ``user`` or ``assistant``.
        content: The text (partial while ``generating`` or after an interruption).
        created_at: When it was added (for replies: when generation began).
        token_count: Tokens of ``content`` if known.
        state: ``complete``, ``generating``, ``interrupted`` or ``error``.
        stats: Measurements of a generated reply (all None for user messages).
        summary_id: The summary that replaced it in the model's context, or None.
        error: Why generation failed (state ``error``), else None.
        reasoning: A reasoning model's thoughts before ``content`` (empty if none);
            never searched, summarised or shown as the answer.
        recalled: Trimmed originals put back before this user message (recall).
        pinned: Kept verbatim after the summary once trimmed.
    """

    id: int
    conversation_id: int
    role: Role
    content: str
    created_at: datetime
    token_count: int | None
    state: MessageState
    stats: ReplyStats
    summary_id: int | None
    error: str | None
    reasoning: str = ""
    recalled: tuple[RecalledMessage, ...] = ()
    pinned: bool = False

    @property
    def trimmed(self) -> bool:
        """Whether a summary replaced this message in the model's context."""
        return self.summary_id is not None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Message:
        """Build from a ``messages`` row."""
        return cls(
            id=row["id"],
            conversation_id=row["conversation_id"],
            role=row["role"],
            content=row["content"],
            created_at=parse_time(row["created_at"]),
            token_count=row["token_count"],
            state=row["state"],
            stats=ReplyStats.from_row(row),
            summary_id=row["summary_id"],
            error=row["error"],
            reasoning=row.get("reasoning") or "",
            recalled=recalled_from_json(row.get("recalled")),
            pinned=bool(row.get("pinned")),
        )


@dataclass(frozen=True)
class Summary:
    """A summary that replaces a span of messages in the model's context.

    Attributes:
        id: Primary key.
        conversation_id: The conversation it belongs to.
        first_message_id: First message of the replaced span.
        last_message_id: Last message of the replaced span (inclusive).
        content: The summary text sent to the model.
        token_count: Tokens of ``content`` if known.
        method: ``model`` (written by the LLM) or ``extractive`` (fallback).
        created_at: When it was written.
        superseded_by: The later summary that folded this one in, or None.
        cause: Why the trim happened (one of `TRIM_CAUSES`), or None for
            summaries written before Swapless recorded it.
        limit_tokens: The conversation's limit at the trim, if recorded.
        trim_at_tokens: Tokens at which that trim was due (below the limit when memory
            pressure made it come early), if recorded.
    """

    id: int
    conversation_id: int
    first_message_id: int
    last_message_id: int
    content: str
    token_count: int | None
    method: SummaryMethod
    created_at: datetime
    superseded_by: int | None
    cause: TrimCause | None = None
    limit_tokens: int | None = None
    trim_at_tokens: int | None = None

    @property
    def active(self) -> bool:
        """Whether this summary is still part of the model's context."""
        return self.superseded_by is None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Summary:
        """Build from a ``summaries`` row."""
        return cls(
            id=row["id"],
            conversation_id=row["conversation_id"],
            first_message_id=row["first_message_id"],
            last_message_id=row["last_message_id"],
            content=row["content"],
            token_count=row["token_count"],
            method=row["method"],
            created_at=parse_time(row["created_at"]),
            superseded_by=row["superseded_by"],
            cause=row.get("cause"),
            limit_tokens=row.get("limit_tokens"),
            trim_at_tokens=row.get("trim_at_tokens"),
        )


@dataclass(frozen=True)
class Document:
    """A document read into a conversation segment by segment.

    Attributes:
        id: Primary key.
        conversation_id: The conversation it was added to.
        name: File name as the user chose it.
        size_bytes: File size.
        sha256: Hex digest of the file, to recognise it when added again.
        segment_tokens: Tokens per segment it was split into.
        segments_total: Number of segments, if known.
        status: ``reading``, ``complete``, ``interrupted`` or ``error``.
        created_at: When it was added.
        error: Why reading failed (status ``error``), else None.
    """

    id: int
    conversation_id: int
    name: str
    size_bytes: int
    sha256: str
    segment_tokens: int
    segments_total: int | None
    status: DocumentStatus
    created_at: datetime
    error: str | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Document:
        """Build from a ``documents`` row."""
        return cls(
            id=row["id"],
            conversation_id=row["conversation_id"],
            name=row["name"],
            size_bytes=row["size_bytes"],
            sha256=row["sha256"],
            segment_tokens=row["segment_tokens"],
            segments_total=row["segments_total"],
            status=row["status"],
            created_at=parse_time(row["created_at"]),
            error=row["error"],
        )


@dataclass(frozen=True)
class DocumentSegment:
    """The notes taken on one segment of a document.

    Attributes:
        id: Primary key.
        document_id: The document it belongs to.
        segment_index: 0-based position in the document.
        token_count: Tokens of the segment's text.
        notes: The per-segment summary.
        tokens_per_s: Speed while reading it.
        peak_memory_bytes: Peak memory while reading it.
        kv_bytes: KV-cache size while reading it.
        created_at: When the notes were saved.
    """

    id: int
    document_id: int
    segment_index: int
    token_count: int
    notes: str
    tokens_per_s: float | None
    peak_memory_bytes: int | None
    kv_bytes: int | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> DocumentSegment:
        """Build from a ``document_segments`` row."""
        return cls(
            id=row["id"],
            document_id=row["document_id"],
            segment_index=row["segment_index"],
            token_count=row["token_count"],
            notes=row["notes"],
            tokens_per_s=row["tokens_per_s"],
            peak_memory_bytes=row["peak_memory_bytes"],
            kv_bytes=row["kv_bytes"],
            created_at=parse_time(row["created_at"]),
        )


@dataclass(frozen=True)
class SearchHit:
    """One full-text search result.

    Attributes:
        conversation_id: The conversation that matched.
        conversation_title: Its title.
        message_id: The matching message, or None when the title matched.
        role: Role of the matching message, or None for a title hit.
        snippet: Matching text with hits wrapped in ``[`` and ``]``.
    """

    conversation_id: int
    conversation_title: str
    message_id: int | None
    role: Role | None
    snippet: str


@dataclass(frozen=True)
class ModelContext:
    """What is sent to the model for a conversation, in order.

    Attributes:
        system_prompt: The conversation's system prompt (may be empty).
        entries: Active summaries and the messages no summary covers, in
            conversation order; a summary stands where its span began.
        pinned: Pinned messages a summary covers, oldest first: sent verbatim
            after the summaries.
    """

    system_prompt: str
    entries: tuple[Summary | Message, ...]
    pinned: tuple[Message, ...] = ()

    @property
    def summaries(self) -> tuple[Summary, ...]:
        """The active summaries among the entries."""
        return tuple(e for e in self.entries if isinstance(e, Summary))

    @property
    def messages(self) -> tuple[Message, ...]:
        """The uncovered messages among the entries."""
        return tuple(e for e in self.entries if isinstance(e, Message))
