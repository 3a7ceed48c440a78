"""An outline of HTML that two renderers can be compared by: the spec tests' normaliser.

`outline(html)` keeps what a reader of Qt rich text sees and drops what Qt cannot show
or what the app renders differently on purpose. See `test_commonmark_spec` for why each
rule is fair. The outline is a list of strings: ``<tag attr=value>`` and ``</tag>`` for
the kept elements, and text runs in double quotes (``'"text"'``), so that text which
looks like a tag (escaped HTML) is never mistaken for one.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from app.core.text.code_html import COPY_CODE_SCHEME
from app.core.text.link_policy import is_openable
from app.core.text.qt_html_renderer import CHECKED_BOX, UNCHECKED_BOX

BLOCK_TAGS = {
    "p",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "ul",
    "ol",
    "li",
    "pre",
    "blockquote",
    "table",
    "tr",
    "th",
    "td",
    "hr",
    "br",
}
INLINE_TAGS = {"em", "strong", "del", "a", "code"}
ALIASES = {"b": "strong", "i": "em", "s": "del", "strike": "del"}
VOID = {"br", "hr", "img", "input", "meta", "link"}
_SPACES = re.compile(r"[ \t\n\r\f]+")  # not \xa0: a no-break space is visible


class _Node:
    __slots__ = ("attrs", "children", "parent", "tag")

    def __init__(self, tag: str, attrs: dict[str, str], parent: _Node | None):
        self.tag = tag
        self.attrs = attrs
        self.children: list[_Node | str] = []
        self.parent = parent


class _TreeBuilder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = _Node("#root", {}, None)
        self._current = self.root

    def handle_starttag(self, tag, attrs):
        node = _Node(
            tag, {k: v if v is not None else "" for k, v in attrs}, self._current
        )
        self._current.children.append(node)
        if tag not in VOID:
            self._current = node

    def handle_startendtag(self, tag, attrs):
        self._current.children.append(
            _Node(tag, {k: v if v is not None else "" for k, v in attrs}, self._current)
        )

    def handle_endtag(self, tag):
        node = self._current
        while node is not self.root and node.tag != tag:
            node = node.parent
        if node is not self.root:
            self._current = node.parent

    def handle_data(self, data):
        self._current.children.append(data)


def _text_of(node: _Node) -> str:
    parts: list[str] = []
    stack: list[_Node | str] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
        else:
            stack.extend(reversed(item.children))
    return "".join(parts)


def _find(node: _Node, tag: str) -> _Node | None:
    stack: list[_Node | str] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, _Node):
            if item.tag == tag:
                return item
            stack.extend(reversed(item.children))
    return None


def _is_code_widget(node: _Node) -> bool:
    """The app's code block: a table holding a ``copy-code:`` link."""
    if node.tag != "table":
        return False
    link = _find(node, "a")
    return link is not None and link.attrs.get("href", "").startswith(
        COPY_CODE_SCHEME + ":"
    )


def _alignment(node: _Node) -> str:
    align = node.attrs.get("align", "")
    style = node.attrs.get("style", "")
    if not align and "text-align" in style:
        align = style.split("text-align", 1)[1].lstrip(": ").split(";")[0].strip()
    return align


def outline(html: str) -> list[str]:
    """The comparable outline of an HTML fragment."""
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    out: list = []  # tags as strings, text as 1-tuples
    # Iterative walk: ("open", node) / ("close", tag) / text.
    stack: list[tuple[str, object]] = [("children", builder.root)]
    while stack:
        action, item = stack.pop()
        if action == "close":
            out.append(f"</{item}>")
            continue
        if action == "text":
            out.append((_SPACES.sub(" ", item),))
            continue
        if action == "pre":
            out += ["<pre>", (item.rstrip("\n"),), "</pre>"]
            continue
        node: _Node = item
        if action == "children":
            for child in reversed(node.children):
                if isinstance(child, str):
                    stack.append(("text", child))
                else:
                    stack.append(("node", child))
            continue
        tag = ALIASES.get(node.tag, node.tag)
        if tag == "pre" or _is_code_widget(node):
            pre = node if tag == "pre" else _find(node, "pre")
            stack.append(("pre", _text_of(pre) if pre is not None else ""))
            continue
        if tag == "img":
            source = node.attrs.get("src", "")
            label = node.attrs.get("alt", "") or source
            if is_openable(source):
                out += [f"<a href={source}>", (_SPACES.sub(" ", label),), "</a>"]
            else:
                out.append((_SPACES.sub(" ", label),))
            continue
        if tag == "input" and node.attrs.get("type") == "checkbox":
            out.append((CHECKED_BOX if "checked" in node.attrs else UNCHECKED_BOX,))
            continue
        if tag == "a" and not is_openable(node.attrs.get("href", "")):
            tag = ""  # inert: the app shows such a link as plain text
        if tag in BLOCK_TAGS or tag in INLINE_TAGS:
            if tag == "a":
                opening = f"<a href={node.attrs.get('href', '')}>"
            elif tag == "ol":
                opening = f"<ol start={node.attrs.get('start', '1') or '1'}>"
            elif tag in ("th", "td"):
                opening = f"<{tag} align={_alignment(node)}>"
            else:
                opening = f"<{tag}>"
            out.append(opening)
            if tag not in VOID:
                stack.append(("close", tag))
        stack.append(("children", node))
    return _tidy(out)


def _tidy(items: list[str]) -> list[str]:
    """Merge adjacent text, trim spaces next to block boundaries (Qt drops them), quote text."""
    merged: list[str | tuple[str]] = []  # text as 1-tuples while merging
    for item in items:
        if isinstance(item, tuple) and merged and isinstance(merged[-1], tuple):
            merged[-1] = (merged[-1][0] + item[0],)
        else:
            merged.append(item)

    def boundary(item) -> bool:
        return isinstance(item, str) and item.strip("</>").split(" ")[0] in BLOCK_TAGS

    result: list[str] = []
    for index, item in enumerate(merged):
        if isinstance(item, str):
            result.append(item)
            continue
        text = item[0]
        if index > 0 and merged[index - 1] == "<pre>":
            result.append(f'"{text}"')
            continue
        if index == 0 or boundary(merged[index - 1]):
            text = text.lstrip(" ")
        if index == len(merged) - 1 or boundary(merged[index + 1]):
            text = text.rstrip(" ")
        if text:
            result.append(f'"{text}"')
    return result
