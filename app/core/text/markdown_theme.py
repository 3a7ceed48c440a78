"""Colours of rendered Markdown and the style sheet that gives them to Qt's rich text.

Qt's rich text takes CSS for element selectors (``h2``, ``code``, ``blockquote``) from a
document's default style sheet, so the renderer writes plain tags and the look lives
here, once, for both light and dark backgrounds.
"""

from __future__ import annotations

from dataclasses import dataclass

HEADING_SIZES = {
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


def document_style_sheet(theme: MarkdownTheme) -> str:
    """The CSS to give the QTextDocument that shows rendered Markdown."""
    headings = " ".join(
        f"h{level} {{ font-size: {size}; font-weight: 600;"
        f" margin-top: 6px; margin-bottom: 6px; }}"
        for level, size in HEADING_SIZES.items()
    )
    return (
        f"p {{ margin-top: 0px; margin-bottom: 8px; }}"
        f" {headings}"
        f" a {{ color: {theme.link}; text-decoration: none; }}"
        f" code {{ background-color: {theme.code_background}; font-family: monospace;"
        f" white-space: pre-wrap; }}"
        # Long code lines wrap: a one-line reply never gets a scroll bar of its own.
        f" pre {{ font-family: monospace; margin: 0px; white-space: pre-wrap; }}"
        f" ul, ol {{ margin-top: 0px; margin-bottom: 8px; }}"
        f" li {{ margin-bottom: 2px; }}"
        f" blockquote {{ color: {theme.muted}; margin-left: 12px; margin-right: 0px;"
        f" margin-top: 0px; margin-bottom: 8px; }}"
    )
