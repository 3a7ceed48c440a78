"""Markdown to the HTML subset Qt's rich-text engine draws: the one entry point.

Replies are Markdown. `render_markdown` parses them with a CommonMark parser plus the
GFM extensions (`markdown_parser`) and renders the tokens as Qt rich text
(`qt_html_renderer`): Pygments colours and a ``copy-code:N`` link per code block,
links only to web and mail addresses, images never loaded, raw HTML shown as typed.
A half-written reply renders as far as it goes (an open fence is a code block until it
closes). The result keeps each top-level block's HTML apart (a huge paragraph cut in
pieces), so a view can lay out a long reply in pieces and a streaming reply can re-render only its end
(`incremental_markdown`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.core.text.code_html import COPY_CODE_SCHEME, highlight_code
from app.core.text.markdown_parser import parse, split_blocks
from app.core.text.markdown_theme import (
    DARK_THEME,
    LIGHT_THEME,
    MarkdownTheme,
    document_style_sheet,
)
from app.core.text.qt_html_renderer import QtHtmlRenderer

__all__ = [
    "COPY_CODE_SCHEME",
    "DARK_THEME",
    "LIGHT_THEME",
    "MarkdownTheme",
    "RenderedMarkdown",
    "clean_text",
    "document_style_sheet",
    "highlight_code",
    "render_markdown",
]

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class RenderedMarkdown:
    """Rendered HTML, block by block, and the raw text of its code blocks, in order.

    Attributes:
        blocks: The HTML of each top-level block (paragraph, list, table...), a long
            paragraph or heading as several pieces (`QtHtmlRenderer.render_pieces`).
        code_blocks: The code of each code block; ``copy-code:N`` links index into it.
        settled: How many leading blocks (pieces) can no longer change when text is appended
            to the source (all of them for a finished text; a streaming reply's last
            blocks may still change).
    """

    blocks: tuple[str, ...]
    code_blocks: tuple[str, ...]
    settled: int

    @property
    def html(self) -> str:
        """An HTML fragment for ``QTextDocument.setHtml``."""
        return "\n".join(self.blocks)


def clean_text(text: str) -> str:
    """Drop control characters Qt would draw as boxes (random-weight models emit them)."""
    return _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def render_markdown(text: str, theme: MarkdownTheme = LIGHT_THEME) -> RenderedMarkdown:
    """Render Markdown as Qt rich text.

    Args:
        text: Markdown, possibly cut off mid-way (a streaming reply).
        theme: Colours.

    Returns:
        The HTML of each block and the code of each code block.
    """
    tokens = parse(clean_text(text))
    renderer = QtHtmlRenderer(theme)
    blocks = tuple(
        piece
        for block in split_blocks(tokens)
        for piece in renderer.render_pieces(tokens[block.start : block.end])
    )
    return RenderedMarkdown(blocks, tuple(renderer.code_blocks), settled=len(blocks))
