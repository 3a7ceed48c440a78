"""markdown-it tokens to the HTML subset Qt's rich text draws (``QTextDocument.setHtml``).

Qt understands paragraphs, headings, lists, block quotes, tables, ``pre``, ``code``,
``em``/``strong``/``s``, ``sup`` and ``a``, so most tokens map one to one. The rest is
adapted, and the adaptations are the app's safety rules:

* Text is always escaped; raw HTML never reaches Qt (the parser has it off anyway).
* Images are never loaded: an image becomes a link labelled with its alt text.
* Only `link_policy.is_openable` targets become links; any other link is inert text
  whose target shows as a tooltip.
* Fenced and indented code become `code_html` tables with a Copy link.
* Task list checkboxes are the glyphs ☑ / ☐; footnotes are a numbered list under a rule.
* A top-level paragraph or heading longer than `PIECE_CHARS` is cut into pieces
  (`QtHtmlRenderer.render_pieces`), at a space where there is one: Qt lays out one
  paragraph at once, and a paragraph with no break opportunity costs quadratic time
  (a 200 000-character run took 15 s here, one of 4 000 takes milliseconds). The
  inline tags open at a cut are closed before it and opened again after it.
* Inline formatting nests at most `MAX_INLINE_NESTING` deep: Qt's HTML import is
  quadratic in nesting depth (30 000 nested ``<em>`` take 21 s), and ``*`` runs can
  nest that deep. Past the limit a tag already open is not repeated, which draws the
  same.

The renderer walks the flat token stream with an explicit stack, so no input can make
it recurse.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from markdown_it.token import Token

from app.core.text.code_html import code_block_html
from app.core.text.link_policy import is_openable
from app.core.text.markdown_parser import PLAIN_TEXT_TOKEN
from app.core.text.markdown_theme import MarkdownTheme

MAX_INLINE_NESTING = 8
PIECE_CHARS = 4_000
"""Characters of a top-level paragraph or heading per piece (see `render_pieces`)."""
CHECKED_BOX = "\u2611"
UNCHECKED_BOX = "\u2610"

_INLINE_TAGS = {"em_open": "em", "strong_open": "strong", "s_open": "s"}
_INLINE_CLOSERS = {"em_close", "strong_close", "s_close"}
_PLAIN_BLOCK_TAGS = {
    "blockquote_open": "<blockquote>",
    "blockquote_close": "</blockquote>",
    "bullet_list_close": "</ul>",
    "ordered_list_close": "</ol>",
    "list_item_close": "</li>",
    "tr_open": "<tr>",
    "tr_close": "</tr>",
    "th_close": "</th>",
    "td_close": "</td>",
    "table_close": "</table>",
    "hr": "<hr/>",
    # A GitHub alert ("> [!NOTE]") is a quote whose first line names its kind.
    "alert_open": "<blockquote>",
    "alert_close": "</blockquote>",
    "alert_title_open": "<p><b>",
    "alert_title_close": "</b></p>",
    "footnote_block_open": "<hr/><ol>",
    "footnote_block_close": "</ol>",
    "footnote_open": "<li>",
    "footnote_close": "</li>",
}
_SILENT = {"thead_open", "thead_close", "tbody_open", "tbody_close", "footnote_anchor"}
_CUT = "\x00"
"""Marks a cut in inline output (`clean_text` removes NUL from every text rendered)."""
_SPLITTABLE = {"paragraph_open", "heading_open"}
_CUT_INSIDE = {"bullet_list_open", "ordered_list_open", "blockquote_open"}
"""Blocks a huge paragraph inside which is cut too (a list item, a quote)."""
CODE_PIECE_CHARS = 16_000
"""A code block longer than this is shown in pieces of about `PIECE_CHARS` lines'
worth (shorter ones, most code, stay one table)."""


@dataclass
class _OpenBlock:
    """A block element open at a cut: closed before it, opened again after it.

    Attributes:
        closing: Its closing tag.
        again: Its opening tag after a cut (a list's without markers: the item goes
            on, it is not a new one).
        list_start: For a list, the number its items start at (0: a bullet list).
        items: For a list, the items opened so far.
        continued: For a list, True once cut: its next item opens a list with
            markers again.
        style: For a list, its own style attribute (a task list has no markers).
    """

    closing: str
    again: str
    list_start: int = -1
    items: int = 0
    continued: bool = False
    style: str = ""


def escape(text: str) -> str:
    """Escape text for Qt rich text (quotes need no escaping outside attributes)."""
    return html.escape(text, quote=False)


def _attribute(value: str) -> str:
    return html.escape(value, quote=True)


class QtHtmlRenderer:
    """Renders top-level blocks of one document, numbering its code blocks in order.

    Args:
        theme: Colours.
        first_code_index: Number given to the first code block (blocks rendered
            earlier in the same reply hold the ones before).
    """

    def __init__(self, theme: MarkdownTheme, first_code_index: int = 0):
        self.theme = theme
        self.code_blocks: list[str] = []
        self._first_code_index = first_code_index

    def render_pieces(self, tokens: Sequence[Token]) -> list[str]:
        """The HTML of one top-level block's tokens, in pieces of about `PIECE_CHARS`.

        Only a paragraph or heading is cut (anything else is one piece). Each piece is
        a whole element of the block's tag; the pieces after the first have no top
        margin and the pieces before the last no bottom margin, so the text reads on,
        a line further down. Cuts depend only on the text before them, so a growing
        paragraph keeps its earlier pieces.
        """
        if tokens and tokens[0].type in ("fence", "code_block") and len(tokens) == 1:
            return self._code_pieces(tokens[0])
        if (
            tokens
            and tokens[0].type in _CUT_INSIDE
            and any(t.type == "inline" and len(t.content) > PIECE_CHARS for t in tokens)
        ):
            # A huge item or quoted paragraph: cut like a paragraph, the list and
            # item (or quote) closed before each cut and opened again after it.
            return self.render_block(tokens, PIECE_CHARS).split(_CUT)
        if (
            len(tokens) != 3
            or tokens[0].type not in _SPLITTABLE
            or tokens[0].hidden
            or tokens[1].type != "inline"
        ):
            return [self.render_block(tokens)]
        out: list[str] = []
        self._render_inline(tokens[1].children or [], out, PIECE_CHARS)
        inner = "".join(out).split(_CUT)
        tag = tokens[0].tag
        pieces = []
        for index, text in enumerate(inner):
            styles = []
            if index > 0:
                styles.append("margin-top: 0px;")
            if index < len(inner) - 1:
                styles.append("margin-bottom: 0px;")
            style = f' style="{" ".join(styles)}"' if styles else ""
            pieces.append(f"<{tag}{style}>{text}</{tag}>")
        return pieces

    def render_block(self, tokens: Sequence[Token], piece_chars: int = 0) -> str:
        """The HTML of one top-level block's tokens.

        With ``piece_chars``, a paragraph inside (a list item's, a quote's) longer than
        that is cut (`_CUT`): the open inline tags and the open paragraphs, items,
        lists and quotes are closed before each cut and opened again after it (the
        list without markers, so the item reads on; its next item opens a list with
        markers again, numbered on). Not inside a table.
        """
        out: list[str] = []
        # The block elements open now (for cuts); None while a table is open.
        blocks: list[_OpenBlock] | None = [] if piece_chars else None
        tables = 0
        for token in tokens:
            kind = token.type
            if kind == "inline":
                cuttable = blocks is not None and tables == 0
                self._render_inline(
                    token.children or [],
                    out,
                    piece_chars if cuttable else 0,
                    blocks if cuttable else None,
                )
                continue
            if blocks is not None:
                tables += (kind == "table_open") - (kind == "table_close")
                _track(blocks, token, out)
            if kind in _PLAIN_BLOCK_TAGS:
                out.append(_PLAIN_BLOCK_TAGS[kind])
            elif kind in _SILENT:
                continue
            elif kind == "paragraph_open":
                out.append("" if token.hidden else "<p>")
            elif kind == "paragraph_close":
                out.append("" if token.hidden else "</p>")
            elif kind == "heading_open":
                out.append(f"<{token.tag}>")
            elif kind == "heading_close":
                out.append(f"</{token.tag}>")
            elif kind == "bullet_list_open":
                out.append(f"<ul{_list_style(token)}>")
            elif kind == "ordered_list_open":
                start = int(token.attrs.get("start", 1))
                out.append(f'<ol start="{start}">' if start != 1 else "<ol>")
            elif kind == "list_item_open":
                out.append(self._list_item(token))
            elif kind in ("fence", "code_block"):
                out.append(self._code_block(token))
            elif kind == "table_open":
                out.append(
                    f'<table cellspacing="0" cellpadding="0" style="border-collapse:'
                    f" collapse; border: 1px solid {self.theme.border};"
                    f' margin-bottom: 8px;">'
                )
            elif kind in ("th_open", "td_open"):
                out.append(self._cell(token))
            elif kind == PLAIN_TEXT_TOKEN:
                out.append(f"<p>{escape(token.content).replace(chr(10), '<br/>')}</p>")
            elif token.content:  # anything unforeseen is shown as text, never lost
                out.append(f"<p>{escape(token.content)}</p>")
        return "".join(out)

    # -- blocks ------------------------------------------------------------------------

    def _list_item(self, token: Token) -> str:
        meta = token.meta or {}
        if "checked" not in meta:
            return "<li>"
        box = CHECKED_BOX if meta["checked"] else UNCHECKED_BOX
        return f"<li>{box} "

    def _code_pieces(self, token: Token) -> list[str]:
        """A code block as one table, or a huge one (over `CODE_PIECE_CHARS`) as
        tables of about `PIECE_CHARS` characters cut at line ends, the label and the
        Copy link (which copies it whole) on the first."""
        source = token.content[:-1] if token.content.endswith("\n") else token.content
        if len(source) <= CODE_PIECE_CHARS:
            return [self._code_block(token)]
        info = token.info.strip().split(maxsplit=1) if token.type == "fence" else []
        language = info[0] if info else ""
        index = self._first_code_index + len(self.code_blocks)
        self.code_blocks.append(source)
        parts = _code_parts(source, PIECE_CHARS)
        return [
            code_block_html(
                part,
                language,
                index,
                self.theme,
                first=i == 0,
                last=i == len(parts) - 1,
            )
            for i, part in enumerate(parts)
        ]

    def _code_block(self, token: Token) -> str:
        source = token.content[:-1] if token.content.endswith("\n") else token.content
        info = token.info.strip().split(maxsplit=1) if token.type == "fence" else []
        language = info[0] if info else ""
        index = self._first_code_index + len(self.code_blocks)
        self.code_blocks.append(source)
        return code_block_html(source, language, index, self.theme)

    def _cell(self, token: Token) -> str:
        style = str(token.attrs.get("style", ""))
        align = style.partition("text-align:")[2].strip() if style else ""
        align_attribute = (
            f' align="{align}"' if align in ("left", "center", "right") else ""
        )
        header = token.type == "th_open"
        background = f" background-color: {self.theme.table_header};" if header else ""
        tag = "th" if header else "td"
        return (
            f'<{tag}{align_attribute} style="border: 1px solid {self.theme.border};'
            f' padding: 3px 6px;{background}">'
        )

    # -- inline ------------------------------------------------------------------------

    def _render_inline(
        self,
        children: Sequence[Token],
        out: list[str],
        piece_chars: int = 0,
        blocks: list[_OpenBlock] | None = None,
    ) -> None:
        """Render inline tokens into ``out``; with ``piece_chars``, cut (`_CUT`) where
        a piece has that many characters, closing and reopening the open tags (and
        the open ``blocks`` around them)."""
        opened: list[tuple[str, str]] = []  # (opening HTML, closing tag) of each open
        open_tags: dict[str, int] = {}
        size = 0  # characters since the last cut

        def cut() -> None:
            out.extend(f"</{tag}>" for _, tag in reversed(opened) if tag)
            out.extend(block.closing for block in reversed(blocks or []))
            out.append(_CUT)
            for block in blocks or []:
                out.append(block.again)
                block.continued = block.list_start >= 0
            out.extend(opening for opening, _ in opened)

        for token in children:
            kind = token.type
            if piece_chars and size >= piece_chars and kind not in _INLINE_CLOSERS:
                cut()
                size = 0
            start = len(out)
            if kind in ("text", "text_special"):
                text = token.content
                while piece_chars and len(text) > piece_chars - size:
                    room = piece_chars - size
                    space = text.rfind(" ", room // 2, room)
                    end = space + 1 if space >= 0 else room
                    out.append(escape(text[:end]))
                    text = text[end:]
                    cut()
                    size = 0
                    start = len(out)
                out.append(escape(text))
            elif kind == "softbreak":
                out.append("\n")
            elif kind == "hardbreak":
                out.append("<br/>")
            elif kind == "code_inline":
                out.append(f"<code>{escape(token.content)}</code>")
            elif kind in _INLINE_TAGS:
                tag = _INLINE_TAGS[kind]
                if len(opened) >= MAX_INLINE_NESTING and open_tags.get(tag):
                    opened.append(("", ""))
                    continue
                open_tags[tag] = open_tags.get(tag, 0) + 1
                opened.append((f"<{tag}>", tag))
                out.append(f"<{tag}>")
            elif kind in _INLINE_CLOSERS or kind == "link_close":
                closer = opened.pop()[1] if opened else ""
                if closer in _INLINE_TAGS.values():
                    open_tags[closer] -= 1
                if closer:
                    out.append(f"</{closer}>")
            elif kind == "link_open":
                tag = self._link_open(token, out)
                opened.append((out[-1], tag))
            elif kind == "image":
                out.append(self._image(token))
            elif kind == "footnote_ref":
                out.append(f"<sup>[{(token.meta or {}).get('id', 0) + 1}]</sup>")
            elif token.content:
                out.append(escape(token.content))
            size += sum(len(part) for part in out[start:])
        while opened:  # balanced in practice; never leave a tag open
            closer = opened.pop()[1]
            if closer:
                out.append(f"</{closer}>")

    def _link_open(self, token: Token, out: list[str]) -> str:
        href = str(token.attrs.get("href", ""))
        title = str(token.attrs.get("title", ""))
        if is_openable(href):
            tip = f' title="{_attribute(title)}"' if title else ""
            out.append(f'<a href="{_attribute(href)}"{tip}>')
            return "a"
        out.append(f'<span title="{_attribute(href)}">')
        return "span"

    def _image(self, token: Token) -> str:
        source = str(token.attrs.get("src", ""))
        alt = _plain_text(token.children or []) or source
        if is_openable(source):
            tip = _attribute(f"Image: {source}")
            return f'<a href="{_attribute(source)}" title="{tip}">{escape(alt)}</a>'
        return f'<span title="{_attribute(source)}">{escape(alt)}</span>'


def _list_style(token: Token) -> str:
    task_list = "contains-task-list" in str(token.attrs.get("class", ""))
    return ' style="list-style-type: none;"' if task_list else ""


_AGAIN = ' style="margin-top: 0px;"'
_LIST_AGAIN = ' style="list-style-type: none; margin-top: 0px;"'


def _track(blocks: list[_OpenBlock], token: Token, out: list[str]) -> None:
    """Keep ``blocks`` (the open block elements) up to date with ``token``; a list
    cut inside its previous item gets its markers back for the next one."""
    kind = token.type
    if kind in ("paragraph_open", "heading_open") and not token.hidden:
        blocks.append(_OpenBlock(f"</{token.tag}>", f"<{token.tag}{_AGAIN}>"))
    elif kind == "blockquote_open":
        blocks.append(_OpenBlock("</blockquote>", f"<blockquote{_AGAIN}>"))
    elif kind in ("bullet_list_open", "ordered_list_open"):
        tag = "ul" if kind == "bullet_list_open" else "ol"
        start = int(token.attrs.get("start", 1)) if tag == "ol" else 0
        style = _list_style(token) if tag == "ul" else ""
        blocks.append(
            _OpenBlock(f"</{tag}>", f"<{tag}{_LIST_AGAIN}>", start, style=style)
        )
    elif kind == "list_item_open":
        parent = blocks[-1] if blocks else None
        if parent is not None and parent.continued:
            # The list was reopened without markers: a new item needs them back.
            number = parent.list_start + parent.items
            if parent.list_start == 0:
                style = (
                    parent.style[:-1] + ' margin-top: 0px;"' if parent.style else _AGAIN
                )
                out.append(f"</ul><ul{style}>")
            else:
                out.append(f'</ol><ol start="{number}"{_AGAIN}>')
            parent.continued = False
        if parent is not None:
            parent.items += 1
        blocks.append(_OpenBlock("</li>", "<li>"))
    elif (
        kind
        in (
            "paragraph_close",
            "heading_close",
            "blockquote_close",
            "bullet_list_close",
            "ordered_list_close",
            "list_item_close",
        )
        and not (kind == "paragraph_close" and token.hidden)
        and blocks
    ):
        blocks.pop()


def _code_parts(source: str, size: int) -> list[str]:
    """``source`` cut into parts of about ``size`` characters, after a line end
    where there is one in a part's second half."""
    parts: list[str] = []
    start = 0
    while len(source) - start > size:
        end = start + size
        newline = source.rfind("\n", start + size // 2, end)
        if newline >= 0:
            parts.append(source[start:newline])
            start = newline + 1
        else:
            parts.append(source[start:end])
            start = end
    parts.append(source[start:])
    return parts


def _plain_text(children: Sequence[Token]) -> str:
    """The text of inline tokens without their markup (an image's alt text)."""
    parts: list[str] = []
    for token in children:
        if token.type in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif token.type == "image":
            parts.append(_plain_text(token.children or []))
        else:
            parts.append(token.content)
    return "".join(parts)
