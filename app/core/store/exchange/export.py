"""Exporting a conversation to JSON or Markdown (`json_import` reads the JSON back).

The JSON format is versioned (``{"format": "swapless-conversation", "version": 1}``)
and carries no database ids: summaries, covered messages and superseded summaries
point at positions (0-based indexes) in the exported lists, so an import can give
everything new ids. Round-trip guarantee, pinned by the tests:
``export_json(import_json(e)) == e`` for every export ``e``, ignoring ``exported_at``,
except that a reply still ``generating`` (or a document still ``reading``) when it was
exported comes back ``interrupted``, since nothing is producing it any more.
"""

from __future__ import annotations

import json
from typing import Any

from app.core.store.base import StoreBase
from app.core.store.exchange.markdown_export import render_markdown
from app.core.store.records import STATS_COLUMNS

FORMAT = "swapless-conversation"
FORMAT_VERSION = 1

CONVERSATION_FIELDS = (
    "title",
    "created_at",
    "updated_at",
    "model",
    "preset",
    "system_prompt",
)
MESSAGE_FIELDS = ("role", "content", "created_at", "token_count", "state", "error")
SUMMARY_FIELDS = (
    "content",
    "token_count",
    "method",
    "created_at",
    "cause",
    "limit_tokens",
    "trim_at_tokens",
)
DOCUMENT_FIELDS = (
    "name",
    "size_bytes",
    "sha256",
    "segment_tokens",
    "segments_total",
    "status",
    "created_at",
    "error",
)
# A reply's tool calls, in order (exports from before tool calls have none).
TOOL_CALL_FIELDS = (
    "call_id",
    "server",
    "tool",
    "arguments",
    "result",
    "is_error",
    "decision",
    "cut_note",
    "original_tokens",
    "result_tokens",
    "seconds",
    "created_at",
)
SEGMENT_FIELDS = (
    "segment_index",
    "token_count",
    "notes",
    "tokens_per_s",
    "peak_memory_bytes",
    "kv_bytes",
    "created_at",
)


class ExportMixin(StoreBase):
    """Export methods of `Store`."""

    def export_json(self, conversation_id: int) -> dict[str, Any]:
        """Return a conversation as a JSON-serialisable dict (see the module doc).

        Raises:
            NotFoundError: No conversation has that id.
        """
        with self._reading() as db:
            conversation = self._row(
                db, "conversations", conversation_id, "Conversation"
            )
            messages = list(
                db.query(
                    "SELECT * FROM messages WHERE conversation_id = ? ORDER BY id",
                    [conversation_id],
                )
            )
            summaries = list(
                db.query(
                    "SELECT * FROM summaries WHERE conversation_id = ? ORDER BY id",
                    [conversation_id],
                )
            )
            documents = list(
                db.query(
                    "SELECT * FROM documents WHERE conversation_id = ? ORDER BY id",
                    [conversation_id],
                )
            )
            segments = {
                document["id"]: list(
                    db.query(
                        "SELECT * FROM document_segments WHERE document_id = ?"
                        " ORDER BY segment_index",
                        [document["id"]],
                    )
                )
                for document in documents
            }
            calls: dict[int, list[dict[str, Any]]] = {}
            for row in db.query(
                "SELECT * FROM tool_calls WHERE conversation_id = ?"
                " ORDER BY message_id, position, id",
                [conversation_id],
            ):
                call = pick(row, TOOL_CALL_FIELDS)
                call["is_error"] = bool(call["is_error"])
                calls.setdefault(row["message_id"], []).append(call)
            exported_at = self._now()
        message_index = {row["id"]: i for i, row in enumerate(messages)}
        summary_index = {row["id"]: i for i, row in enumerate(summaries)}
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "exported_at": exported_at,
            "conversation": {
                **pick(conversation, CONVERSATION_FIELDS),
                "settings": json.loads(conversation["settings"]),
            },
            "messages": [
                {
                    **pick(row, MESSAGE_FIELDS),
                    # A reasoning model's thoughts; exports from before have none.
                    "reasoning": row.get("reasoning") or "",
                    "stats": pick(row, STATS_COLUMNS),
                    "summary": summary_index.get(row["summary_id"]),
                    # Only a reply that called tools has the key.
                    **({"tool_calls": calls[row["id"]]} if row["id"] in calls else {}),
                }
                for row in messages
            ],
            "summaries": [
                {
                    **pick(row, SUMMARY_FIELDS),
                    "first_message": message_index[row["first_message_id"]],
                    "last_message": message_index[row["last_message_id"]],
                    "superseded_by": summary_index.get(row["superseded_by"]),
                }
                for row in summaries
            ],
            "documents": [
                {
                    **pick(row, DOCUMENT_FIELDS),
                    "segments": [pick(s, SEGMENT_FIELDS) for s in segments[row["id"]]],
                }
                for row in documents
            ],
        }

    def export_markdown(self, conversation_id: int) -> str:
        """Return a conversation as a Markdown document for reading or sharing.

        Raises:
            NotFoundError: No conversation has that id.
        """
        return render_markdown(self.export_json(conversation_id))


def pick(row: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """Return ``fields`` of ``row`` (None for missing ones), in that order."""
    return {name: row.get(name) for name in fields}
