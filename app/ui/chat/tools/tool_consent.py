"""The window's side of tools: one host, the user's tool settings, consent by card.

`WindowTools` lives with the `GenerationWorker` on its thread. It owns the process's
`McpHost` (servers start when a conversation that enables them first needs them and
stop when the window closes), reads the server file and the tool preferences, and
gives each conversation its `ToolSetup` (kept, so "always" holds for that
conversation). Consent is asked by a card in the chat: the worker thread waits in
`ConsentBridge` until the card's answer arrives (or Stop, which denies).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from app.core.chat.tool_setup import ConsentAsker, ConsentRequest, ToolSetup
from app.core.mcp.config import load_config
from app.core.mcp.consent import ConsentPolicy, Decision, always_allowed
from app.core.mcp.host import McpHost
from app.core.mcp.tool_prefs import ToolPrefs, load_prefs
from app.core.tools.tool_specs import ToolChoice

# How often a waiting consent looks at Stop.
STOP_POLL_S = 0.05


class ConsentBridge:
    """Blocks the worker thread on a question until the window answers it.

    Args:
        emit: Shows the question (emits the worker's signal to the window).
        stopped: True once the user pressed Stop (the answer is then Deny).
    """

    def __init__(
        self, emit: Callable[[ConsentRequest], None], stopped: Callable[[], bool]
    ):
        self._emit = emit
        self._stopped = stopped
        self._answered = threading.Event()
        self._answer = Decision.DENY

    def __call__(self, request: ConsentRequest) -> Decision:
        self._answered.clear()
        self._answer = Decision.DENY
        self._emit(request)
        while not self._answered.wait(STOP_POLL_S):
            if self._stopped():
                return Decision.DENY
        return self._answer

    def answer(self, decision: Decision) -> None:
        """Give the answer (any thread)."""
        self._answer = decision
        self._answered.set()


class WindowTools:
    """The tools of the window's conversations.

    Args:
        ask: The consent asker every conversation uses (a `ConsentBridge`).
        load_servers: Reads the server file (default: the app home's).
        load_tool_prefs: Reads the tool preferences (default: the app home's).
        stored_decisions: ``(server, tool, decision)`` of a conversation's stored
            calls, so an "Always" given before a restart still holds.
    """

    def __init__(
        self,
        ask: ConsentAsker,
        load_servers: Callable[[], dict] = load_config,
        load_tool_prefs: Callable[[], ToolPrefs] = load_prefs,
        stored_decisions: Callable[[int], Iterable[tuple[str, str, str]]] = (
            lambda _cid: ()
        ),
    ):
        self.ask = ask
        self._stored_decisions = stored_decisions
        self._load_servers = load_servers
        self._load_prefs = load_tool_prefs
        self._host: McpHost | None = None
        self._prefs: ToolPrefs | None = None
        self._setups: dict[int, ToolSetup] = {}
        # (first, later) tool_choice of each turn; None: ``auto`` (the model chooses).
        # A test sets a named call for a random-weight model that cannot choose.
        self.choices: tuple[ToolChoice, ToolChoice] | None = None

    def setup_for(self, conversation_id: int) -> ToolSetup | None:
        """The conversation's tools (None when it enables no server).

        Raises:
            ToolServerError: The server file or the preferences cannot be read.
        """
        if self._prefs is None:
            self._prefs = self._load_prefs()
        enabled = self._prefs.enabled_for(conversation_id)
        setup = self._setups.get(conversation_id)
        if setup is not None and setup.servers == enabled:
            return setup
        if not enabled:
            self._setups.pop(conversation_id, None)
            return None
        if self._host is None:
            self._host = McpHost(self._load_servers())
        setup = ToolSetup(
            self._host,
            tuple(s for s in enabled if s in self._host.servers),
            ask=self.ask,
            policy=ConsentPolicy.from_settings(
                self._prefs.trusted,
                always_allowed(self._stored_decisions(conversation_id)),
            ),
            max_calls=self._prefs.max_calls,
        )
        if self.choices is not None:
            setup.first_choice, setup.later_choice = self.choices
        self._setups[conversation_id] = setup
        return setup

    def reload(self) -> None:
        """Read the files again from the next turn on (the servers restart)."""
        self.close()

    def close(self) -> None:
        """Stop every server (the window is closing, or the settings changed)."""
        host, self._host = self._host, None
        self._prefs = None
        self._setups.clear()
        if host is not None:
            host.close()
