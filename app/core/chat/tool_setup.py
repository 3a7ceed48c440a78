"""What a conversation offers the model from its MCP servers, and who answers consent.

`ToolSetup` is built by the caller (the window for an open conversation, the CLI from
``--mcp``) and handed to `ConversationSession.tools`. It lists the enabled servers'
tools once (a server that cannot start is a notice, and its tools are left out), keeps
the conversation's consent state, and says what each reply round may do: the first
and later rounds' ``tool_choice`` (``auto`` for a model that calls tools by itself; a
test forces a named call on a random-weight model) and, once the cap of calls per turn
is reached, ``none`` (the tools stay rendered, so the prompt's prefix does not change).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.core.errors import ToolServerError
from app.core.mcp.catalog import ToolCatalog
from app.core.mcp.consent import ConsentPolicy, Decision
from app.core.mcp.host import McpHost, ServerTool
from app.core.tools.tool_specs import ToolChoice
from app.core.tools.turn_tools import TurnTools

DEFAULT_MAX_CALLS = 10


@dataclass(frozen=True)
class ConsentRequest:
    """A call waiting for the user's answer.

    Attributes:
        call_id: The model's id for the call.
        server: The server that would run it.
        tool: The tool's name on that server.
        arguments: The arguments as JSON text.
    """

    call_id: str
    server: str
    tool: str
    arguments: str


class ConsentAsker(Protocol):
    """Asks the user about one call; the window shows buttons, the CLI a prompt.

    Called on the turn's thread; it may block until the user answers. A Stop while
    waiting should answer `Decision.DENY`.
    """

    def __call__(self, request: ConsentRequest) -> Decision: ...


def deny_unasked(request: ConsentRequest) -> Decision:
    """The answer when nobody can be asked (a script): every untrusted call is denied."""
    return Decision.DENY


@dataclass
class ToolSetup:
    """The tools one conversation offers, and its consent state.

    Attributes:
        host: The running servers (shared by the process).
        servers: The servers enabled for this conversation, by configured name.
        ask: Answers consent for calls that are not trusted.
        policy: Trusted tools (from Settings) and this conversation's "always".
        max_calls: Most tool calls in one turn (a setting; default 10).
        first_choice: ``tool_choice`` of a turn's first reply.
        later_choice: ``tool_choice`` of the replies after tool results.
        parallel: Several calls in one reply are allowed.
        on_start: Told each server's full command before the host first starts it.
    """

    host: McpHost
    servers: tuple[str, ...]
    ask: ConsentAsker = deny_unasked
    policy: ConsentPolicy = field(default_factory=ConsentPolicy)
    max_calls: int = DEFAULT_MAX_CALLS
    first_choice: ToolChoice = field(default_factory=ToolChoice)
    later_choice: ToolChoice = field(default_factory=ToolChoice)
    parallel: bool = True
    on_start: Callable[[str, str], None] | None = None
    _catalog: ToolCatalog | None = field(default=None, init=False, repr=False)
    _notices: list[str] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_calls < 1:
            raise ValueError(f"max_calls must be >= 1, got {self.max_calls}")

    def catalog(self) -> ToolCatalog:
        """The enabled servers' tools, listed once (starting the servers).

        A server that cannot start or list its tools becomes a notice
        (`take_notices`) and offers nothing; the others still do.
        """
        if self._catalog is None:
            listed: list[ServerTool] = []
            for name in self.servers:
                config = self.host.servers.get(name)
                if config is not None and self.on_start is not None:
                    self.on_start(name, config.describe())
                try:
                    listed.extend(self.host.list_tools(name))
                except ToolServerError as exc:
                    self._notices.append(
                        f"Tool server {name!r} is not available: {exc}"
                    )
            self._catalog = ToolCatalog(listed)
        return self._catalog

    def take_notices(self) -> list[str]:
        """Notices gathered since the last call (each is shown once)."""
        notices, self._notices = self._notices, []
        return notices

    def turn_tools(self, calls_made: int) -> TurnTools | None:
        """What the next reply is offered, after ``calls_made`` calls this turn.

        Returns:
            None when no tool is available; the tools with ``none`` once the cap is
            reached (rendered still, so the prompt keeps its prefix).
        """
        specs = tuple(self.catalog().specs())
        if not specs:
            return None
        if calls_made >= self.max_calls:
            choice = ToolChoice("none")
        elif calls_made == 0:
            choice = self.first_choice
        else:
            choice = self.later_choice
        if choice.mode == "named" and not any(s.name == choice.name for s in specs):
            choice = ToolChoice("auto")
        return TurnTools(tools=specs, choice=choice, parallel=self.parallel)

    def template_tools(self) -> list[dict[str, Any]] | None:
        """The tools as the chat template renders them (None when there are none)."""
        tools = self.turn_tools(0)
        return tools.template_tools() if tools is not None else None

    def command_of(self, server: str) -> str:
        """The server's full command or URL, as the user was shown it."""
        config = self.host.servers.get(server)
        return config.describe() if config is not None else ""
