"""Rendering a conversation export as Markdown, for people rather than programs.

It works on the dict `Store.export_json` returns, so the JSON and Markdown exports
can never disagree. Messages are numbered, and each summary is shown just before the
first message it replaced, saying which messages it stands for in the model's context.

A rendered export shows each message as the chat does: replies (and summaries) are
Markdown there too, so they go in as written, with a code fence that a cut-off reply
left open closed at its end; what people type (messages, the system prompt) is shown
as typed in the chat, so it is escaped to render as typed (`app.core.text.markdown_source`).
"""

from __future__ import annotations

import json
from typing import Any

from app.core.store.records import parse_time
from app.core.text.markdown_source import closed_markdown, literal_markdown

_METHOD_WORDS = {
    "model": "written by the model",
    "extractive": "extracted from the text",
}


def render_markdown(export: dict[str, Any]) -> str:
    """Return the Markdown form of an export made by `Store.export_json`."""
    conversation = export["conversation"]
    lines = [f"# {conversation['title'] or 'Untitled conversation'}", ""]
    lines += _metadata(conversation)
    if conversation["system_prompt"]:
        lines += [
            "## System prompt",
            "",
            literal_markdown(conversation["system_prompt"]),
            "",
        ]
    lines += _messages(export["messages"], export["summaries"])
    lines += _documents(export["documents"])
    return "\n".join(lines).rstrip() + "\n"


def _metadata(conversation: dict[str, Any]) -> list[str]:
    lines = [
        f"- **Created:** {_when(conversation['created_at'])}",
        f"- **Updated:** {_when(conversation['updated_at'])}",
    ]
    if conversation["model"]:
        lines.append(f"- **Model:** `{conversation['model']}`")
    if conversation["preset"]:
        lines.append(f"- **Preset:** {conversation['preset']}")
    if conversation["settings"]:
        lines.append(f"- **Settings:** `{json.dumps(conversation['settings'])}`")
    return [*lines, ""]


def _messages(
    messages: list[dict[str, Any]], summaries: list[dict[str, Any]]
) -> list[str]:
    if not messages:
        return []
    lines = ["## Messages", ""]
    starting_at: dict[int, list[int]] = {}
    for index, summary in enumerate(summaries):
        starting_at.setdefault(summary["first_message"], []).append(index)
    for index, message in enumerate(messages):
        for summary_index in starting_at.get(index, []):
            lines += _summary(summary_index, summaries[summary_index])
        heading = f"### {index + 1}. {message['role'].capitalize()} · {_when(message['created_at'])}"
        if message["state"] != "complete":
            heading += f" ({message['state']})"
        lines += [heading, ""]
        if message["summary"] is not None:
            lines += [
                f"*Replaced by summary {message['summary'] + 1} in the model's context.*",
                "",
            ]
        lines += _reasoning(message)
        calls = message.get("tool_calls") or []
        if message["content"] or not calls:
            lines += [_content(message) or "*(empty)*", ""]
        for call in calls:
            lines += _tool_call(call)
        if message["error"]:
            lines += [f"**Error:** {message['error']}", ""]
        stats = _stats_line(message["stats"])
        if stats:
            lines += [f"*{stats}*", ""]
    return lines


def _reasoning(message: dict[str, Any]) -> list[str]:
    """A reply's reasoning as a collapsed ``<details>`` block (nothing if none)."""
    reasoning = (message.get("reasoning") or "").strip()
    if not reasoning:
        return []
    stats = message.get("stats") or {}
    words = "Thinking"
    if stats.get("reasoning_s") is not None and stats.get("reasoning_tokens"):
        words = (
            f"Thought for {stats['reasoning_s']:.0f} s · "
            f"{stats['reasoning_tokens']} tokens"
        )
    return [
        "<details>",
        f"<summary>{words}</summary>",
        "",
        literal_markdown(reasoning),
        "",
        "</details>",
        "",
    ]


def _tool_call(call: dict[str, Any]) -> list[str]:
    """One tool call as the chat's card shows it: a line, then the details."""
    where = f"{call['server']} · " if call["server"] else ""
    outcome = "error" if call["is_error"] else "result"
    if call.get("decision") == "deny":
        outcome = "denied"
    seconds = call.get("seconds")
    took = f" · {seconds:.2f} s" if seconds is not None else ""
    lines = [
        "<details>",
        f"<summary>Tool call: {where}{literal_markdown(call['tool'])} ({outcome}"
        f"{took})</summary>",
        "",
        "Arguments:",
        "",
        _fenced(call["arguments"] or "{}"),
        "",
        "Result:",
        "",
        _fenced(call["result"]),
        "",
    ]
    if call.get("cut_note"):
        lines += [f"*{literal_markdown(call['cut_note'])}*", ""]
    return [*lines, "</details>", ""]


def _fenced(text: str) -> str:
    """``text`` in a code fence longer than any run of backticks inside it."""
    longest, run = 0, 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def _content(message: dict[str, Any]) -> str:
    """A message's text as Markdown that renders the way the chat shows it."""
    if message["role"] == "assistant":
        return closed_markdown(message["content"])
    return literal_markdown(message["content"])


def _summary(index: int, summary: dict[str, Any]) -> list[str]:
    span = f"messages {summary['first_message'] + 1}–{summary['last_message'] + 1}"
    if summary["first_message"] == summary["last_message"]:
        span = f"message {summary['first_message'] + 1}"
    note = f"{_METHOD_WORDS.get(summary['method'], summary['method'])}, replaces {span}"
    if summary["superseded_by"] is not None:
        note += f"; later folded into summary {summary['superseded_by'] + 1}"
    content = closed_markdown(summary["content"])
    quoted = [f"> {line}" if line else ">" for line in content.splitlines()]
    return [f"> **Summary {index + 1}** ({note})", ">", *quoted, ""]


def _stats_line(stats: dict[str, Any]) -> str:
    parts = []
    if stats.get("prompt_tokens") is not None:
        parts.append(f"{stats['prompt_tokens']} prompt tokens")
    if stats.get("reused_tokens"):
        parts.append(f"{stats['reused_tokens']} reused")
    if stats.get("generated_tokens") is not None:
        parts.append(f"{stats['generated_tokens']} generated")
    if stats.get("ttft_s") is not None:
        parts.append(f"first token {stats['ttft_s']:.2f} s")
    if stats.get("tokens_per_s") is not None:
        parts.append(f"{stats['tokens_per_s']:.1f} tok/s")
    if stats.get("peak_memory_bytes") is not None:
        parts.append(f"peak memory {_size(stats['peak_memory_bytes'])}")
    if stats.get("kv_bits") is not None:
        parts.append(f"{stats['kv_bits']}-bit KV cache")
    return " · ".join(parts)


def _documents(documents: list[dict[str, Any]]) -> list[str]:
    if not documents:
        return []
    lines = ["## Documents", ""]
    for document in documents:
        total = document["segments_total"]
        done = len(document["segments"])
        progress = f"{done} of {total} segments" if total else f"{done} segments"
        lines += [
            f"### {document['name']}",
            "",
            f"{_size(document['size_bytes'])} · {progress} of {document['segment_tokens']}"
            f" tokens · {document['status']} · sha256 `{document['sha256']}`",
            "",
        ]
        if document["error"]:
            lines += [f"**Error:** {document['error']}", ""]
        for segment in document["segments"]:
            lines += [
                f"#### Segment {segment['segment_index'] + 1} ({segment['token_count']} tokens)",
                "",
                segment["notes"],
                "",
            ]
    return lines


def _when(timestamp: str) -> str:
    return parse_time(timestamp).strftime("%Y-%m-%d %H:%M:%S UTC")


def _size(size_bytes: int) -> str:
    if size_bytes < 1024:
        return f"{size_bytes} bytes"
    size = size_bytes / 1024
    for unit in ("KB", "MB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"
