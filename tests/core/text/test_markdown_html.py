"""Markdown → Qt rich text: the blocks chat models write, code colours, streaming input."""

from __future__ import annotations

from PySide6.QtGui import QTextDocument

from app.core.text.markdown_html import (
    DARK_THEME,
    LIGHT_THEME,
    clean_text,
    render_markdown,
)


def plain(html: str) -> str:
    document = QTextDocument()
    document.setHtml(html)
    return document.toPlainText()


def test_headings_emphasis_code_spans_and_links():
    html = render_markdown(
        "## Plan\nSome **bold**, *italic*, ~~old~~ and `x < 1` with [docs](https://mlx.dev)."
    ).html
    assert "font-weight: 600" in html and ">Plan</p>" in html
    assert "<b>bold</b>" in html and "<i>italic</i>" in html and "<s>old</s>" in html
    assert "x &lt; 1</code>" in html
    assert '<a href="https://mlx.dev">docs</a>' in html


def test_html_in_the_text_is_shown_not_run():
    html = render_markdown("<script>alert(1)</script> & <b>not bold</b>").html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "&lt;b&gt;not bold&lt;/b&gt;" in html


def test_nested_lists_and_ordered_lists():
    html = render_markdown(
        "- one\n- two\n  - two a\n  - two b\n- three\n\n3. c\n4. d"
    ).html
    assert html.count("<ul") == 2 and html.count("</ul>") == 2
    assert '<ol start="3"' in html
    assert plain(html).split() == [
        "one",
        "two",
        "two",
        "a",
        "two",
        "b",
        "three",
        "c",
        "d",
    ]


def test_tables_with_alignment():
    html = render_markdown(
        "| Preset | KV |\n|:--|--:|\n| chat | 8 |\n| precise | 16 |"
    ).html
    assert html.count("<tr>") == 3
    assert '<th align="left"' in html and '<td align="right"' in html
    assert "precise" in plain(html)


def test_code_blocks_are_highlighted_and_copyable():
    rendered = render_markdown(
        "Try:\n\n```python\ndef f(x):\n    return x * 2\n```\nDone."
    )
    assert rendered.code_blocks == ("def f(x):\n    return x * 2",)
    assert '<a href="copy-code:0">Copy</a>' in rendered.html
    assert "<span style=" in rendered.html  # Pygments colours inline
    assert ">python<" in rendered.html
    assert "def f(x):" in plain(rendered.html)
    assert plain(rendered.html).rstrip().endswith("Done.")


def test_an_open_fence_while_streaming_is_already_a_code_block():
    rendered = render_markdown("Here:\n```js\nconsole.log(1)")
    assert rendered.code_blocks == ("console.log(1)",)


def test_a_code_block_inside_a_list_item():
    rendered = render_markdown(
        "1. Install:\n   ```bash\n   pip install mlx\n   ```\n2. Run it"
    )
    assert rendered.code_blocks == ("pip install mlx",)
    assert "Run it" in plain(rendered.html)


def test_unknown_languages_and_dark_theme():
    rendered = render_markdown("```no-such-language\nplain text\n```", DARK_THEME)
    assert rendered.code_blocks == ("plain text",)
    assert DARK_THEME.code_background in rendered.html
    assert LIGHT_THEME.code_background not in rendered.html


def test_quotes_rules_and_hard_breaks():
    html = render_markdown("> quoted\n\n---\n\nline one  \nline two").html
    assert "<blockquote" in html and "<hr/>" in html and "line one<br/>line two" in html


def test_control_characters_are_dropped():
    assert clean_text("a\x00b\x1bc\r\nd\te") == "abc\nd\te"
