"""Messages, and the life of a streamed reply: generating → complete/interrupted/error.

A reply is saved while it streams (see `ReplySaver`), so a crash or kill loses at most
the last second of text. Each reply names the store writing it, so that
`recover_interrupted` (in `writers`) can turn what a writer that is gone left
``generating`` into ``interrupted`` the next time a store opens.
"""

from __future__ import annotations

from typing import Any

from sqlite_utils import Database

from app.core.store.base import inserted_id
from app.core.store.records import (
    ROLES,
    Message,
    RecalledMessage,
    ReplyStats,
    recalled_to_json,
)
from app.core.store.writers import WritersMixin


class MessagesMixin(WritersMixin):
    """Message and reply methods of `Store`."""

    def add_message(
        self,
        conversation_id: int,
        role: str,
        content: str,
        *,
        token_count: int | None = None,
        recalled: tuple[RecalledMessage, ...] = (),
    ) -> int:
        """Save a finished message (typically the user's) in one transaction.

        Args:
            conversation_id: The conversation.
            role: ``system``, ``user`` or ``assistant``.
            content: The text.
            token_count: Tokens of ``content`` if known.
            recalled: Trimmed originals sent before it (stored so every later turn
                renders the same prompt).

        Returns:
            The new message's id.

        Raises:
            ValueError: ``role`` is not one of the allowed roles.
            NotFoundError: No conversation has that id.
        """
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        return self._insert_message(
            conversation_id,
            {
                "role": role,
                "content": content,
                "token_count": token_count,
                "recalled": recalled_to_json(recalled),
            },
        )

    def set_pinned(self, message_id: int, pinned: bool) -> Message:
        """Pin a message (kept verbatim after the summary) or unpin it.

        Returns:
            The message as stored now.

        Raises:
            NotFoundError: No message has that id.
            ValueError: The message is not a finished user or assistant message.
        """
        with self._writing() as db:
            row = self._row(db, "messages", message_id, "Message")
            if row["role"] not in ("user", "assistant") or row["state"] not in (
                "complete",
                "interrupted",
            ):
                raise ValueError(
                    f"message {message_id} cannot be pinned: only a finished user "
                    "message or reply can"
                )
            db.table("messages").update(message_id, {"pinned": int(pinned)})
            return Message.from_row(self._row(db, "messages", message_id, "Message"))

    def pinned_messages(self, conversation_id: int) -> list[Message]:
        """Return a conversation's pinned messages, oldest first."""
        with self._reading() as db:
            return [
                Message.from_row(row)
                for row in db.query(
                    "SELECT * FROM messages WHERE conversation_id = ? AND pinned = 1"
                    " ORDER BY id",
                    [conversation_id],
                )
            ]

    def get_message(self, message_id: int) -> Message:
        """Return one message.

        Raises:
            NotFoundError: No message has that id.
        """
        with self._reading() as db:
            return Message.from_row(self._row(db, "messages", message_id, "Message"))

    def messages(
        self, conversation_id: int, *, include_trimmed: bool = False
    ) -> list[Message]:
        """Return a conversation's messages in order.

        Args:
            conversation_id: The conversation.
            include_trimmed: Also return messages a summary replaced in the model's
                context (the UI shows them; the model does not see them).

        Raises:
            NotFoundError: No conversation has that id.
        """
        sql = "SELECT * FROM messages WHERE conversation_id = ?"
        if not include_trimmed:
            sql += " AND summary_id IS NULL"
        with self._reading() as db:
            self._row(db, "conversations", conversation_id, "Conversation")
            return [
                Message.from_row(r)
                for r in db.query(sql + " ORDER BY id", [conversation_id])
            ]

    def set_token_count(self, message_id: int, token_count: int) -> None:
        """Record how many tokens a message has, once the tokenizer has counted them.

        Raises:
            NotFoundError: No message has that id.
        """
        with self._writing() as db:
            self._row(db, "messages", message_id, "Message")
            db.table("messages").update(message_id, {"token_count": token_count})

    def delete_message(self, message_id: int) -> None:
        """Delete one message, e.g. a reply the user regenerates.

        Raises:
            ValueError: A summary covers the message (delete the conversation, or
                leave history as it is).
            NotFoundError: No message has that id.
        """
        with self._writing() as db:
            row = self._row(db, "messages", message_id, "Message")
            if row["summary_id"] is not None:
                raise ValueError(
                    f"message {message_id} is covered by summary {row['summary_id']} "
                    "and cannot be deleted on its own"
                )
            db.execute("DELETE FROM messages WHERE id = ?", [message_id])

    def begin_reply(self, conversation_id: int) -> int:
        """Create an empty assistant message in state ``generating``.

        Returns:
            The reply's message id, for `update_reply_text` and `finish_reply`.

        Raises:
            NotFoundError: No conversation has that id.
        """
        return self._insert_message(
            conversation_id,
            {"role": "assistant", "content": "", "state": "generating"},
            writer=True,
        )

    def update_reply_text(
        self, message_id: int, text: str, reasoning: str | None = None
    ) -> None:
        """Save the partial text of a reply that is still generating.

        Args:
            message_id: The reply.
            text: Its answer so far.
            reasoning: Its reasoning so far (None: unchanged).

        Raises:
            ValueError: The reply is no longer generating.
            NotFoundError: No message has that id.
        """
        with self._writing() as db:
            cursor = db.execute(
                "UPDATE messages SET content = ?, reasoning = coalesce(?, reasoning)"
                " WHERE id = ? AND state = 'generating'",
                [text, reasoning, message_id],
            )
            if cursor.rowcount == 0:
                self._require_generating(db, message_id)

    def finish_reply(
        self,
        message_id: int,
        content: str,
        stats: ReplyStats | None = None,
        *,
        token_count: int | None = None,
        stopped: bool = False,
        reasoning: str | None = None,
    ) -> None:
        """Save a reply's final text and stats in one transaction.

        Args:
            message_id: The reply from `begin_reply`.
            content: The complete text.
            stats: Measurements of the generation.
            token_count: Tokens of ``content``; defaults to ``stats.generated_tokens``.
            stopped: The user stopped the reply early: it is saved as
                ``interrupted`` instead of ``complete``.
            reasoning: The reply's reasoning (None: as last saved).

        Raises:
            ValueError: The reply is no longer generating.
            NotFoundError: No message has that id.
        """
        self._end_reply(
            message_id,
            content,
            stats,
            state="interrupted" if stopped else "complete",
            token_count=token_count,
            error=None,
            reasoning=reasoning,
        )

    def fail_reply(
        self,
        message_id: int,
        content: str,
        error: str,
        stats: ReplyStats | None = None,
        reasoning: str | None = None,
    ) -> None:
        """Save a reply that failed, keeping the text generated so far.

        Raises:
            ValueError: The reply is no longer generating.
            NotFoundError: No message has that id.
        """
        self._end_reply(
            message_id,
            content,
            stats,
            state="error",
            token_count=None,
            error=error,
            reasoning=reasoning,
        )

    def _insert_message(
        self, conversation_id: int, values: dict[str, Any], *, writer: bool = False
    ) -> int:
        with self._writing() as db:
            self._row(db, "conversations", conversation_id, "Conversation")
            if writer:
                values = {**values, "writer_id": self._writer_id(db)}
            now = self._now()
            message_id = inserted_id(
                db.table("messages").insert(
                    {"conversation_id": conversation_id, "created_at": now, **values}
                )
            )
            self._touch(db, conversation_id, now)
            return message_id

    def _end_reply(
        self,
        message_id: int,
        content: str,
        stats: ReplyStats | None,
        *,
        state: str,
        token_count: int | None,
        error: str | None,
        reasoning: str | None = None,
    ) -> None:
        stats = stats or ReplyStats()
        extra = {} if reasoning is None else {"reasoning": reasoning}
        if token_count is None:
            token_count = stats.generated_tokens
        with self._writing() as db:
            row = self._require_generating(db, message_id)
            db.table("messages").update(
                message_id,
                {
                    "content": content,
                    "state": state,
                    "token_count": token_count,
                    "error": error,
                    "writer_id": None,
                    **stats.as_dict(),
                    **extra,
                },
            )
            self._touch(db, row["conversation_id"], self._now())

    def _require_generating(self, db: Database, message_id: int) -> dict[str, Any]:
        row = self._row(db, "messages", message_id, "Message")
        if row["state"] != "generating":
            raise ValueError(
                f"message {message_id} is not generating (state is {row['state']!r})"
            )
        return row
