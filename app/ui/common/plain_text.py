"""Showing text from data literally in widgets that guess between plain and rich text.

Qt renders a label's or tooltip's text as HTML when it looks like HTML
(``Qt::mightBeRichText``), so a conversation titled ``<h1>…</h1><img src=…>`` or an
imported error field would turn into markup. Labels are set to plain text where they
show data; tooltips have no such switch, so their text is escaped here.
"""

from __future__ import annotations

import html


def plain_tooltip(text: str) -> str:
    """A tooltip that shows ``text`` literally, line breaks kept."""
    return "<p style='white-space: pre-wrap'>" + html.escape(text) + "</p>"
