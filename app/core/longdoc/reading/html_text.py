"""HTML to the text a reader sees, with the standard library's parser, as a stream.

A saved web page is mostly markup, scripts and styles; the model should get the words,
with paragraphs, headings, list items and table rows on lines of their own (the
segmenter cuts at those). `html.parser.HTMLParser` is fed the decoded file piece by
piece and the text found so far is handed out after each piece, so memory stays
bounded by a piece, not by the page. No browser engine: scripts are never run, and
what a page builds with them is not there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from html.parser import HTMLParser

# Their content is not text a person reads.
_HIDDEN = frozenset({"script", "style", "noscript", "template", "svg", "head"})
_BLOCK_TAGS = """address article aside blockquote caption dd details dialog div dl dt fieldset
    figcaption figure footer form h1 h2 h3 h4 h5 h6 header hr li main nav ol p pre
    section summary table tbody thead tfoot tr ul"""
_BLOCKS = frozenset(_BLOCK_TAGS.split())
_SPACES = re.compile(r"[ \t\r\n\f\v]+")


class _TextParser(HTMLParser):
    """Collects visible text; `take` returns what was found since the last call."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._pieces: list[str] = []
        self._hidden = 0  # depth inside elements whose content is not shown
        self._pre = 0
        self._at_line_start = True
        self._title = False

    def take(self) -> str:
        text = "".join(self._pieces)
        self._pieces.clear()
        return text

    def _newline(self, count: int = 2) -> None:
        if not self._at_line_start:
            self._pieces.append("\n" * count)
            self._at_line_start = True

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "title":
            self._title = True
            return
        if tag in _HIDDEN:
            self._hidden += 1
            return
        if tag == "br":
            self._newline(1)
        elif tag in _BLOCKS:
            self._newline()
            if tag == "li":
                self._pieces.append("- ")
        elif tag in ("td", "th"):
            self._pieces.append(" | " if not self._at_line_start else "")
        if tag == "pre":
            self._pre += 1

    def handle_endtag(self, tag) -> None:
        if tag == "title":
            self._title = False
            self._newline()
            return
        if tag in _HIDDEN:
            self._hidden = max(0, self._hidden - 1)
            return
        if tag == "pre":
            self._pre = max(0, self._pre - 1)
        if tag in _BLOCKS:
            self._newline()

    def handle_data(self, data: str) -> None:
        if self._hidden and not self._title:
            return
        if not self._pre:
            data = _SPACES.sub(" ", data)
            if self._at_line_start:
                data = data.lstrip()
        if data:
            self._pieces.append(data)
            self._at_line_start = data.endswith("\n")


def html_to_text(html: Iterable[str]) -> Iterator[str]:
    """Yield the visible text of an HTML page arriving in pieces.

    Args:
        html: The page's decoded text in consecutive pieces.

    Yields:
        Its text, in pieces (some may be empty).
    """
    parser = _TextParser()
    for piece in html:
        parser.feed(piece)
        yield parser.take()
    parser.close()
    yield parser.take()
