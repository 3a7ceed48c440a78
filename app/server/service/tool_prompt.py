"""Tools for an engine that cannot hand them to the chat template yet.

Until the engine renders a request's tools through the model's own chat template, they
are written into the system turn the way Qwen3-style templates write them (one JSON
object per line inside ``<tools>…</tools>``, calls inside ``<tool_call>`` tags), earlier
calls and results become text in the same markup, and the prompt is counted with them:
the model sees its tools and a request over the limit is refused with true numbers.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

from app.core.turn.parts import ToolSpec

TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n"
)
TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name "
    "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


def engine_takes_tools(engine: Any) -> bool:
    """True when ``engine.chat`` passes tools to the template itself."""
    try:
        return "tools" in inspect.signature(engine.chat).parameters
    except (TypeError, ValueError):
        return False


def tools_text(tools: tuple[ToolSpec, ...]) -> str:
    """The tools block of the system turn."""
    lines = (json.dumps(t.template_dict(), ensure_ascii=False) for t in tools)
    return TOOLS_HEADER + "\n".join(lines) + TOOLS_FOOTER


def fold_tools(messages: list[dict], tools: tuple[ToolSpec, ...]) -> list[dict]:
    """``messages`` with the tools in the system turn and calls/results as text."""
    block = tools_text(tools)
    if messages and messages[0]["role"] == "system":
        head = {"role": "system", "content": messages[0]["content"] + "\n\n" + block}
        messages = messages[1:]
    else:
        head = {"role": "system", "content": block}
    return [head, *fold_history(messages)]


def fold_history(messages: list[dict]) -> list[dict]:
    """``messages`` with earlier calls and results as text in the same markup (for a
    turn whose tools are not shown: ``tool_choice: "none"``)."""
    out: list[dict] = []
    for message in messages:
        if message["role"] == "tool":
            text = f"<tool_response>\n{message['content']}\n</tool_response>"
            if out and out[-1]["role"] == "user":  # several results, one turn
                out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + text}
            else:
                out.append({"role": "user", "content": text})
            continue
        content = message.get("content") or ""
        for call in message.get("tool_calls", ()):
            function = call["function"]
            written = json.dumps(
                {"name": function["name"], "arguments": function["arguments"]},
                ensure_ascii=False,
            )
            content += f"\n<tool_call>\n{written}\n</tool_call>"
        out.append({"role": message["role"], "content": content.strip("\n")})
    return out
