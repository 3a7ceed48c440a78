"""A conversation's stopped reading, found in the store, for the card's Resume button.

Each segment's notes are saved as they are written and a stopped, killed or crashed
reading is left ``interrupted`` (crash recovery marks those of a process that is gone),
so after a restart the app can offer to continue it: this finds the conversation's
last unfinished reading, how far it got, the question it answers and where its file
was (`known_files`). Resuming itself goes through the runner, which checks the file's
digest and cut before it reuses any notes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.core.longdoc.known_files import known_file
from app.core.store import Store


@dataclass(frozen=True)
class StoppedReading:
    """An unfinished reading of a conversation.

    Attributes:
        conversation_id: The conversation.
        document_id: The stored document.
        name: The file's name.
        path: Where the file was last read from, or None when unknown.
        question: The question the notes were written for.
        segments: Segments it was cut into (1 for a whole read).
        saved: Segments whose notes are saved.
        whole: It was a whole read (nothing to resume; it can be read in segments).
    """

    conversation_id: int
    document_id: int
    name: str
    path: Path | None
    question: str
    segments: int
    saved: int
    whole: bool


def stopped_reading(store: Store, conversation_id: int) -> StoppedReading | None:
    """The conversation's last reading if it was stopped before its answer, else None."""
    documents = store.documents(conversation_id)
    if not documents:
        return None
    document = documents[-1]
    if document.status != "interrupted":
        return None
    later = [
        m
        for m in store.messages(conversation_id, include_trimmed=True)
        if m.created_at >= document.created_at
    ]
    if any(m.role == "assistant" and m.state == "complete" for m in later):
        return None
    requests = [m for m in later if m.role == "user"]
    prefix = f"Document: {document.name}\n\n"
    if not requests or not requests[0].content.startswith(prefix):
        return None
    saved = len(store.document_segments(document.id))
    total = document.segments_total or 1
    return StoppedReading(
        conversation_id=conversation_id,
        document_id=document.id,
        name=document.name,
        path=known_file(document.sha256),
        question=requests[0].content[len(prefix) :],
        segments=total,
        saved=saved,
        whole=total == 1 and saved == 0,
    )
