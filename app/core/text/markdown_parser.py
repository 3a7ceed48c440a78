"""The one configured Markdown parser: CommonMark plus the GFM extensions chat models use.

markdown-it-py parses CommonMark (it passes the whole spec); the GFM pieces come from
its options and plugins: tables, strikethrough (``~~x~~`` and ``~x~``), task list
items and alerts (``> [!NOTE]``) from markdown-it-py, footnotes from mdit-py-plugins,
bare-URL autolinks from `autolinks`. Raw HTML is off: a reply's ``<b>`` is shown as
typed, never interpreted.

Guards keep hostile input cheap, because a reply is untrusted text:

* Nesting is bounded. Past `MAX_DEPTH` containers (``>`` or list levels) the rest of
  the innermost container is kept as plain text instead of being parsed further (the
  stock parser silently drops it), so 10 000 ``>`` cost one short line of work.
* A ``[`` (link, image, footnote reference) is rejected at once when no ``]`` follows
  it anywhere in the paragraph, and a run of such brackets is taken as text in one
  step. Without this, a long line of unclosed ``[`` costs about ``MAX_DEPTH``
  look-ahead scans per bracket (1.5 s per 100 KB here).

`split_blocks` cuts the token stream into top-level blocks, the unit that the renderer
emits and that streaming caches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from markdown_it import MarkdownIt
from markdown_it.parser_block import ParserBlock
from markdown_it.rules_block import StateBlock
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token
from mdit_py_plugins.footnote import footnote_plugin

from app.core.text.autolinks import autolinks_plugin

MAX_DEPTH = 20
"""Deepest nesting parsed: containers (block quotes, list levels) and link brackets."""

PLAIN_TEXT_TOKEN = "plain_text"
"""Token type of text kept unparsed past `MAX_DEPTH` (``content`` holds it)."""

_BRACKET_RULES = ("link", "image", "footnote_ref")


class _DepthBoundedBlockParser(ParserBlock):
    """The block parser, keeping text past the depth limit instead of dropping it."""

    def tokenize(self, state: StateBlock, startLine: int, endLine: int) -> None:
        if state.level < MAX_DEPTH:
            super().tokenize(state, startLine, endLine)
            return
        line = state.skipEmptyLines(startLine)
        if line < endLine:
            token = state.push(PLAIN_TEXT_TOKEN, "p", 0)
            token.content = state.getLines(line, endLine, state.blkIndent, False)
            token.map = [line, endLine]
        state.line = endLine


def _last_closing_bracket(state: StateInline) -> int:
    last = getattr(state, "last_closing_bracket", None)
    if last is None:  # once per paragraph: its source never changes
        last = state.last_closing_bracket = state.src.rfind("]")  # type: ignore[attr-defined]
    return last


def _needs_closing_bracket(rule: Callable[[StateInline, bool], bool]):
    """Wrap an inline rule that starts at ``[`` so it fails fast without a later ``]``."""

    def guarded(state: StateInline, silent: bool) -> bool:
        if _last_closing_bracket(state) < state.pos:
            return False
        return rule(state, silent)

    return guarded


def _unclosable_brackets(state: StateInline, silent: bool) -> bool:
    """Take a run of ``[`` that no ``]`` follows as text, all at once."""
    src, start = state.src, state.pos
    if src[start] != "[" or _last_closing_bracket(state) > start:
        return False
    end = start + 1
    while end < state.posMax and src[end] == "[":
        end += 1
    if not silent:
        state.append_pending(src[start:end])
    state.pos = end
    return True


@cache
def parser() -> MarkdownIt:
    """The shared parser (markdown-it parsers are reusable and keep no document state)."""
    md = MarkdownIt("commonmark", {"html": False, "maxNesting": MAX_DEPTH})
    bounded = _DepthBoundedBlockParser()
    bounded.ruler = md.block.ruler  # keep the configured rules; plugins add to it
    md.block = bounded
    md.enable(["table", "strikethrough"])
    md.options["tasklists"] = True
    md.options["alerts"] = True
    md.options["strikethrough_single_tilde"] = True
    md.use(footnote_plugin, inline=False)
    md.use(autolinks_plugin)
    rules = {rule.name: rule.fn for rule in md.inline.ruler.__rules__}
    for name in _BRACKET_RULES:
        md.inline.ruler.at(name, _needs_closing_bracket(rules[name]))
    md.inline.ruler.before("link", "unclosable_brackets", _unclosable_brackets)
    md.parse("")  # compiles the rule chains now, not racing on two threads later
    return md


def parse(text: str, env: dict | None = None) -> list[Token]:
    """Parse Markdown into markdown-it tokens.

    Args:
        text: Markdown (already cleaned of control characters).
        env: Filled by the parser: ``references`` (link definitions) and
            ``footnotes`` when the text has any.
    """
    return parser().parse(text, {} if env is None else env)


@dataclass(frozen=True)
class Block:
    """One top-level block of a token stream.

    Attributes:
        start: Index of its first token.
        end: Index after its last token.
        first_line: First source line (0-based), or -1 for generated blocks (the
            footnote list).
        end_line: The line after its last line, or -1 for generated blocks.
    """

    start: int
    end: int
    first_line: int
    end_line: int


def split_blocks(tokens: Sequence[Token]) -> list[Block]:
    """Cut a token stream into its top-level blocks, in order."""
    blocks: list[Block] = []
    depth = 0
    start = 0
    for index, token in enumerate(tokens):
        if depth == 0:
            start = index
        depth += token.nesting
        if depth == 0:
            opening = tokens[start]
            line_range = opening.map or (-1, -1)
            blocks.append(Block(start, index + 1, line_range[0], line_range[1]))
    return blocks
