"""Code blocks as Qt rich text: Pygments colours, a language label and a Copy link.

Qt's rich text has no widgets inside a document, so a code block is a two-row table:
the language and a ``copy-code:N`` link on top, the highlighted code below. The view
copies ``code_blocks[N]`` when that link is clicked.
"""

from __future__ import annotations

import html
import threading
from collections import OrderedDict

from app.core.text.markdown_theme import MarkdownTheme

COPY_CODE_SCHEME = "copy-code"

_CACHE_CHARS = 4_000_000
"""Characters of highlighted HTML kept: a streamed reply re-renders its last blocks."""

_cache: OrderedDict[tuple[str, str, str], str] = OrderedDict()
_cache_chars = 0
_cache_lock = threading.Lock()  # renders run on the UI thread and on a worker


def highlight_code(source: str, language: str, style: str) -> str:
    """Return ``source`` as HTML spans with inline colours (cached: replies re-render).

    Args:
        source: The code, without a final newline.
        language: A Pygments lexer name or alias; unknown or empty means plain text.
        style: A Pygments style name.
    """
    global _cache_chars
    key = (source, language, style)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    result = _highlight(source, language, style)
    with _cache_lock:
        if key not in _cache:
            _cache[key] = result
            _cache_chars += len(source) + len(result)
        while _cache_chars > _CACHE_CHARS and len(_cache) > 1:
            (old_source, _, _), old_result = _cache.popitem(last=False)
            _cache_chars -= len(old_source) + len(old_result)
    return result


def _highlight(source: str, language: str, style: str) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        lexer = get_lexer_by_name(language, stripnl=False) if language else None
    except ClassNotFound:
        lexer = None
    if lexer is None:
        return html.escape(source, quote=False)
    formatter = HtmlFormatter(nowrap=True, noclasses=True, style=style)
    highlighted = highlight(source, lexer, formatter)
    return highlighted[:-1] if highlighted.endswith("\n") else highlighted


def code_block_html(
    source: str,
    language: str,
    index: int,
    theme: MarkdownTheme,
    *,
    first: bool = True,
    last: bool = True,
) -> str:
    """The table that shows one code block (or one piece of a huge one).

    Args:
        source: The code, without a final newline.
        language: The fence's language ("" for none).
        index: The block's position in the reply (its Copy link is ``copy-code:index``).
        theme: Colours.
        first: The block's first piece: it has the label and the Copy link.
        last: The block's last piece: it has the margin below.
    """
    label = html.escape(language) if language else "code"
    # No borders: Qt draws a table's border around every cell too, which split the
    # header in two; the block is told apart by its background alone.
    header = (
        f'<tr><td bgcolor="{theme.table_header}"'
        f' style="padding: 4px 10px; color: {theme.muted};">{label}</td>'
        f'<td bgcolor="{theme.table_header}" align="right" style="padding: 4px 10px;">'
        f'<a href="{COPY_CODE_SCHEME}:{index}">Copy</a></td></tr>'
        if first
        else ""
    )
    top = "4px" if first else "0px"
    bottom = "8px" if last else "0px"
    return (
        f'<table width="100%" border="0" cellspacing="0" cellpadding="0"'
        f' style="margin-top: {top}; margin-bottom: {bottom};'
        f' background-color: {theme.code_background};">'
        f"{header}"
        f'<tr><td colspan="2" style="padding: {"8px" if first else "0px"} 10px'
        f' {"10px" if last else "0px"} 10px;">'
        f"<pre>{highlight_code(source, language, theme.pygments_style)}</pre>"
        f"</td></tr></table>"
    )
