"""Importing a conversation exported by `Store.export_json`.

An export is untrusted input (a file the user picked), so it is checked before and
during the insert, and the whole import is one transaction: a damaged file raises
`InputError` and leaves no half-imported conversation behind. Ids in the export are
list positions; the importer maps them to the new rows' ids.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from app.core.errors import InputError
from app.core.store.base import StoreBase
from app.core.store.export import (
    CONVERSATION_FIELDS,
    DOCUMENT_FIELDS,
    FORMAT,
    FORMAT_VERSION,
    MESSAGE_FIELDS,
    SEGMENT_FIELDS,
    SUMMARY_FIELDS,
    pick,
)
from app.core.store.records import (
    DOCUMENT_STATUSES,
    MESSAGE_STATES,
    ROLES,
    STATS_COLUMNS,
    SUMMARY_METHODS,
    parse_time,
)


class ImportMixin(StoreBase):
    """Import method of `Store`."""

    def import_json(self, data: dict[str, Any] | str | bytes) -> int:
        """Import a conversation exported by `export_json`, in one transaction.

        Args:
            data: The export, as a dict or as JSON text.

        Returns:
            The id of the new conversation.

        Raises:
            InputError: ``data`` is not a Swapless conversation export, is from a
                newer format version, or is inconsistent.
        """
        export = _checked(data)
        try:
            return self._insert_export(export)
        except (
            KeyError,
            TypeError,
            ValueError,
            IndexError,
            sqlite3.IntegrityError,
        ) as exc:
            # The transaction was rolled back: nothing of the bad file was kept.
            raise InputError(f"The export is damaged or incomplete: {exc!r}.") from exc

    def _insert_export(self, export: dict[str, Any]) -> int:
        with self._writing() as db:
            conversation = export["conversation"]
            conversation_id = (
                db["conversations"]
                .insert(
                    {
                        **pick(conversation, CONVERSATION_FIELDS),
                        "settings": json.dumps(conversation.get("settings") or {}),
                    }
                )
                .last_pk
            )
            message_ids = []
            for message in export["messages"]:
                row = {
                    **pick(message, MESSAGE_FIELDS),
                    **pick(message.get("stats") or {}, STATS_COLUMNS),
                    "conversation_id": conversation_id,
                }
                if row["state"] == "generating":
                    row["state"] = "interrupted"
                message_ids.append(db["messages"].insert(row).last_pk)
            summary_ids = [
                db["summaries"]
                .insert(
                    {
                        **pick(summary, SUMMARY_FIELDS),
                        "conversation_id": conversation_id,
                        "first_message_id": message_ids[summary["first_message"]],
                        "last_message_id": message_ids[summary["last_message"]],
                    }
                )
                .last_pk
                for summary in export["summaries"]
            ]
            # Links are set once every summary exists, as they may point forward.
            for summary_id, summary in zip(
                summary_ids, export["summaries"], strict=True
            ):
                if summary.get("superseded_by") is not None:
                    db["summaries"].update(
                        summary_id,
                        {"superseded_by": summary_ids[summary["superseded_by"]]},
                    )
            for message_id, message in zip(
                message_ids, export["messages"], strict=True
            ):
                if message.get("summary") is not None:
                    db["messages"].update(
                        message_id, {"summary_id": summary_ids[message["summary"]]}
                    )
            for document in export["documents"]:
                row = {
                    **pick(document, DOCUMENT_FIELDS),
                    "conversation_id": conversation_id,
                }
                if row["status"] == "reading":
                    row["status"] = "interrupted"
                document_id = db["documents"].insert(row).last_pk
                for segment in document.get("segments", []):
                    db["document_segments"].insert(
                        {**pick(segment, SEGMENT_FIELDS), "document_id": document_id}
                    )
            return conversation_id


def _checked(data: dict[str, Any] | str | bytes) -> dict[str, Any]:
    """Parse and validate an export, so that inserting it cannot fail half-way."""
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise InputError(f"The file is not valid JSON: {exc}.") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError("The file is not a Swapless conversation export.")
    version = data.get("version")
    if not isinstance(version, int) or version < 1:
        raise InputError(f"The export has an invalid format version: {version!r}.")
    if version > FORMAT_VERSION:
        raise InputError(
            f"The export was written by a newer version of Swapless (format version "
            f"{version}; this version reads up to {FORMAT_VERSION}). Upgrade Swapless "
            "to import it."
        )
    try:
        _validate(data)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise InputError(f"The export is damaged or incomplete: {exc}.") from exc
    return data


def _validate(data: dict[str, Any]) -> None:
    """Raise KeyError/TypeError/ValueError on anything the database would reject."""
    conversation = data["conversation"]
    if not isinstance(conversation.get("settings") or {}, dict):
        raise ValueError("conversation.settings is not an object")
    for name in ("created_at", "updated_at"):
        parse_time(conversation[name])
    messages = data["messages"]
    summaries = data["summaries"]
    for i, message in enumerate(messages):
        _one_of(f"messages[{i}].role", message["role"], ROLES)
        _one_of(f"messages[{i}].state", message["state"], MESSAGE_STATES)
        parse_time(message["created_at"])
        _index(f"messages[{i}].summary", message.get("summary"), len(summaries))
    for i, summary in enumerate(summaries):
        _one_of(f"summaries[{i}].method", summary["method"], SUMMARY_METHODS)
        parse_time(summary["created_at"])
        first = _index(
            f"summaries[{i}].first_message", summary["first_message"], len(messages)
        )
        last = _index(
            f"summaries[{i}].last_message", summary["last_message"], len(messages)
        )
        if first is None or last is None or first > last:
            raise ValueError(f"summaries[{i}] has an invalid message span")
        _index(
            f"summaries[{i}].superseded_by",
            summary.get("superseded_by"),
            len(summaries),
        )
    for i, document in enumerate(data["documents"]):
        _one_of(f"documents[{i}].status", document["status"], DOCUMENT_STATUSES)
        parse_time(document["created_at"])
        for segment in document.get("segments", []):
            parse_time(segment["created_at"])


def _one_of(where: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{where} is {value!r}, expected one of {', '.join(allowed)}")


def _index(where: str, value: Any, length: int) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or not 0 <= value < length:
        raise ValueError(f"{where} is {value!r}, not an index below {length}")
    return value
