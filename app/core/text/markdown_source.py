"""Writing Markdown that renders as the chat shows it: for the Markdown export.

The chat shows a user's message as typed and a reply as Markdown, each on its own. An
export puts them all in one document, where two things would change what they look
like: a user's ``*`` or ``#`` would become markup, and a reply cut off inside a code
fence would turn the rest of the export into code. `literal_markdown` escapes text so
it renders as typed; `closed_markdown` closes a fence the text leaves open.
"""

from __future__ import annotations

import re

from app.core.text.markdown_html import clean_text
from app.core.text.markdown_parser import parse, split_blocks

_INLINE_MARKUP = re.compile(r"([\\`*_\[\]<&~|])")
_BLOCK_START = re.compile(r"^([#>+=-])")
_ORDERED_MARKER = re.compile(r"^(\d{1,9})([.)])")


def literal_markdown(text: str) -> str:
    """Markdown that renders as ``text`` reads (line breaks and indentation kept)."""
    lines = clean_text(text).split("\n")
    out: list[str] = []
    for index, line in enumerate(lines):
        body = line.lstrip(" \t")
        indent = line[: len(line) - len(body)].replace("\t", "    ")
        body = _INLINE_MARKUP.sub(r"\\\1", body.rstrip())
        body = _BLOCK_START.sub(r"\\\1", body)
        body = _ORDERED_MARKER.sub(r"\1\\\2", body)
        escaped = "&nbsp;" * len(indent) + body if body else ""
        following = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if escaped and following:
            escaped += "\\"  # a hard line break: the chat keeps the writer's lines
        out.append(escaped)
    return "\n".join(out)


def closed_markdown(text: str) -> str:
    """``text`` with a closing fence added if it ends inside an open code fence."""
    tokens = parse(clean_text(text))
    blocks = split_blocks(tokens)
    if not blocks:
        return text
    last = tokens[blocks[-1].start]
    if last.type != "fence":
        return text
    closing = re.compile(
        rf"^ {{0,3}}{re.escape(last.markup[0])}{{{len(last.markup)},}}[ \t]*$"
    )
    lines = text.rstrip("\n").split("\n")
    if blocks[-1].end_line - blocks[-1].first_line > 1 and closing.match(lines[-1]):
        return text
    return text + ("" if text.endswith("\n") else "\n") + last.markup
