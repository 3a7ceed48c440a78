"""Which tool servers exist: the `mcpServers` file, read strictly.

The shape is the one LM Studio (`mcp.json`) and Claude Desktop use, so a user can copy
a server from either::

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "some-server"], "env": {"KEY": "…"}},
        "search": {"url": "https://example.com/mcp", "headers": {"Authorization": "…"}}
    }}

A stdio server is a command with arguments, environment and working folder; an HTTP
server is a Streamable HTTP URL with headers. HTTP servers other than loopback must use
https (a token in a header must not cross a network in clear). The file lives in the
app home, private to the user (it may hold keys), and nothing here ever logs `env` or
`headers` values.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from app.core.errors import ToolServerError
from app.core.files import paths
from app.core.files.private_files import write_private_text

CONFIG_FILE = "mcp.json"
MAX_CONFIG_BYTES = 1 << 20
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
STDIO_KEYS = frozenset({"command", "args", "env", "cwd", "type", "disabled"})
HTTP_KEYS = frozenset({"url", "headers", "type", "disabled"})


@dataclass(frozen=True)
class ServerConfig:
    """One configured tool server.

    Attributes:
        name: The key under `mcpServers`; shown to the user and used in tool cards.
        command: The executable of a stdio server (empty for HTTP).
        args: Its arguments.
        env: Extra environment variables (values are secrets: never logged).
        cwd: Its working folder, if any.
        url: The Streamable HTTP endpoint of an HTTP server (empty for stdio).
        headers: Extra HTTP headers (values are secrets: never logged).
        disabled: Configured but switched off.
    """

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    disabled: bool = False

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"http"``."""
        return "http" if self.url else "stdio"

    def describe(self) -> str:
        """The full command or URL, as the user must see it before the first start.

        Environment and header *names* are shown, their values never.
        """
        if self.url:
            shown = self.url
            if self.headers:
                shown += f" (headers: {', '.join(sorted(self.headers))})"
            return shown
        words = [self.command, *self.args]
        shown = " ".join(_quote(word) for word in words)
        if self.env:
            shown += f" (environment: {', '.join(sorted(self.env))})"
        if self.cwd:
            shown += f" in {self.cwd}"
        return shown


def _quote(word: str) -> str:
    return word if word and re.fullmatch(r"[\w@%+=:,./-]+", word) else json.dumps(word)


def config_path() -> Path:
    """Return the user's tool-server file (in the app home)."""
    return paths.app_home() / CONFIG_FILE


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ToolServerError(f"{where} must be a list of strings")
    return tuple(value)


def _string_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ToolServerError(f"{where} must be an object of string values")
    return dict(value)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_url(url: str, where: str) -> str:
    """Return ``url`` if it may be used for a tool server.

    Raises:
        ToolServerError: Not http(s), no host, or plain http to a host other than
            loopback.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ToolServerError(
            f"{where} must be an http(s) URL with a host, not {url!r}"
        )
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        raise ToolServerError(
            f"{where}: a server on another host must use https "
            f"(plain http is allowed on loopback only): {parts.hostname}"
        )
    return url


def parse_server(name: str, entry: Any) -> ServerConfig:
    """Validate one `mcpServers` entry.

    Raises:
        ToolServerError: The entry names the key and what is wrong with it.
    """
    where = f"mcpServers.{name}"
    if not NAME_PATTERN.match(name):
        raise ToolServerError(
            f"{where}: a server name is 1-64 letters, digits, '_', '.' or '-'"
        )
    if not isinstance(entry, dict):
        raise ToolServerError(f"{where} must be an object")
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise ToolServerError(f"{where}.disabled must be true or false")
    if "url" in entry:
        unknown = sorted(set(entry) - HTTP_KEYS)
        if unknown:
            raise ToolServerError(
                f"{where}: unknown key {unknown[0]!r} for an HTTP server "
                f"(allowed: {', '.join(sorted(HTTP_KEYS))})"
            )
        url = entry["url"]
        if not isinstance(url, str):
            raise ToolServerError(f"{where}.url must be a string")
        return ServerConfig(
            name=name,
            url=check_url(url, f"{where}.url"),
            headers=_string_map(entry.get("headers", {}), f"{where}.headers"),
            disabled=disabled,
        )
    if "command" not in entry:
        raise ToolServerError(f"{where} needs a 'command' (stdio) or a 'url' (HTTP)")
    unknown = sorted(set(entry) - STDIO_KEYS)
    if unknown:
        raise ToolServerError(
            f"{where}: unknown key {unknown[0]!r} for a stdio server "
            f"(allowed: {', '.join(sorted(STDIO_KEYS))})"
        )
    command = entry["command"]
    if not isinstance(command, str) or not command.strip():
        raise ToolServerError(f"{where}.command must be a non-empty string")
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ToolServerError(f"{where}.cwd must be a string")
    return ServerConfig(
        name=name,
        command=command,
        args=_strings(entry.get("args", []), f"{where}.args"),
        env=_string_map(entry.get("env", {}), f"{where}.env"),
        cwd=cwd,
        disabled=disabled,
    )


def parse_config(data: Any) -> dict[str, ServerConfig]:
    """Validate a whole `mcpServers` document.

    Raises:
        ToolServerError: The first problem found, naming its key.
    """
    if not isinstance(data, dict):
        raise ToolServerError("the tool-server file must hold a JSON object")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ToolServerError("mcpServers must be an object of servers")
    return {name: parse_server(name, entry) for name, entry in servers.items()}


def load_config(path: Path | None = None) -> dict[str, ServerConfig]:
    """Read the tool-server file; no file means no servers (the first-start state).

    Raises:
        ToolServerError: The file cannot be read or is invalid (one line, the path
            and the key).
    """
    path = path or config_path()
    if not path.exists():
        return {}
    if not path.is_file():
        raise ToolServerError(f"{path} is not a regular file")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ToolServerError(f"{path} is larger than {MAX_CONFIG_BYTES // 1024} KiB")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ToolServerError(f"{path} cannot be read as JSON: {exc}") from None
    try:
        return parse_config(data)
    except ToolServerError as exc:
        raise ToolServerError(f"{path}: {exc}") from None


def save_config(servers: Mapping[str, ServerConfig], path: Path | None = None) -> None:
    """Write the tool-server file, private to the user (it may hold keys)."""
    path = path or config_path()
    body: dict[str, dict[str, Any]] = {}
    for name, server in servers.items():
        entry: dict[str, Any]
        if server.url:
            entry = {"url": server.url}
            if server.headers:
                entry["headers"] = dict(server.headers)
        else:
            entry = {"command": server.command, "args": list(server.args)}
            if server.env:
                entry["env"] = dict(server.env)
            if server.cwd:
                entry["cwd"] = server.cwd
        if server.disabled:
            entry["disabled"] = True
        body[name] = entry
    write_private_text(path, json.dumps({"mcpServers": body}, indent=2) + "\n")
