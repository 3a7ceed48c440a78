"""What the user decided about tools, beside the server file: trust, the cap, which chats.

The `mcpServers` file keeps the shape LM Studio and Claude Desktop share, so nothing of
Swapless's own goes in it. This small private file (``mcp-prefs.json`` in the app home,
0600) holds the rest: the tools marked trusted (they run without asking), the cap of
calls per turn, the servers enabled for each conversation and those a new chat starts
with (none at first: no server runs unless the user enables it).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.core.errors import ToolServerError
from app.core.files import paths
from app.core.files.private_files import write_private_text
from app.core.mcp.config import ServerConfig, parse_server

PREFS_FILE = "mcp-prefs.json"
DEFAULT_MAX_CALLS = 10
MAX_CALLS_RANGE = (1, 100)


@dataclass(frozen=True)
class ToolPrefs:
    """The user's tool settings.

    Attributes:
        trusted: ``server/tool`` keys that run without asking.
        max_calls: Most tool calls in one turn.
        conversations: Servers enabled per conversation id.
        new_chats: Servers a new conversation starts with.
    """

    trusted: frozenset[str] = frozenset()
    max_calls: int = DEFAULT_MAX_CALLS
    conversations: dict[int, tuple[str, ...]] = field(default_factory=dict)
    new_chats: tuple[str, ...] = ()

    def enabled_for(self, conversation_id: int | None) -> tuple[str, ...]:
        """The servers a conversation offers (a new one: ``new_chats``)."""
        if conversation_id is None:
            return self.new_chats
        return self.conversations.get(conversation_id, self.new_chats)

    def with_enabled(self, conversation_id: int, servers: Iterable[str]) -> ToolPrefs:
        """These prefs with ``servers`` enabled for one conversation."""
        chosen = dict(self.conversations)
        chosen[conversation_id] = tuple(sorted(set(servers)))
        return replace(self, conversations=chosen)

    def to_dict(self) -> dict[str, Any]:
        """The prefs as written to the file."""
        return {
            "trusted": sorted(self.trusted),
            "max_calls": self.max_calls,
            "conversations": {
                str(cid): list(servers) for cid, servers in self.conversations.items()
            },
            "new_chats": list(self.new_chats),
        }

    @classmethod
    def from_dict(cls, data: Any) -> ToolPrefs:
        """Read prefs strictly.

        Raises:
            ToolServerError: A value of the wrong type or out of range, named.
        """
        if not isinstance(data, dict):
            raise ToolServerError("the tool preferences must be a JSON object")
        max_calls = data.get("max_calls", DEFAULT_MAX_CALLS)
        low, high = MAX_CALLS_RANGE
        if isinstance(max_calls, bool) or not isinstance(max_calls, int):
            raise ToolServerError("max_calls must be a whole number")
        if not low <= max_calls <= high:
            raise ToolServerError(f"max_calls must be from {low} to {high}")
        conversations = data.get("conversations", {})
        if not isinstance(conversations, dict):
            raise ToolServerError("conversations must be an object")
        chosen: dict[int, tuple[str, ...]] = {}
        for key, servers in conversations.items():
            if not str(key).isdigit():
                raise ToolServerError(f"conversations: {key!r} is not an id")
            chosen[int(key)] = _names(servers, f"conversations.{key}")
        return cls(
            trusted=frozenset(_names(data.get("trusted", []), "trusted")),
            max_calls=max_calls,
            conversations=chosen,
            new_chats=_names(data.get("new_chats", []), "new_chats"),
        )


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ToolServerError(f"{where} must be a list of names")
    return tuple(value)


def prefs_path() -> Path:
    """Where the tool preferences live (the app home)."""
    return paths.app_home() / PREFS_FILE


def load_prefs(path: Path | None = None) -> ToolPrefs:
    """Read the preferences; no file means the defaults (nothing trusted or enabled).

    Raises:
        ToolServerError: The file cannot be read or holds a wrong value.
    """
    path = path or prefs_path()
    if not path.exists():
        return ToolPrefs()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ToolServerError(f"{path} cannot be read as JSON: {exc}") from None
    try:
        return ToolPrefs.from_dict(data)
    except ToolServerError as exc:
        raise ToolServerError(f"{path}: {exc}") from None


def save_prefs(prefs: ToolPrefs, path: Path | None = None) -> None:
    """Write the preferences, private to the user."""
    write_private_text(
        path or prefs_path(), json.dumps(prefs.to_dict(), indent=2) + "\n"
    )


def server_from_fields(
    name: str, runs: str, disabled: bool = False, keep: ServerConfig | None = None
) -> ServerConfig:
    """A server from what the Settings page's fields say.

    Args:
        name: The server's name.
        runs: A Streamable HTTP URL, or the command line of a stdio server (split
            as a shell would, without running one).
        disabled: Configured but switched off.
        keep: The server being edited: its environment, headers and working folder
            (not shown on the page) are kept.

    Raises:
        ToolServerError: What `parse_server` refuses (a bad name, a URL that is not
            https off this computer, an empty command), or unbalanced quotes.
    """
    text = runs.strip()
    entry: dict[str, Any]
    if text.startswith(("http://", "https://")):
        entry = {"url": text}
        if keep is not None and keep.headers:
            entry["headers"] = dict(keep.headers)
    else:
        try:
            words = shlex.split(text)
        except ValueError as exc:
            raise ToolServerError(f"the command line cannot be read: {exc}") from None
        entry = {"command": words[0] if words else "", "args": words[1:]}
        if keep is not None and keep.env:
            entry["env"] = dict(keep.env)
        if keep is not None and keep.cwd:
            entry["cwd"] = keep.cwd
    if disabled:
        entry["disabled"] = True
    return parse_server(name.strip(), entry)
