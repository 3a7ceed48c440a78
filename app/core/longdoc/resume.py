"""Find an interrupted reading of the same document to continue, or record a new one.

Each segment's notes are saved as soon as they are written, so a killed or cancelled
run loses at most one segment. A stored reading is continued only when continuing it
gives what a fresh run would: the same file (SHA-256) in the same conversation, cut the
same way (same tokens per segment, same segments, same token counts — a different
tokenizer cuts differently), asked the same question (the notes were written for it),
and not answered yet (a finished run is a new question, read afresh).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.longdoc.prompts import request_text
from app.core.longdoc.segmenter import Segment, SegmentSpan
from app.core.store import Document, DocumentSegment, Store

RECENT_CONVERSATIONS = 20
"""Conversations searched for an unfinished reading when none is named (the CLI)."""


@dataclass(frozen=True)
class Resumable:
    """A stored reading that can be continued.

    Attributes:
        document: The stored document.
        saved: Its saved segments, in order.
    """

    document: Document
    saved: tuple[DocumentSegment, ...]

    @property
    def next_segment(self) -> int:
        """Index of the first segment without notes."""
        return len(self.saved)


def find_resumable(
    store: Store,
    conversation_id: int,
    sha256: str,
    segment_tokens: int,
    segments: list[Segment | SegmentSpan],
    question: str,
) -> Resumable | None:
    """Return the conversation's unfinished reading of this document, if it can go on.

    Args:
        store: The store.
        conversation_id: The conversation.
        sha256: The file's digest.
        segment_tokens: Tokens per segment the new run cuts at.
        segments: The new run's segments.
        question: The new run's question.
    """
    document = store.find_document(conversation_id, sha256)
    if (
        document is None
        or document.segment_tokens != segment_tokens
        or document.segments_total != len(segments)
    ):
        return None
    saved = tuple(store.document_segments(document.id))
    if any(s.token_count != segments[s.segment_index].tokens for s in saved):
        return None
    later = [
        m
        for m in store.messages(conversation_id, include_trimmed=True)
        if m.created_at >= document.created_at
    ]
    requests = [m for m in later if m.role == "user"]
    if not requests or requests[0].content != request_text(document.name, question):
        return None
    if any(m.role == "assistant" and m.state == "complete" for m in later):
        return None
    return Resumable(document, saved)


def find_resumable_anywhere(
    store: Store,
    sha256: str,
    segment_tokens: int,
    segments: list[Segment | SegmentSpan],
    question: str,
) -> Resumable | None:
    """Like `find_resumable`, over the most recently updated conversations."""
    for conversation in store.list_conversations(limit=RECENT_CONVERSATIONS):
        found = find_resumable(
            store, conversation.id, sha256, segment_tokens, segments, question
        )
        if found is not None:
            return found
    return None


def find_resumable_reading(
    store: Store, document, plan, conversation_id: int | None
) -> Resumable | None:
    """The unfinished reading a run of ``plan`` continues, if any.

    Args:
        store: The store.
        document: The `DocumentText`.
        plan: The run's `RunPlan`.
        conversation_id: The conversation, or None to look in the recent ones.
    """
    args = (
        document.sha256,
        plan.stored_segment_tokens,
        list(plan.segments),
        plan.question,
    )
    if conversation_id is None:
        return find_resumable_anywhere(store, *args)
    return find_resumable(store, conversation_id, *args)


def record_reading(
    store: Store, engine, preset, document, plan, conversation_id: int | None
) -> tuple[int, int]:
    """Store a new reading and the user's request; return (conversation, document).

    Args:
        store: The store.
        engine: The engine (the model's folder names a new conversation's model,
            its tokenizer counts the request).
        preset: The run's `Preset` (a new conversation keeps it).
        document: The `DocumentText`.
        plan: The run's `RunPlan`.
        conversation_id: The conversation, or None for a new one.
    """
    if conversation_id is None:
        conversation_id = store.create_conversation(
            model=engine.model_info.folder,
            preset=preset.name,
            settings=preset.to_dict(),
            system_prompt=preset.system_prompt,
        )
    document_id = store.add_document(
        conversation_id,
        document.name,
        document.size_bytes,
        document.sha256,
        plan.stored_segment_tokens,
        len(plan.segments),
    )
    request = request_text(document.name, plan.question)
    store.add_message(
        conversation_id, "user", request, token_count=engine.count_tokens(request)
    )
    store.auto_title(conversation_id)
    return conversation_id, document_id
