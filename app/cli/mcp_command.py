"""`swapless mcp list`, and the tool options of `swapless chat` (``--mcp CONFIG``).

`mcp list` shows the configured tool (MCP) servers and the tools each offers.

Listing tools starts each enabled server once (as the chat would on first use) and
stops it again; `--no-start` shows the configuration alone. The full command or URL is
printed — what a server runs must never be a surprise — but never the values of its
environment or headers.

In `swapless chat --mcp CONFIG` the same host runs the servers; a call is asked about
on the terminal (y: once, a: always, n: deny) when stdin is one, and otherwise only
the ``--allow-tools`` tools run (the model is told the others were denied).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the chat imports these when --mcp is given
    from app.core.chat.tool_setup import ConsentRequest, ToolSetup
    from app.core.mcp.catalog import ToolCatalog
    from app.core.mcp.consent import Decision
    from app.core.mcp.host import McpHost


def register(subcommands) -> None:
    """Add the subcommand to the parser."""
    parser = subcommands.add_parser(
        "mcp", help="tool (MCP) servers: list them and their tools"
    )
    actions = parser.add_subparsers(dest="mcp_action", required=True)
    listing = actions.add_parser("list", help="list configured servers and their tools")
    listing.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="an mcpServers JSON file (default: mcp.json in the app home)",
    )
    listing.add_argument(
        "--no-start", action="store_true", help="do not start servers to list tools"
    )
    listing.add_argument("--json", action="store_true", help="one JSON object")
    listing.set_defaults(run=run_list)


def run_list(args: argparse.Namespace) -> int:
    """Print each server, then its tools (or why they could not be listed)."""
    from app.core.errors import ToolServerError
    from app.core.mcp.config import config_path, load_config
    from app.core.mcp.host import McpHost

    path = args.config or config_path()
    servers = load_config(path)
    report: dict[str, dict] = {}
    if not servers:
        if args.json:
            print(json.dumps({"config": str(path), "servers": {}}))
        else:
            print(f"No tool servers configured ({path} has none).")
        return 0
    with McpHost(servers) as host:
        for name, server in servers.items():
            entry: dict = {
                "transport": server.transport,
                "runs": server.describe(),
                "disabled": server.disabled,
            }
            if not (server.disabled or args.no_start):
                try:
                    entry["tools"] = [
                        {"name": t.spec.name, "description": t.spec.description}
                        for t in host.list_tools(name)
                    ]
                except ToolServerError as exc:
                    entry["error"] = str(exc)
            report[name] = entry
    if args.json:
        print(json.dumps({"config": str(path), "servers": report}, indent=2))
        return 0
    for name, entry in report.items():
        state = " (disabled)" if entry["disabled"] else ""
        print(f"{name} [{entry['transport']}]{state}: {entry['runs']}")
        if "error" in entry:
            print(f"    could not list tools: {entry['error']}")
        for tool in entry.get("tools", []):
            first_line = (tool["description"] or "").strip().splitlines()
            print(f"    {tool['name']}" + (f" — {first_line[0]}" if first_line else ""))
    return 0


# -- tools in `swapless chat` ------------------------------------------------------


def add_chat_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--mcp``, ``--allow-tools``, ``--tool-choice`` and ``--max-tool-calls``."""
    parser.add_argument(
        "--mcp",
        type=Path,
        metavar="CONFIG",
        help="an mcpServers JSON file: its enabled servers' tools are offered",
    )
    parser.add_argument(
        "--allow-tools",
        metavar="NAME,…",
        default="",
        help="tools that run without asking (tool or server/tool); without a "
        "terminal, every other call is denied",
    )
    parser.add_argument(
        "--tool-choice",
        metavar="auto|required|NAME",
        default="auto",
        help="the first reply of each turn must call a tool (required) or this one",
    )
    parser.add_argument(
        "--max-tool-calls",
        type=int,
        default=10,
        metavar="N",
        help="most tool calls in one turn (default 10)",
    )


def allowed_keys(text: str, offered: list[tuple[str, str]]) -> frozenset[str]:
    """The ``server/tool`` keys ``--allow-tools`` names among the offered tools.

    Args:
        text: The comma-separated names (``tool`` or ``server/tool``).
        offered: ``(server, tool)`` of every offered tool.

    Raises:
        InputError: A name no enabled server offers.
    """
    from app.core.errors import InputError
    from app.core.mcp.consent import tool_key

    keys: set[str] = set()
    for name in (n.strip() for n in text.split(",")):
        if not name:
            continue
        matched = {
            tool_key(server, tool)
            for server, tool in offered
            if name in (tool, tool_key(server, tool))
        }
        if not matched:
            raise InputError(f"--allow-tools: no enabled tool server offers {name!r}")
        keys |= matched
    return frozenset(keys)


class TerminalConsent:
    """Asks about each call on the terminal: y (once), a (always), n (deny).

    Args:
        read_line: Reads one line of the user's input ('' at its end).
        say: Writes one line for the user (stderr).
    """

    def __init__(self, read_line: Callable[[], str], say: Callable[[str], None]):
        self.read_line = read_line
        self.say = say

    def __call__(self, request: ConsentRequest) -> Decision:
        from app.core.mcp.consent import Decision

        arguments = (
            request.arguments
            if len(request.arguments) <= 400
            else (request.arguments[:400] + "…")
        )
        self.say(
            f"[tool call: {request.server} · {request.tool} {arguments}]\n"
            "Allow it? y: once, a: always in this conversation, n: deny"
        )
        while True:
            print("allow [y/a/n]> ", end="", file=sys.stderr, flush=True)
            answer = self.read_line().strip().lower()
            if answer in ("y", "yes"):
                return Decision.ALLOW_ONCE
            if answer in ("a", "always"):
                return Decision.ALLOW_ALWAYS
            if answer in ("n", "no", ""):
                return Decision.DENY
            self.say("Answer y, a or n.")


def chat_tools(
    args: argparse.Namespace,
    interactive: bool,
    read_line: Callable[[], str],
    say: Callable[[str], None],
) -> tuple[ToolSetup | None, McpHost | None]:
    """The tools a chat offers from ``--mcp`` (None, None without it).

    Servers start here (each one's full command is said first) and their tools are
    listed, so a bad ``--allow-tools`` name is refused before the model loads.

    Raises:
        ToolServerError: The config file cannot be read or is not valid.
        InputError: Tool options without ``--mcp``, or a bad option value.
    """
    from app.core.chat.tool_setup import ToolSetup, deny_unasked
    from app.core.errors import InputError
    from app.core.mcp.config import load_config
    from app.core.mcp.consent import ConsentPolicy
    from app.core.mcp.host import McpHost
    from app.core.tools.tool_specs import ToolChoice

    if args.mcp is None:
        if args.allow_tools or args.tool_choice != "auto":
            raise InputError("--allow-tools and --tool-choice need --mcp CONFIG")
        return None, None
    if args.max_tool_calls < 1:
        raise InputError("--max-tool-calls must be at least 1")
    if not args.mcp.is_file():
        raise InputError(f"--mcp: {args.mcp} is not a file")
    servers = load_config(args.mcp)
    enabled = tuple(name for name, s in servers.items() if not s.disabled)
    if not enabled:
        say(f"[no enabled tool servers in {args.mcp}: no tools are offered]")
    host = McpHost(servers)
    try:
        choice = ToolChoice(
            "named"
            if args.tool_choice not in ("auto", "required")
            else args.tool_choice,
            args.tool_choice if args.tool_choice not in ("auto", "required") else "",
        )
        setup = ToolSetup(
            host,
            enabled,
            ask=TerminalConsent(read_line, say) if interactive else deny_unasked,
            max_calls=args.max_tool_calls,
            first_choice=choice,
            on_start=lambda name, command: say(
                f"[starting tool server {name}: {command}]"
            ),
        )
        catalog = setup.catalog()
        for notice in setup.take_notices():
            say(f"[{notice}]")
        offered = [
            (t.server, t.tool) for t in map(catalog.find, catalog_names(catalog)) if t
        ]
        if choice.mode == "named" and catalog.find(choice.name) is None:
            raise InputError(f"--tool-choice: no enabled tool is named {choice.name!r}")
        setup.policy = ConsentPolicy.from_settings(
            allowed_keys(args.allow_tools, offered)
        )
    except BaseException:
        host.close()
        raise
    say(
        f"[tools offered: {', '.join(catalog_names(catalog)) or 'none'}"
        + ("" if interactive else "; calls not in --allow-tools are denied")
        + "]"
    )
    return setup, host


def catalog_names(catalog: ToolCatalog) -> list[str]:
    """The offered tools' names, in the order they are rendered."""
    return [spec.name for spec in catalog.specs()]


def tool_event_line(event: object) -> str | None:
    """The line a chat prints (stderr) for a tool event, or None for other events."""
    from app.core.chat.turn_events import ToolNotice, ToolRunFinished, ToolRunStarted

    if isinstance(event, ToolNotice):
        return f"[{event.text}]"
    if isinstance(event, ToolRunStarted):
        if event.needs_consent:
            return None  # the consent prompt shows the call
        where = f"{event.server} · " if event.server else ""
        return f"[tool call: {where}{event.tool} {event.arguments}]"
    if isinstance(event, ToolRunFinished):
        call = event.call
        if call.decision == "deny":
            return f"[tool call {call.tool} denied: the model is told so]"
        kind = "tool error" if call.is_error else "tool result"
        text = " ".join(call.result.split())
        shown = text if len(text) <= 200 else text[:200] + "…"
        line = f"[{kind} ({call.seconds:.2f} s): {shown}]"
        if call.cut_note:
            line += f"\n{call.cut_note}"
        return line
    return None
