"""`swapless mcp list`: the configured tool (MCP) servers and the tools each offers.

Listing tools starts each enabled server once (as the chat would on first use) and
stops it again; `--no-start` shows the configuration alone. The full command or URL is
printed — what a server runs must never be a surprise — but never the values of its
environment or headers.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


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
