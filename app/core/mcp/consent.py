"""Whether a tool call may run: the user's consent, asked once, remembered as told.

A call runs only after the user allows it — once, or always for this tool in this
conversation — unless the tool is marked trusted in Settings. A denial is given back to
the model as a tool result that says so, so it can answer without the tool.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum


class Decision(Enum):
    """What the user answered when asked."""

    ALLOW_ONCE = "once"
    ALLOW_ALWAYS = "always"
    DENY = "deny"


DENIED_TEXT = "The user did not allow this tool call. Answer without it."


def tool_key(server: str, tool: str) -> str:
    """The one spelling of a tool in settings and consent records: ``server/tool``."""
    return f"{server}/{tool}"


@dataclass
class ConsentPolicy:
    """The consent state of one conversation.

    Attributes:
        trusted: ``server/tool`` keys the user marked trusted in Settings (no asking).
        always: Keys allowed "always for this conversation".
    """

    trusted: frozenset[str] = frozenset()
    always: set[str] = field(default_factory=set)

    @classmethod
    def from_settings(
        cls, trusted: Iterable[str], always: Iterable[str] = ()
    ) -> ConsentPolicy:
        """A conversation's policy: the trusted list in Settings, and the tools the
        user already allowed "always" in it (`always_allowed`, from its stored calls).
        """
        return cls(trusted=frozenset(trusted), always=set(always))

    def needs_asking(self, server: str, tool: str) -> bool:
        """True when the user must be asked before this call runs."""
        key = tool_key(server, tool)
        return key not in self.trusted and key not in self.always

    def record(self, server: str, tool: str, decision: Decision) -> bool:
        """Remember the user's answer; return whether the call may run."""
        if decision is Decision.ALLOW_ALWAYS:
            self.always.add(tool_key(server, tool))
        return decision is not Decision.DENY


def always_allowed(decisions: Iterable[tuple[str, str, str]]) -> set[str]:
    """The ``server/tool`` keys a conversation's stored calls were allowed "always".

    The answer is stored with every call, so "always for this tool in this
    conversation" outlives the session without a second record that could disagree.

    Args:
        decisions: ``(server, tool, decision)`` of each stored call.
    """
    return {
        tool_key(server, tool)
        for server, tool, decision in decisions
        if decision == Decision.ALLOW_ALWAYS.value
    }
