"""Render a streaming reply again and again, re-parsing only the part that can still change.

A reply grows a few characters at a time and is shown after every burst. Rendering it
whole each time is quadratic over the reply. CommonMark's block structure is decided
line by line, so once a top-level block is followed by another block that starts on a
complete line, no text appended later can change it: it is *settled*. `IncrementalMarkdown`
keeps the HTML of settled blocks and parses only from the first unsettled block on,
which is a fresh top-level position where the parser's state is the same as in a
whole-document parse. The result equals `render_markdown` of the whole text.

Why "followed by a block on a complete line" and not just "followed by a block": a
half-written last line can still change sides (``#`` is an empty heading that ends the
paragraph above; ``#a`` continues that paragraph).

Two constructs are document-wide: link reference definitions (``[x]: /url``, which can
turn earlier ``[x]`` into links) and footnotes (numbered across the reply, listed at its
end). Once the text has either, every render parses the whole text, which is always
correct; views still only redraw the blocks whose HTML changed.
"""

from __future__ import annotations

from markdown_it.token import Token

from app.core.text.markdown_html import RenderedMarkdown, clean_text
from app.core.text.markdown_parser import Block, parse, split_blocks
from app.core.text.markdown_theme import LIGHT_THEME, MarkdownTheme
from app.core.text.qt_html_renderer import QtHtmlRenderer


def settled_count(blocks: list[Block], text: str) -> int:
    """How many leading blocks no appended text can change.

    Args:
        blocks: The top-level blocks of ``text``'s tokens.
        text: The parsed text.
    """
    complete_lines = text.count("\n")
    settled = 0
    for index in range(1, len(blocks)):
        first_line = blocks[index].first_line
        if first_line < 0 or first_line >= complete_lines:
            break
        settled = index
    return settled


class IncrementalMarkdown:
    """Renders successive versions of a growing text, each as `render_markdown` would.

    Not thread-safe: one render at a time (any thread).

    Args:
        theme: Colours.
    """

    def __init__(self, theme: MarkdownTheme = LIGHT_THEME):
        self.theme = theme
        self.parsed_chars = 0
        """Characters the last `render` parsed (the work it did)."""
        self._reset()

    def _reset(self) -> None:
        self._source = ""  # the text as given last time
        self._text = ""  # the same, cleaned
        self._offset = 0  # where the unsettled part of _text starts (a line start)
        self._settled_blocks: list[str] = []
        self._settled_code: list[str] = []
        self._whole = False  # document-wide constructs seen: parse everything

    def work(self, text: str) -> int:
        """About how many characters `render` would parse for ``text`` (to decide
        whether it is worth a worker thread)."""
        if self._whole or not text.startswith(self._source):
            return len(text)
        return len(text) - self._offset

    def render(self, text: str) -> RenderedMarkdown:
        """Render ``text``; cheap when it extends the text of the previous call.

        Args:
            text: The reply so far. Text that does not extend the previous one (an
                edit) is rendered from scratch.
        """
        if text.startswith(self._source) and not self._source.endswith("\r"):
            cleaned = self._text + clean_text(text[len(self._source) :])
        else:
            self._reset()
            cleaned = clean_text(text)
        self._source, self._text = text, cleaned
        if self._whole:
            return self._render_whole(cleaned)
        tail = cleaned[self._offset :]
        env: dict = {}
        tokens = parse(tail, env)
        self.parsed_chars = len(tail)
        if _document_wide(env):
            self._whole = True
            return self._render_whole(cleaned)
        blocks = split_blocks(tokens)
        settled = settled_count(blocks, tail)
        renderer = QtHtmlRenderer(self.theme, first_code_index=len(self._settled_code))
        html = [
            piece
            for block in blocks[:settled]
            for piece in self._render(renderer, tokens, block)
        ]
        self._settled_blocks += html
        self._settled_code += renderer.code_blocks
        if settled:
            self._offset += _line_offset(tail, blocks[settled].first_line)
        renderer = QtHtmlRenderer(self.theme, first_code_index=len(self._settled_code))
        open_html = [
            piece
            for block in blocks[settled:]
            for piece in self._render(renderer, tokens, block)
        ]
        return RenderedMarkdown(
            tuple(self._settled_blocks) + tuple(open_html),
            tuple(self._settled_code) + tuple(renderer.code_blocks),
            settled=len(self._settled_blocks),
        )

    def _render_whole(self, text: str) -> RenderedMarkdown:
        tokens = parse(text)
        self.parsed_chars = len(text)
        blocks = split_blocks(tokens)
        renderer = QtHtmlRenderer(self.theme)
        html: list[str] = []
        settled = settled_count(blocks, text)
        settled_pieces = 0
        for index, block in enumerate(blocks):
            html += self._render(renderer, tokens, block)
            if index + 1 == settled:
                settled_pieces = len(html)
        return RenderedMarkdown(
            tuple(html), tuple(renderer.code_blocks), settled=settled_pieces
        )

    @staticmethod
    def _render(
        renderer: QtHtmlRenderer, tokens: list[Token], block: Block
    ) -> list[str]:
        return renderer.render_pieces(tokens[block.start : block.end])


def _document_wide(env: dict) -> bool:
    """Whether a parse found link definitions or footnotes (the parser leaves empty
    footnote tables in ``env`` whenever the text has a ``[``)."""
    footnotes = env.get("footnotes") or {}
    return bool(env.get("references") or footnotes.get("refs") or footnotes.get("list"))


def _line_offset(text: str, line: int) -> int:
    """The index in ``text`` where line ``line`` (0-based) starts."""
    offset = 0
    for _ in range(line):
        offset = text.index("\n", offset) + 1
    return offset
