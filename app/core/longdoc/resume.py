"""Find an interrupted reading of the same document to continue instead of restarting.

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
from app.core.longdoc.segmenter import Segment
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
    segments: list[Segment],
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
    segments: list[Segment],
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
