"""Creating, listing, renaming, configuring and deleting conversations.

A conversation keeps its own copy of the preset settings it runs with, so editing a
preset later never changes how an old conversation reads or continues.
"""

from __future__ import annotations

import json
import re
from typing import Any

from app.core.store.base import StoreBase, inserted_id
from app.core.store.records import Conversation

TITLE_MAX_CHARS = 60


class _Unchanged:
    """Marker for "leave this field as it is" (None is a valid new value)."""

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Any = _Unchanged()


def make_title(text: str, max_chars: int = TITLE_MAX_CHARS) -> str:
    """Return a one-line title made from ``text``, cut at a word boundary.

    Args:
        text: Usually the first user message.
        max_chars: Longest title returned, ellipsis included.

    Returns:
        The title; empty if ``text`` is blank.
    """
    line = re.sub(r"\s+", " ", text).strip()
    if len(line) <= max_chars:
        return line
    # A space right after the kept text still counts as a word boundary.
    space = line.rfind(" ", 0, max_chars)
    # Cut at that space, unless it would throw away most of the text.
    cut = line[:space] if space >= max_chars // 2 else line[: max_chars - 1]
    return cut.rstrip(" ,;:.-") + "…"


class ConversationsMixin(StoreBase):
    """Conversation methods of `Store`."""

    def create_conversation(
        self,
        title: str = "",
        *,
        model: str | None = None,
        preset: str | None = None,
        settings: dict[str, Any] | None = None,
        system_prompt: str = "",
    ) -> int:
        """Create a conversation.

        Args:
            title: Shown in the list; empty until `auto_title` or a rename.
            model: Model folder path or repo id.
            preset: Name of the preset the settings came from.
            settings: The settings this conversation uses (JSON-serialisable).
            system_prompt: Sent first to the model.

        Returns:
            The new conversation's id.
        """
        now = self._now()
        with self._writing() as db:
            return inserted_id(
                db.table("conversations").insert(
                    {
                        "title": title,
                        "created_at": now,
                        "updated_at": now,
                        "model": model,
                        "preset": preset,
                        "settings": json.dumps(settings or {}),
                        "system_prompt": system_prompt,
                    }
                )
            )

    def get_conversation(self, conversation_id: int) -> Conversation:
        """Return one conversation.

        Raises:
            NotFoundError: No conversation has that id.
        """
        with self._reading() as db:
            return Conversation.from_row(
                self._row(db, "conversations", conversation_id, "Conversation")
            )

    def list_conversations(self, limit: int | None = None) -> list[Conversation]:
        """Return conversations, the most recently updated first.

        Args:
            limit: Return at most this many.
        """
        sql = "SELECT * FROM conversations ORDER BY updated_at DESC, id DESC"
        params: list[Any] = []
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self._reading() as db:
            return [Conversation.from_row(row) for row in db.query(sql, params)]

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        """Set a conversation's title.

        Raises:
            NotFoundError: No conversation has that id.
        """
        self._update_conversation(conversation_id, {"title": title})

    def update_conversation(
        self,
        conversation_id: int,
        *,
        model: str | None = UNCHANGED,
        preset: str | None = UNCHANGED,
        settings: dict[str, Any] = UNCHANGED,
        system_prompt: str = UNCHANGED,
    ) -> None:
        """Change the model, preset, settings or system prompt of a conversation.

        Arguments left out keep their value.

        Raises:
            NotFoundError: No conversation has that id.
        """
        changes: dict[str, Any] = {}
        if model is not UNCHANGED:
            changes["model"] = model
        if preset is not UNCHANGED:
            changes["preset"] = preset
        if settings is not UNCHANGED:
            changes["settings"] = json.dumps(settings)
        if system_prompt is not UNCHANGED:
            changes["system_prompt"] = system_prompt
        if changes:
            self._update_conversation(conversation_id, changes)

    def delete_conversation(self, conversation_id: int) -> None:
        """Delete a conversation with its messages, summaries and documents.

        Raises:
            NotFoundError: No conversation has that id.
        """
        with self._writing() as db:
            self._row(db, "conversations", conversation_id, "Conversation")
            # ON DELETE CASCADE removes the rest; the FTS triggers follow.
            db.execute("DELETE FROM conversations WHERE id = ?", [conversation_id])

    def auto_title(self, conversation_id: int, *, overwrite: bool = False) -> str:
        """Title a conversation after its first user message.

        Args:
            conversation_id: The conversation.
            overwrite: Replace a title that is already set.

        Returns:
            The conversation's title afterwards (unchanged if it already had one, or
            empty if there is no user message yet).

        Raises:
            NotFoundError: No conversation has that id.
        """
        with self._writing() as db:
            row = self._row(db, "conversations", conversation_id, "Conversation")
            if row["title"] and not overwrite:
                return row["title"]
            first = db.execute(
                "SELECT content FROM messages WHERE conversation_id = ? AND role = 'user'"
                " ORDER BY id LIMIT 1",
                [conversation_id],
            ).fetchone()
            if first is None:
                return row["title"]
            title = make_title(first[0])
            db.table("conversations").update(conversation_id, {"title": title})
            return title

    def _update_conversation(
        self, conversation_id: int, changes: dict[str, Any]
    ) -> None:
        with self._writing() as db:
            self._row(db, "conversations", conversation_id, "Conversation")
            db.table("conversations").update(conversation_id, changes)
