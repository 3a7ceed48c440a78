"""Markdown to the HTML subset Qt's rich-text engine draws, with Pygments code colours.

Replies are Markdown: headings, lists, tables, quotes, and above all fenced code blocks.
Qt's own ``setMarkdown`` has no syntax highlighting and no way to put a copy link on a
code block, so this small renderer covers what chat models write (CommonMark's common
blocks plus GFM tables and strikethrough), tolerates half-written input while a reply
streams (an open fence is a code block until it closes), and returns the code blocks so
the view can copy one when its ``copy-code:N`` link is clicked.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import lru_cache

COPY_CODE_SCHEME = "copy-code"

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+#.-]*)[^`]*$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_QUOTE = re.compile(r"^\s{0,3}>\s?(.*)$")
_LIST_ITEM = re.compile(r"^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(
    r"\[([^\]\n]+)\]\(((?:https?://|mailto:)[^)\s]+)(?:\s+\"[^\"]*\")?\)"
)
_AUTOLINK = re.compile(r"\bhttps?://[^\s<>()\[\]]+[^\s<>()\[\].,;:!?'\"]")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_ITALIC = re.compile(
    r"(?<![\*\w])\*(?=\S)(.+?)(?<=\S)\*(?!\*)|(?<![_\w])_(?=\S)(.+?)(?<=\S)_(?!\w)"
)
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING_SIZES = {
    1: "x-large",
    2: "large",
    3: "large",
    4: "medium",
    5: "medium",
    6: "medium",
}


@dataclass(frozen=True)
class MarkdownTheme:
    """Colours of rendered Markdown (CSS colour strings).

    Attributes:
        dark: Whether the background is dark (picks the Pygments style).
        text: Body text.
        muted: Secondary text (code block language, quotes).
        code_background: Background of code blocks and inline code.
        border: Borders of code blocks and tables.
        link: Links.
        table_header: Background of table header cells.
    """

    dark: bool = False
    text: str = "#1f2328"
    muted: str = "#59636e"
    code_background: str = "#f6f8fa"
    border: str = "#d1d9e0"
    link: str = "#0969da"
    table_header: str = "#eef1f4"

    @property
    def pygments_style(self) -> str:
        """The Pygments colour scheme matching the background."""
        return "monokai" if self.dark else "friendly"


LIGHT_THEME = MarkdownTheme()
DARK_THEME = MarkdownTheme(
    dark=True,
    text="#e6edf3",
    muted="#9198a1",
    code_background="#161b22",
    border="#3d444d",
    link="#4493f8",
    table_header="#212830",
)


@dataclass(frozen=True)
class RenderedMarkdown:
    """Rendered HTML and the raw text of its code blocks, in order.

    Attributes:
        html: An HTML fragment for ``QTextDocument.setHtml``.
        code_blocks: The code of each block; ``copy-code:N`` links index into it.
    """

    html: str
    code_blocks: tuple[str, ...]


def clean_text(text: str) -> str:
    """Drop control characters Qt would draw as boxes (random-weight models emit them)."""
    return _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def document_style_sheet(theme: MarkdownTheme) -> str:
    """The CSS to give the QTextDocument that shows rendered Markdown."""
    return (
        f"p {{ margin-top: 0px; margin-bottom: 8px; }}"
        f" a {{ color: {theme.link}; text-decoration: none; }}"
        f" code {{ background-color: {theme.code_background}; font-family: monospace; }}"
        f" pre {{ font-family: monospace; margin: 0px; }}"
        f" li {{ margin-bottom: 2px; }}"
        f" blockquote {{ color: {theme.muted}; }}"
    )


def render_markdown(text: str, theme: MarkdownTheme = LIGHT_THEME) -> RenderedMarkdown:
    """Render Markdown as Qt rich text.

    Args:
        text: Markdown, possibly cut off mid-way (a streaming reply).
        theme: Colours.

    Returns:
        The HTML and the code of each code block.
    """
    code_blocks: list[str] = []
    body = _render_blocks(clean_text(text).split("\n"), theme, code_blocks)
    return RenderedMarkdown(body, tuple(code_blocks))


def _render_blocks(lines: list[str], theme: MarkdownTheme, code: list[str]) -> str:
    out: list[str] = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            i = _code_block(lines, i, fence, theme, code, out)
            continue
        heading = _HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            out.append(
                f'<p style="font-size: {_HEADING_SIZES[level]}; font-weight: 600;'
                f' margin-top: 6px; margin-bottom: 6px;">'
                f"{_inline(heading.group(2), theme)}</p>"
            )
            i += 1
            continue
        if _RULE.match(line):
            out.append("<hr/>")
            i += 1
            continue
        if "|" in line and i + 1 < n and _TABLE_SEPARATOR.match(lines[i + 1]):
            i = _table(lines, i, theme, out)
            continue
        if _QUOTE.match(line):
            quoted = []
            while i < n and (match := _QUOTE.match(lines[i])):
                quoted.append(match.group(1))
                i += 1
            out.append(
                f'<blockquote style="margin-left: 12px;">'
                f"{_render_blocks(quoted, theme, code)}</blockquote>"
            )
            continue
        if _LIST_ITEM.match(line):
            i = _list(lines, i, theme, out)
            continue
        paragraph = []
        while i < n and lines[i].strip() and not _starts_block(lines, i):
            paragraph.append(lines[i])
            i += 1
        if not paragraph:  # a block start that did not parse as one: plain text
            paragraph, i = [line], i + 1
        out.append(f"<p>{_paragraph(paragraph, theme)}</p>")
    return "\n".join(out)


def _starts_block(lines: list[str], i: int) -> bool:
    line = lines[i]
    return bool(
        _FENCE.match(line)
        or _HEADING.match(line)
        or _RULE.match(line)
        or _QUOTE.match(line)
        or _LIST_ITEM.match(line)
        or ("|" in line and i + 1 < len(lines) and _TABLE_SEPARATOR.match(lines[i + 1]))
    )


def _paragraph(lines: list[str], theme: MarkdownTheme) -> str:
    parts = []
    for index, line in enumerate(lines):
        hard_break = line.endswith("  ") or line.endswith("\\")
        text = _inline(line.strip().rstrip("\\"), theme)
        last = index == len(lines) - 1
        parts.append(text + ("" if last else ("<br/>" if hard_break else " ")))
    return "".join(parts)


def _code_block(lines, i, fence, theme, code, out) -> int:
    indent, marker, language = len(fence.group(1)), fence.group(2), fence.group(3)
    body = []
    i += 1
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith(marker[0] * len(marker)) and not stripped.strip(
            marker[0]
        ):
            i += 1
            break
        line = lines[i]
        # Drop the fence's own indentation (a code block inside a list item).
        body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
        i += 1
    source = "\n".join(body).rstrip("\n")
    index = len(code)
    code.append(source)
    label = html.escape(language) if language else "code"
    out.append(
        f'<table width="100%" cellspacing="0" cellpadding="0"'
        f' style="margin-top: 4px; margin-bottom: 8px; border: 1px solid {theme.border};'
        f' background-color: {theme.code_background};">'
        f'<tr><td style="padding: 3px 8px; color: {theme.muted};">{label}</td>'
        f'<td align="right" style="padding: 3px 8px;">'
        f'<a href="{COPY_CODE_SCHEME}:{index}">Copy</a></td></tr>'
        f'<tr><td colspan="2" style="padding: 4px 8px 8px 8px;">'
        f"<pre>{highlight_code(source, language, theme.pygments_style)}</pre>"
        f"</td></tr></table>"
    )
    return i


@lru_cache(maxsize=256)
def highlight_code(source: str, language: str, style: str) -> str:
    """Return ``source`` as HTML spans with inline colours (cached: replies re-render)."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import TextLexer, get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        lexer = get_lexer_by_name(language) if language else TextLexer()
    except ClassNotFound:
        lexer = TextLexer()
    formatter = HtmlFormatter(nowrap=True, noclasses=True, style=style)
    return highlight(source, lexer, formatter).rstrip("\n")


def _table(lines, i, theme, out) -> int:
    header = _cells(lines[i])
    aligns = [_alignment(cell) for cell in _cells(lines[i + 1])]
    i += 2
    rows = []
    while i < len(lines) and "|" in lines[i] and lines[i].strip():
        rows.append(_cells(lines[i]))
        i += 1
    border = f"border: 1px solid {theme.border};"

    def cell(tag: str, text: str, column: int, extra: str = "") -> str:
        align = aligns[column] if column < len(aligns) else "left"
        return (
            f'<{tag} align="{align}" style="{border} padding: 3px 6px; {extra}">'
            f"{_inline(text, theme)}</{tag}>"
        )

    parts = [
        f'<table cellspacing="0" cellpadding="0" style="border-collapse: collapse;'
        f' {border} margin-bottom: 8px;">',
        "<tr>"
        + "".join(
            cell("th", text, c, f"background-color: {theme.table_header};")
            for c, text in enumerate(header)
        )
        + "</tr>",
    ]
    for row in rows:
        padded = row + [""] * (len(header) - len(row))
        parts.append(
            "<tr>"
            + "".join(
                cell("td", text, c) for c, text in enumerate(padded[: len(header)])
            )
            + "</tr>"
        )
    parts.append("</table>")
    out.append("".join(parts))
    return i


def _cells(line: str) -> list[str]:
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]


def _alignment(separator: str) -> str:
    separator = separator.strip()
    if separator.startswith(":") and separator.endswith(":"):
        return "center"
    if separator.endswith(":"):
        return "right"
    return "left"


@dataclass
class _Item:
    indent: int
    ordered: bool
    number: int
    lines: list[str]


def _list(lines, i, theme, out) -> int:
    items: list[_Item] = []
    n = len(lines)
    while i < n:
        line = lines[i]
        match = _LIST_ITEM.match(line)
        if match:
            marker = match.group(2)
            ordered = marker[0].isdigit()
            items.append(
                _Item(
                    indent=len(match.group(1).expandtabs(4)),
                    ordered=ordered,
                    number=int(marker[:-1]) if ordered else 0,
                    lines=[match.group(3)],
                )
            )
            i += 1
            continue
        if not line.strip():
            following = next((j for j in range(i, n) if lines[j].strip()), n)
            if following < n and (
                _LIST_ITEM.match(lines[following]) or lines[following][:1] in " \t"
            ):
                i = following
                continue
            break
        if _FENCE.match(line):
            break  # a code block inside an item: rendered after the list
        if line[:1] in " \t" or not _starts_block(lines, i):
            items[-1].lines.append(line.strip())
            i += 1
            continue
        break
    out.append(_render_list(items, theme))
    return i


def _render_list(items: list[_Item], theme: MarkdownTheme) -> str:
    out: list[str] = []
    stack: list[tuple[int, str]] = []
    for item in items:
        tag = "ol" if item.ordered else "ul"
        while stack and item.indent < stack[-1][0]:
            out.append(f"</li></{stack.pop()[1]}>")
        if stack and item.indent == stack[-1][0]:
            out.append("</li>")
            if stack[-1][1] != tag:
                out.append(f"</{stack.pop()[1]}>")
        if not stack or item.indent > stack[-1][0]:
            start = (
                f' start="{item.number}"' if item.ordered and item.number != 1 else ""
            )
            out.append(f'<{tag}{start} style="margin-top: 0px; margin-bottom: 8px;">')
            stack.append((item.indent, tag))
        out.append(f"<li>{_paragraph(item.lines, theme)}")
    while stack:
        out.append(f"</li></{stack.pop()[1]}>")
    return "".join(out)


def _inline(text: str, theme: MarkdownTheme) -> str:
    """Inline Markdown: code spans, links, bold, italic, strikethrough."""
    saved: list[str] = []

    def keep(fragment: str) -> str:
        saved.append(fragment)
        return f"\x00{len(saved) - 1}\x00"

    text = _CODE_SPAN.sub(
        lambda m: keep(
            f'<code style="background-color: {theme.code_background};">'
            f"{html.escape(m.group(2).strip())}</code>"
        ),
        text,
    )
    text = _LINK.sub(
        lambda m: keep(
            f'<a href="{html.escape(m.group(2), quote=True)}">{html.escape(m.group(1))}</a>'
        ),
        text,
    )
    text = _AUTOLINK.sub(
        lambda m: keep(
            f'<a href="{html.escape(m.group(0), quote=True)}">{html.escape(m.group(0))}</a>'
        ),
        text,
    )
    text = html.escape(text, quote=False)
    text = _BOLD.sub(lambda m: f"<b>{m.group(1) or m.group(2)}</b>", text)
    text = _ITALIC.sub(lambda m: f"<i>{m.group(1) or m.group(2)}</i>", text)
    text = _STRIKE.sub(lambda m: f"<s>{m.group(1)}</s>", text)
    return re.sub(r"\x00(\d+)\x00", lambda m: saved[int(m.group(1))], text)
