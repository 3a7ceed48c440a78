"""Documents read into a conversation segment by segment, resumable after a crash.

Reading a long document takes minutes; each segment's notes are saved in their own
transaction as soon as they are written, so an interruption loses at most the segment
in progress and `next_segment_index` tells the reader where to pick up.
"""

from __future__ import annotations

from app.core.store.base import inserted_id
from app.core.store.records import DOCUMENT_STATUSES, Document, DocumentSegment
from app.core.store.writers import WritersMixin


class DocumentsMixin(WritersMixin):
    """Document methods of `Store`."""

    def add_document(
        self,
        conversation_id: int,
        name: str,
        size_bytes: int,
        sha256: str,
        segment_tokens: int,
        segments_total: int | None = None,
    ) -> int:
        """Record a document the conversation starts reading (status ``reading``).

        Args:
            conversation_id: The conversation.
            name: File name shown to the user.
            size_bytes: File size.
            sha256: Hex digest of the file.
            segment_tokens: Tokens per segment.
            segments_total: Number of segments, if already known.

        Returns:
            The new document's id.

        Raises:
            ValueError: ``segment_tokens`` or ``segments_total`` is not positive.
            NotFoundError: No conversation has that id.
        """
        if segment_tokens <= 0:
            raise ValueError(f"segment_tokens must be positive, not {segment_tokens}")
        if segments_total is not None and segments_total <= 0:
            raise ValueError(f"segments_total must be positive, not {segments_total}")
        now = self._now()
        with self._writing() as db:
            self._row(db, "conversations", conversation_id, "Conversation")
            document_id = inserted_id(
                db.table("documents").insert(
                    {
                        "conversation_id": conversation_id,
                        "name": name,
                        "size_bytes": size_bytes,
                        "sha256": sha256,
                        "segment_tokens": segment_tokens,
                        "segments_total": segments_total,
                        "status": "reading",
                        "created_at": now,
                        "writer_id": self._writer_id(db),
                    }
                )
            )
            self._touch(db, conversation_id, now)
            return document_id

    def get_document(self, document_id: int) -> Document:
        """Return one document.

        Raises:
            NotFoundError: No document has that id.
        """
        with self._reading() as db:
            return Document.from_row(
                self._row(db, "documents", document_id, "Document")
            )

    def documents(self, conversation_id: int) -> list[Document]:
        """Return the documents of a conversation, oldest first."""
        with self._reading() as db:
            rows = db.query(
                "SELECT * FROM documents WHERE conversation_id = ? ORDER BY id",
                [conversation_id],
            )
            return [Document.from_row(row) for row in rows]

    def find_document(self, conversation_id: int, sha256: str) -> Document | None:
        """Return the latest document of a conversation with this digest, to resume it."""
        with self._reading() as db:
            rows = list(
                db.query(
                    "SELECT * FROM documents WHERE conversation_id = ? AND sha256 = ?"
                    " ORDER BY id DESC LIMIT 1",
                    [conversation_id, sha256],
                )
            )
        return Document.from_row(rows[0]) if rows else None

    def save_segment(
        self,
        document_id: int,
        segment_index: int,
        token_count: int,
        notes: str,
        *,
        tokens_per_s: float | None = None,
        peak_memory_bytes: int | None = None,
        kv_bytes: int | None = None,
    ) -> int:
        """Save the notes of one finished segment in one transaction.

        The document becomes ``complete`` with its last segment, and ``reading``
        again if it had been interrupted.

        Args:
            document_id: The document.
            segment_index: Must equal `next_segment_index` (segments are saved in order).
            token_count: Tokens of the segment's text.
            notes: The per-segment summary.
            tokens_per_s: Speed while reading it.
            peak_memory_bytes: Peak memory while reading it.
            kv_bytes: KV-cache size while reading it.

        Returns:
            The new segment row's id.

        Raises:
            ValueError: ``segment_index`` is not the next one, or is past the end.
            NotFoundError: No document has that id.
        """
        now = self._now()
        with self._writing() as db:
            document = self._row(db, "documents", document_id, "Document")
            expected = self._next_index(document_id)
            if segment_index != expected:
                raise ValueError(
                    f"document {document_id} expects segment {expected} next, "
                    f"not {segment_index}"
                )
            total = document["segments_total"]
            if total is not None and segment_index >= total:
                raise ValueError(
                    f"document {document_id} has {total} segments; "
                    f"index {segment_index} is past the end"
                )
            segment_id = inserted_id(
                db.table("document_segments").insert(
                    {
                        "document_id": document_id,
                        "segment_index": segment_index,
                        "token_count": token_count,
                        "notes": notes,
                        "tokens_per_s": tokens_per_s,
                        "peak_memory_bytes": peak_memory_bytes,
                        "kv_bytes": kv_bytes,
                        "created_at": now,
                    }
                )
            )
            done = total is not None and segment_index + 1 == total
            db.table("documents").update(
                document_id,
                {
                    "status": "complete" if done else "reading",
                    "error": None,
                    "writer_id": None if done else self._writer_id(db),
                },
            )
            self._touch(db, document["conversation_id"], now)
            return segment_id

    def next_segment_index(self, document_id: int) -> int:
        """Return the index of the first segment not saved yet (0 for a new document).

        Raises:
            NotFoundError: No document has that id.
        """
        with self._reading() as db:
            self._row(db, "documents", document_id, "Document")
            return self._next_index(document_id)

    def document_segments(self, document_id: int) -> list[DocumentSegment]:
        """Return the saved segments of a document in order."""
        with self._reading() as db:
            rows = db.query(
                "SELECT * FROM document_segments WHERE document_id = ? ORDER BY segment_index",
                [document_id],
            )
            return [DocumentSegment.from_row(row) for row in rows]

    def set_document_status(
        self, document_id: int, status: str, error: str | None = None
    ) -> None:
        """Set a document's status, e.g. ``error`` with the reason.

        Raises:
            ValueError: Unknown status.
            NotFoundError: No document has that id.
        """
        if status not in DOCUMENT_STATUSES:
            raise ValueError(
                f"status must be one of {', '.join(DOCUMENT_STATUSES)}, not {status!r}"
            )
        with self._writing() as db:
            self._row(db, "documents", document_id, "Document")
            writer = self._writer_id(db) if status == "reading" else None
            db.table("documents").update(
                document_id, {"status": status, "error": error, "writer_id": writer}
            )

    def _next_index(self, document_id: int) -> int:
        row = self._db.execute(
            "SELECT COALESCE(MAX(segment_index) + 1, 0) FROM document_segments"
            " WHERE document_id = ?",
            [document_id],
        ).fetchone()
        return row[0]
