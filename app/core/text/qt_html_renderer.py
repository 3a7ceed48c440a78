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

    def render_block(self, tokens: Sequence[Token]) -> str:
        """The HTML of one top-level block's tokens."""
        out: list[str] = []
        for token in tokens:
            kind = token.type
            if kind == "inline":
                self._render_inline(token.children or [], out)
            elif kind in _PLAIN_BLOCK_TAGS:
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
                task_list = "contains-task-list" in str(token.attrs.get("class", ""))
                style = ' style="list-style-type: none;"' if task_list else ""
                out.append(f"<ul{style}>")
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
        self, children: Sequence[Token], out: list[str], piece_chars: int = 0
    ) -> None:
        """Render inline tokens into ``out``; with ``piece_chars``, cut (`_CUT`) where
        a piece has that many characters, closing and reopening the open tags."""
        opened: list[tuple[str, str]] = []  # (opening HTML, closing tag) of each open
        open_tags: dict[str, int] = {}
        size = 0  # characters since the last cut

        def cut() -> None:
            out.extend(f"</{tag}>" for _, tag in reversed(opened) if tag)
            out.append(_CUT)
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
