"""The tools offered to the model, from every enabled server, under unique names.

Two servers may both offer a tool called ``search``; the model must be able to name
each. A name used by one server only is offered as it is (what the server's authors
documented and what models are used to); a clash is offered as ``server__tool``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace

from app.core.mcp.host import ServerTool
from app.core.turn.parts import ToolSpec


@dataclass(frozen=True)
class OfferedTool:
    """A tool as the model sees it, and where its calls go.

    Attributes:
        spec: The tool under the name offered to the model.
        server: The server that runs it.
        tool: Its name on that server.
    """

    spec: ToolSpec
    server: str
    tool: str


class ToolCatalog:
    """The offered tools by the name the model uses.

    Args:
        tools: Every enabled server's tools.
    """

    def __init__(self, tools: Iterable[ServerTool]):
        listed = list(tools)
        counts = Counter(t.spec.name for t in listed)
        self._by_name: dict[str, OfferedTool] = {}
        for item in listed:
            name = item.spec.name
            if counts[name] > 1:
                name = f"{item.server}__{item.spec.name}"
            self._by_name[name] = OfferedTool(
                replace(item.spec, name=name), item.server, item.spec.name
            )

    def specs(self) -> list[ToolSpec]:
        """The tools to render into the prompt, in a stable order."""
        return [self._by_name[name].spec for name in sorted(self._by_name)]

    def find(self, name: str) -> OfferedTool | None:
        """The tool the model called by ``name``, or None for a name never offered."""
        return self._by_name.get(name)

    def __len__(self) -> int:
        return len(self._by_name)
