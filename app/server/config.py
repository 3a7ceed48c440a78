"""What a server instance is: where it listens, who may talk to it, which settings it uses.

Safe by default: it binds 127.0.0.1, and any other address needs an API key, because a
server on a network interface lets anyone who reaches it run the model on this machine.
Browsers get no CORS headers unless origins are named. Every value is checked here,
once, with a message that names the setting and what is allowed.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from app.core.errors import SettingsError
from app.core.presets.presets import Preset
from app.core.settings import DEFAULT_SERVER_PORT

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = DEFAULT_SERVER_PORT
# A long agent history is a few hundred KB of JSON; 8 MiB leaves room for any real
# conversation while a client cannot make the server buffer arbitrary amounts.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
# Requests waiting for the one model thread (or running); more are answered 429.
DEFAULT_MAX_PENDING = 32
# Client conversations whose caches stay in memory besides the active one: a backstop
# only. Their bytes are what bounds them (the least recently used branch goes first
# when they pass the memory budget's KV room, `ConversationIndex.evict_to_budget`), so
# an agent's subagent branches are not dropped while memory is plentiful.
DEFAULT_MAX_IDLE_CACHES = 16
LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # another host name: it may resolve to anything


@dataclass(frozen=True)
class ServerConfig:
    """Settings of one server.

    Attributes:
        preset: Settings every request runs with (KV precision, max context, auto-trim,
            trim method, summary mode, and the sampling defaults for fields a request
            leaves out). Its system prompt is not used: clients send their own.
        host: Address to bind; anything but loopback requires ``api_key``.
        port: TCP port; 0 picks a free one (see `LocalServer.status`).
        api_key: When set, every request needs ``Authorization: Bearer <key>``.
        cors_origins: Browser origins allowed to call the server (none by default).
        max_body_bytes: Largest request body accepted.
        max_pending: Requests queued or running at once; more get HTTP 429.
        max_idle_caches: Idle conversation caches the engine keeps for clients.
    """

    preset: Preset
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_key: str | None = None
    cors_origins: tuple[str, ...] = field(default_factory=tuple)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_pending: int = DEFAULT_MAX_PENDING
    max_idle_caches: int = DEFAULT_MAX_IDLE_CACHES

    def __post_init__(self):
        if not self.host or any(c.isspace() for c in self.host):
            raise SettingsError(f"server host must be an address, got {self.host!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise SettingsError(
                f"server port must be a whole number, got {self.port!r}"
            )
        if not 0 <= self.port <= 65535:
            raise SettingsError(
                f"server port must be between 0 and 65535, got {self.port}"
            )
        if self.api_key is not None and (
            not self.api_key.strip() or any(c.isspace() for c in self.api_key)
        ):
            raise SettingsError("the API key must be non-empty and contain no spaces")
        if not is_loopback(self.host) and not self.api_key:
            raise SettingsError(
                f"refusing to listen on {self.host} without an API key: anyone who can "
                "reach it could use this machine's model. Pass --api-key-file FILE (a "
                "file readable only by you) or set SWAPLESS_API_KEY, or keep the "
                "default host 127.0.0.1."
            )
        for origin in self.cors_origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise SettingsError(
                    f"CORS origin {origin!r} must be '*' or start with http:// or "
                    "https://"
                )
        for name in ("max_body_bytes", "max_pending"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SettingsError(f"server {name} must be >= 1, got {value!r}")
        if self.max_idle_caches < 0:
            raise SettingsError(
                f"server max_idle_caches must be >= 0, got {self.max_idle_caches!r}"
            )

    @property
    def loopback(self) -> bool:
        """True when only this machine can reach the server."""
        return is_loopback(self.host)
