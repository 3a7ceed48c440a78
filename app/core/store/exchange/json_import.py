"""Importing a conversation exported by `Store.export_json`.

An export is untrusted input (a file the user picked, possibly edited or hostile), so
it is checked before the insert and the whole import is one transaction: a damaged
file raises `InputError` naming the bad field and leaves no half-imported conversation
behind. Ids in the export are list positions; the importer maps them to the new rows'
ids.

The conversation's settings are validated like presets, because they are what the
conversation continues with: an invalid value (``kv_bits: 3``), an unknown key or a
preset name that is not a name would leave a conversation that can never be continued.
Such settings are replaced by the defaults (every valid value is kept), and the import
reports each replacement in its `ImportResult.notes`, so the user is told.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.core.errors import InputError
from app.core.presets.presets import repaired_preset
from app.core.store.base import StoreBase, inserted_id
from app.core.store.calls.tool_calls import DECISIONS
from app.core.store.exchange.export import (
    CONVERSATION_FIELDS,
    DOCUMENT_FIELDS,
    FORMAT,
    FORMAT_VERSION,
    MESSAGE_FIELDS,
    SEGMENT_FIELDS,
    SUMMARY_FIELDS,
    TOOL_CALL_FIELDS,
    pick,
)
from app.core.store.records import (
    DOCUMENT_STATUSES,
    MESSAGE_STATES,
    ROLES,
    STATS_COLUMNS,
    SUMMARY_METHODS,
    TRIM_CAUSES,
    parse_time,
)


@dataclass(frozen=True)
class ImportResult:
    """What an import created.

    Attributes:
        conversation_id: The new conversation.
        notes: One sentence per setting that was replaced by its default.
        title: Its title, as stored.
        messages: How many messages it holds.
    """

    conversation_id: int
    notes: tuple[str, ...] = ()
    title: str = ""
    messages: int = 0


IMPORTED_TITLE_SUFFIX = " (imported)"
"""Added to an imported conversation's title by the CLI and the window, so the copy is
told apart from the original in a list."""


class ImportMixin(StoreBase):
    """Import methods of `Store`."""

    def import_json(self, data: dict[str, Any] | str | bytes) -> int:
        """Import a conversation exported by `export_json`; return its new id.

        Like `import_conversation`, for callers that need not report replaced
        settings.
        """
        return self.import_conversation(data).conversation_id

    def import_conversation(
        self, data: dict[str, Any] | str | bytes, title_suffix: str = ""
    ) -> ImportResult:
        """Import a conversation exported by `export_json`, in one transaction.

        Args:
            data: The export, as a dict or as JSON text.
            title_suffix: Added to the title, so that the copy is told apart from the
                original in a list (" (imported)"); none keeps the export's exactly.

        Returns:
            The new conversation's id and the notes about replaced settings.

        Raises:
            InputError: ``data`` is not a Swapless conversation export, is from a
                newer format version, or is damaged or inconsistent.
        """
        export = _checked(data)
        conversation = export["conversation"]
        stored = {"system_prompt": conversation["system_prompt"]}
        stored.update(conversation.get("settings") or {})
        preset, notes = repaired_preset(conversation.get("preset"), stored)
        if title_suffix:
            title = (conversation.get("title") or "").strip() or "Untitled"
            conversation = {**conversation, "title": title + title_suffix}
        if notes:
            conversation = {
                **conversation,
                "preset": preset.name,
                "settings": preset.to_dict(),
            }
        try:
            conversation_id = self._insert_export(export, conversation)
        except (
            KeyError,
            TypeError,
            ValueError,
            IndexError,
            sqlite3.IntegrityError,
        ) as exc:
            # The transaction was rolled back: nothing of the bad file was kept.
            raise InputError(f"The export is damaged or incomplete: {exc!r}.") from exc
        return ImportResult(
            conversation_id,
            tuple(notes),
            conversation.get("title") or "",
            len(export["messages"]),
        )

    def _insert_export(self, export: dict[str, Any], conversation: dict) -> int:
        with self._writing() as db:
            conversation_id = inserted_id(
                db.table("conversations").insert(
                    {
                        **pick(conversation, CONVERSATION_FIELDS),
                        "settings": json.dumps(conversation.get("settings") or {}),
                    }
                )
            )
            message_ids = []
            for message in export["messages"]:
                row = {
                    **pick(message, MESSAGE_FIELDS),
                    **pick(message.get("stats") or {}, STATS_COLUMNS),
                    "reasoning": message.get("reasoning") or "",
                    "conversation_id": conversation_id,
                }
                if row["state"] == "generating":
                    row["state"] = "interrupted"
                message_id = inserted_id(db.table("messages").insert(row))
                message_ids.append(message_id)
                for position, call in enumerate(message.get("tool_calls") or []):
                    db.table("tool_calls").insert(
                        {
                            **pick(call, TOOL_CALL_FIELDS),
                            "is_error": int(bool(call.get("is_error"))),
                            "decision": call.get("decision") or "",
                            "cut_note": call.get("cut_note") or "",
                            "conversation_id": conversation_id,
                            "message_id": message_id,
                            "position": position,
                        }
                    )
            summary_ids = [
                inserted_id(
                    db.table("summaries").insert(
                        {
                            **pick(summary, SUMMARY_FIELDS),
                            "conversation_id": conversation_id,
                            "first_message_id": message_ids[summary["first_message"]],
                            "last_message_id": message_ids[summary["last_message"]],
                        }
                    )
                )
                for summary in export["summaries"]
            ]
            # Links are set once every summary exists, as they may point forward.
            for summary_id, summary in zip(
                summary_ids, export["summaries"], strict=True
            ):
                if summary.get("superseded_by") is not None:
                    db.table("summaries").update(
                        summary_id,
                        {"superseded_by": summary_ids[summary["superseded_by"]]},
                    )
            for message_id, message in zip(
                message_ids, export["messages"], strict=True
            ):
                if message.get("summary") is not None:
                    db.table("messages").update(
                        message_id, {"summary_id": summary_ids[message["summary"]]}
                    )
            for document in export["documents"]:
                row = {
                    **pick(document, DOCUMENT_FIELDS),
                    "conversation_id": conversation_id,
                }
                if row["status"] == "reading":
                    row["status"] = "interrupted"
                document_id = inserted_id(db.table("documents").insert(row))
                for segment in document.get("segments") or []:
                    db.table("document_segments").insert(
                        {**pick(segment, SEGMENT_FIELDS), "document_id": document_id}
                    )
            return conversation_id


def _checked(data: dict[str, Any] | str | bytes) -> dict[str, Any]:
    """Parse and validate an export, so that inserting it cannot fail half-way."""
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data, parse_constant=_refuse_constant)
        except RecursionError:
            raise InputError(
                "The file is nested too deeply to be a Swapless conversation export."
            ) from None
        except ValueError as exc:
            raise InputError(f"The file is not valid JSON: {exc}.") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError("The file is not a Swapless conversation export.")
    version = data.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InputError(
            f"The export has an invalid format version: {_short(version)}."
        )
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


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


# -- the shape of an export ----------------------------------------------------------
# Each check takes (where, value) and raises ValueError naming ``where``.


def _text(where: str, value: Any) -> None:
    if not isinstance(value, str):
        raise ValueError(f"{where} must be text, not {_short(value)}")


def _optional_text(where: str, value: Any) -> None:
    if value is not None:
        _text(where, value)


def _time(where: str, value: Any) -> None:
    _text(where, value)
    try:
        parse_time(value)
    except ValueError:
        raise ValueError(
            f"{where} is not a Swapless timestamp: {_short(value)}"
        ) from None


def _whole(minimum: int | None) -> Callable[[str, Any], None]:
    def check(where: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where} must be a whole number, not {_short(value)}")
        if minimum is not None and value < minimum:
            raise ValueError(f"{where} must be at least {minimum}, not {value}")
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"{where} is too large: {_short(value)}")

    return check


def _optional(check: Callable[[str, Any], None]) -> Callable[[str, Any], None]:
    def optional(where: str, value: Any) -> None:
        if value is not None:
            check(where, value)

    return optional


def _number(where: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where} must be a number, not {_short(value)}")
    # NaN and infinities would be exported again as non-standard JSON; integers past
    # 64 bits do not fit SQLite's columns.
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, not {value}")
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise ValueError(f"{where} is too large: {_short(value)}")


def _boolean(where: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{where} is {_short(value)}, expected true or false")


def _one_of(allowed: tuple[str, ...]) -> Callable[[str, Any], None]:
    def check(where: str, value: Any) -> None:
        if value not in allowed:
            raise ValueError(
                f"{where} is {_short(value)}, expected one of {', '.join(allowed)}"
            )

    return check


_CONVERSATION = {
    "title": _text,
    "created_at": _time,
    "updated_at": _time,
    "model": _optional_text,
    "system_prompt": _text,
}
_MESSAGE = {
    "role": _one_of(ROLES),
    "content": _text,
    "created_at": _time,
    "token_count": _optional(_whole(0)),
    "state": _one_of(MESSAGE_STATES),
    "error": _optional_text,
    # Exports written before reasoning was stored apart have none.
    "reasoning": _optional_text,
}
_TOOL_CALL = {
    "call_id": _text,
    "server": _text,
    "tool": _text,
    "arguments": _text,
    "result": _text,
    "is_error": _boolean,
    "decision": _optional(_one_of(DECISIONS)),
    "cut_note": _optional_text,
    "original_tokens": _optional(_whole(0)),
    "result_tokens": _optional(_whole(0)),
    "seconds": _optional(_number),
    "created_at": _time,
}
_SUMMARY = {
    "content": _text,
    "token_count": _optional(_whole(0)),
    "method": _one_of(SUMMARY_METHODS),
    "created_at": _time,
    # Exports written before trims recorded their cause have none of these.
    "cause": _optional(_one_of(TRIM_CAUSES)),
    "limit_tokens": _optional(_whole(1)),
    "trim_at_tokens": _optional(_whole(0)),
}
_DOCUMENT = {
    "name": _text,
    "size_bytes": _whole(0),
    "sha256": _text,
    "segment_tokens": _whole(1),
    "segments_total": _optional(_whole(1)),
    "status": _one_of(DOCUMENT_STATUSES),
    "created_at": _time,
    "error": _optional_text,
}
_SEGMENT = {
    "segment_index": _whole(0),
    "token_count": _whole(0),
    "notes": _text,
    "tokens_per_s": _optional(_number),
    "peak_memory_bytes": _optional(_whole(0)),
    "kv_bytes": _optional(_whole(0)),
    "created_at": _time,
}


def _object(where: str, value: Any, fields: dict[str, Callable]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object, not {_short(value)}")
    for name, check in fields.items():
        check(f"{where}.{name}", value.get(name))
    return value


def _list(where: str, value: Any) -> list:
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list, not {_short(value)}")
    return value


def _validate(data: dict[str, Any]) -> None:
    """Raise ValueError on anything the database would reject or the app misread."""
    for key in ("conversation", "messages", "summaries", "documents"):
        if key not in data:
            raise ValueError(f"{key} is missing")
    conversation = _object("conversation", data["conversation"], _CONVERSATION)
    if not isinstance(conversation.get("settings") or {}, dict):
        raise ValueError("conversation.settings is not an object")
    messages = _list("messages", data["messages"])
    summaries = _list("summaries", data["summaries"])
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        _object(where, message, _MESSAGE)
        stats = message.get("stats") or {}
        _object(f"{where}.stats", stats, {})
        for name in STATS_COLUMNS:
            _optional(_number)(f"{where}.stats.{name}", stats.get(name))
        _index(f"{where}.summary", message.get("summary"), len(summaries))
        calls = _list(f"{where}.tool_calls", message.get("tool_calls") or [])
        if calls and message.get("role") != "assistant":
            raise ValueError(f"{where} has tool calls but is not a reply")
        for j, call in enumerate(calls):
            _object(f"{where}.tool_calls[{j}]", call, _TOOL_CALL)
    for i, summary in enumerate(summaries):
        where = f"summaries[{i}]"
        _object(where, summary, _SUMMARY)
        first = _index(
            f"{where}.first_message", summary.get("first_message"), len(messages)
        )
        last = _index(
            f"{where}.last_message", summary.get("last_message"), len(messages)
        )
        if first is None or last is None or first > last:
            raise ValueError(f"{where} has an invalid message span")
        _index(f"{where}.superseded_by", summary.get("superseded_by"), len(summaries))
    for i, document in enumerate(_list("documents", data["documents"])):
        where = f"documents[{i}]"
        _object(where, document, _DOCUMENT)
        segments = _list(f"{where}.segments", document.get("segments") or [])
        for j, segment in enumerate(segments):
            _object(f"{where}.segments[{j}]", segment, _SEGMENT)


def _index(where: str, value: Any, length: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < length:
        raise ValueError(f"{where} is {_short(value)}, not an index below {length}")
    return value


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
