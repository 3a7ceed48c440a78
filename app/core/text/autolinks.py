"""Bare web and mail addresses become links (GFM's "extended autolinks"), in linear time.

Chat models write ``see https://example.com/docs`` far more often than ``<https://…>``.
GFM links ``www.``, ``http://`` and ``https://`` addresses and e-mail addresses found in
plain text, trimming trailing punctuation, unbalanced closing parentheses and a trailing
entity-like ``&name;``. This runs as a markdown-it core rule over the text tokens the
inline parser left, skipping text inside links. Every scan moves forward and looks at
each character a bounded number of times, so a 100 KB run of dots, ``@`` or ``www.``
costs what ordinary text costs (the mdit-py-plugins rule copies the rest of the line at
every candidate, which is quadratic).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token

_START = re.compile(r"www\.|https?://|@")
_DOMAIN = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")
_MAIL_DOMAIN = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)+")
_PATH = re.compile(r"[^\s<]*")
_LOCAL_CHARS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.+-_"
)
_TRAILING = frozenset("?!.,:*_~")
_OPENERS_BEFORE = frozenset(" \t\n*_~(")
# A text token right after these may start with a link (GFM: line start or delimiter).
_LINKABLE_AFTER = {
    "softbreak",
    "hardbreak",
    "em_open",
    "em_close",
    "strong_open",
    "strong_close",
    "s_open",
    "s_close",
}


def autolinks_plugin(md: MarkdownIt) -> None:
    """Add the autolink core rule to a parser."""
    md.core.ruler.after("inline", "extended_autolinks", _autolink_rule)


def find_links(text: str, at_line_start: bool = True) -> list[tuple[int, int, str]]:
    """The extended autolinks in one piece of plain text.

    Args:
        text: Text outside any link.
        at_line_start: Whether a link may start at the first character (the text
            follows a line start or an emphasis delimiter).

    Returns:
        ``(start, end, href)`` for each link, in order.
    """
    links: list[tuple[int, int, str]] = []
    position = 0
    while (match := _START.search(text, position)) is not None:
        start = match.start()
        if match.group() == "@":
            found = _email(text, start)
        elif (start == 0 and at_line_start) or (
            start > 0 and text[start - 1] in _OPENERS_BEFORE
        ):
            found = _web_address(text, start, match.end(), match.group() == "www.")
        else:
            found = None
        if found is None:
            position = match.end()
            continue
        links.append(found)
        position = found[1]
    return links


def _web_address(
    text: str, start: int, after_prefix: int, www: bool
) -> tuple[int, int, str] | None:
    domain = _DOMAIN.match(text, start if www else after_prefix)
    if domain is None:
        return None
    segments = domain.group().split(".")
    if len(segments) < 2 or any("_" in s for s in segments[-2:]):
        return None
    path = _PATH.match(text, domain.end())
    assert path is not None, "_PATH matches the empty string too"
    end = _trim(text, start, path.end())
    if end <= domain.start():
        return None
    address = text[start:end]
    return start, end, ("http://" + address) if www else address


def _trim(text: str, start: int, end: int) -> int:
    """Drop trailing punctuation, unbalanced ``)`` and a trailing entity-like ``&x;``."""
    opened = text.count("(", start, end)
    closed = text.count(")", start, end)
    while end > start:
        last = text[end - 1]
        if last in _TRAILING:
            end -= 1
        elif last == ")" and closed > opened:
            end -= 1
            closed -= 1
        elif last == ";":
            ampersand = text.rfind("&", start, end - 1)
            name = text[ampersand + 1 : end - 1] if ampersand >= 0 else ""
            if not (name.isascii() and name.isalnum()):
                break
            end = ampersand
        else:
            break
    return end


def _email(text: str, at: int) -> tuple[int, int, str] | None:
    local_start = at
    while local_start > 0 and text[local_start - 1] in _LOCAL_CHARS:
        local_start -= 1
    if local_start == at:
        return None
    domain = _MAIL_DOMAIN.match(text, at + 1)
    if domain is None or domain.group()[-1] in "-_":
        return None
    if domain.end() < len(text) and text[domain.end()] == "@":
        return None
    address = text[local_start : domain.end()]
    return local_start, domain.end(), "mailto:" + address


def _autolink_rule(state: StateCore) -> None:
    for token in state.tokens:
        if token.type == "inline" and token.children:
            token.children = _linked(state.md, token.children)


def _linked(md: MarkdownIt, children: Sequence[Token]) -> list[Token]:
    result: list[Token] = []
    inside_link = 0
    previous = ""
    for token in children:
        if token.type == "link_open":
            inside_link += 1
        elif token.type == "link_close":
            inside_link -= 1
        if token.type != "text" or inside_link or not token.content:
            result.append(token)
            previous = token.type
            continue
        links = find_links(token.content, not previous or previous in _LINKABLE_AFTER)
        if not links:
            result.append(token)
            previous = token.type
            continue
        text = token.content
        cursor = 0
        for start, end, href in links:
            url = md.normalizeLink(href)
            if not md.validateLink(url):
                continue
            if start > cursor:
                result.append(_text(text[cursor:start], token.level))
            opening = Token("link_open", "a", 1)
            opening.attrs = {"href": url}
            opening.markup = "autolink"
            opening.info = "auto"
            opening.level = token.level
            closing = Token("link_close", "a", -1)
            closing.markup = "autolink"
            closing.info = "auto"
            closing.level = token.level
            result += [opening, _text(text[start:end], token.level + 1), closing]
            cursor = end
        if cursor < len(text):
            result.append(_text(text[cursor:], token.level))
        previous = "text"
    return result


def _text(content: str, level: int) -> Token:
    token = Token("text", "", 0)
    token.content = content
    token.level = level
    return token
