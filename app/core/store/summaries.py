"""Summaries that replace spans of old messages, and the context sent to the model.

When a conversation outgrows its budget, the trimming policy summarises a span of
messages; `add_summary` records that in one transaction, so the model's context
(`context_for_model`) and the history the user reads (`Store.messages` with
``include_trimmed=True``) can never disagree about which messages a summary replaced.
Active summaries never overlap: a new summary that touches older ones folds them in.
"""

from __future__ import annotations

from sqlite_utils import Database

from app.core.store.base import StoreBase, inserted_id
from app.core.store.records import (
    SUMMARY_METHODS,
    TRIM_CAUSES,
    Message,
    ModelContext,
    Summary,
)


class SummariesMixin(StoreBase):
    """Summary and model-context methods of `Store`."""

    def add_summary(
        self,
        conversation_id: int,
        first_message_id: int,
        last_message_id: int,
        content: str,
        token_count: int | None,
        method: str,
        *,
        cause: str | None = None,
        limit_tokens: int | None = None,
        trim_at_tokens: int | None = None,
    ) -> int:
        """Record a summary that replaces messages in the model's context.

        Every message of the conversation with an id from ``first_message_id`` to
        ``last_message_id`` is marked as covered by the new summary. Active summaries
        inside or overlapping the span are folded in (marked ``superseded_by``); the
        span is widened to cover all of them, so no message loses its coverage.

        Args:
            conversation_id: The conversation.
            first_message_id: First message replaced.
            last_message_id: Last message replaced (inclusive).
            content: The summary text.
            token_count: Tokens of ``content`` if known.
            method: ``model`` or ``extractive``.
            cause: Why the trim happened (`TRIM_CAUSES`), if known.
            limit_tokens: The conversation's limit at the trim.
            trim_at_tokens: Tokens at which the trim was due.

        Returns:
            The new summary's id.

        Raises:
            ValueError: Bad method, reversed span, a message that is not in the
                conversation, or a reply in the span that is still generating.
            NotFoundError: No conversation has that id.
        """
        if method not in SUMMARY_METHODS:
            raise ValueError(
                f"method must be one of {', '.join(SUMMARY_METHODS)}, not {method!r}"
            )
        if cause is not None and cause not in TRIM_CAUSES:
            raise ValueError(
                f"cause must be one of {', '.join(TRIM_CAUSES)}, not {cause!r}"
            )
        if first_message_id > last_message_id:
            raise ValueError(
                f"first_message_id {first_message_id} is after "
                f"last_message_id {last_message_id}"
            )
        now = self._now()
        with self._writing() as db:
            self._row(db, "conversations", conversation_id, "Conversation")
            for message_id in (first_message_id, last_message_id):
                self._require_in_conversation(db, conversation_id, message_id)
            first, last, folded = _widen_over_active(
                db, conversation_id, first_message_id, last_message_id
            )
            generating = db.execute(
                "SELECT id FROM messages WHERE conversation_id = ? AND id BETWEEN ? AND ?"
                " AND state = 'generating'",
                [conversation_id, first, last],
            ).fetchone()
            if generating:
                raise ValueError(
                    f"message {generating[0]} in the span is still generating"
                )
            summary_id = inserted_id(
                db.table("summaries").insert(
                    {
                        "conversation_id": conversation_id,
                        "first_message_id": first,
                        "last_message_id": last,
                        "content": content,
                        "token_count": token_count,
                        "method": method,
                        "created_at": now,
                        "cause": cause,
                        "limit_tokens": limit_tokens,
                        "trim_at_tokens": trim_at_tokens,
                    }
                )
            )
            for old_id in folded:
                db.table("summaries").update(old_id, {"superseded_by": summary_id})
            db.execute(
                "UPDATE messages SET summary_id = ?"
                " WHERE conversation_id = ? AND id BETWEEN ? AND ?",
                [summary_id, conversation_id, first, last],
            )
            self._touch(db, conversation_id, now)
            return summary_id

    def get_summary(self, summary_id: int) -> Summary:
        """Return one summary.

        Raises:
            NotFoundError: No summary has that id.
        """
        with self._reading() as db:
            return Summary.from_row(self._row(db, "summaries", summary_id, "Summary"))

    def summaries(
        self, conversation_id: int, *, include_superseded: bool = False
    ) -> list[Summary]:
        """Return a conversation's summaries in order of the spans they replace.

        Args:
            conversation_id: The conversation.
            include_superseded: Also return summaries later folded into another.
        """
        sql = "SELECT * FROM summaries WHERE conversation_id = ?"
        if not include_superseded:
            sql += " AND superseded_by IS NULL"
        with self._reading() as db:
            rows = db.query(sql + " ORDER BY first_message_id, id", [conversation_id])
            return [Summary.from_row(row) for row in rows]

    def context_for_model(self, conversation_id: int) -> ModelContext:
        """Return what is sent to the model: system prompt, summaries, live messages.

        Messages still generating or that failed are left out; replies that were
        interrupted keep their partial text, as the user saw it.

        Raises:
            NotFoundError: No conversation has that id.
        """
        with self._reading() as db:
            conversation = self._row(
                db, "conversations", conversation_id, "Conversation"
            )
            summaries = self.summaries(conversation_id)
            live = [
                Message.from_row(row)
                for row in db.query(
                    "SELECT * FROM messages WHERE conversation_id = ?"
                    " AND summary_id IS NULL AND state IN ('complete', 'interrupted')"
                    " ORDER BY id",
                    [conversation_id],
                )
            ]
            pinned = tuple(
                Message.from_row(row)
                for row in db.query(
                    "SELECT * FROM messages WHERE conversation_id = ? AND pinned = 1"
                    " AND summary_id IS NOT NULL AND state IN ('complete', 'interrupted')"
                    " ORDER BY id",
                    [conversation_id],
                )
            )
        # A summary stands where the first message it replaced stood.
        entries: list[Summary | Message] = [*summaries, *live]
        entries.sort(
            key=lambda e: e.first_message_id if isinstance(e, Summary) else e.id
        )
        return ModelContext(
            system_prompt=conversation["system_prompt"],
            entries=tuple(entries),
            pinned=pinned,
        )

    def _require_in_conversation(
        self, db: Database, conversation_id: int, message_id: int
    ) -> None:
        row = db.execute(
            "SELECT conversation_id FROM messages WHERE id = ?", [message_id]
        ).fetchone()
        if row is None or row[0] != conversation_id:
            raise ValueError(
                f"message {message_id} is not in conversation {conversation_id}"
            )


def _widen_over_active(
    db: Database, conversation_id: int, first: int, last: int
) -> tuple[int, int, list[int]]:
    """Return the span widened over the active summaries it touches, and their ids."""
    folded: list[int] = []
    while True:
        rows = db.execute(
            "SELECT id, first_message_id, last_message_id FROM summaries"
            " WHERE conversation_id = ? AND superseded_by IS NULL"
            " AND first_message_id <= ? AND last_message_id >= ?",
            [conversation_id, last, first],
        ).fetchall()
        new_first = min([first, *(r[1] for r in rows)])
        new_last = max([last, *(r[2] for r in rows)])
        folded = [r[0] for r in rows]
        if (new_first, new_last) == (first, last):
            return first, last, folded
        first, last = new_first, new_last
