"""Markdown → Qt rich text: what chat replies contain, code blocks, half-written input."""

from __future__ import annotations

import pytest

from app.core.text.markdown_html import (
    DARK_THEME,
    LIGHT_THEME,
    clean_text,
    document_style_sheet,
    render_markdown,
)
from app.core.text.qt_html_renderer import MAX_INLINE_NESTING


@pytest.fixture
def plain(qapp):
    """The text Qt shows for an HTML fragment."""
    from PySide6.QtGui import QTextDocument

    def to_plain(html: str) -> str:
        document = QTextDocument()
        document.setHtml(html)
        return document.toPlainText()

    return to_plain


def test_headings_emphasis_code_spans_and_links():
    rendered = render_markdown(
        "## Plan\nSome **bold**, *italic*, ~~old~~ and `x < 1` with [docs](https://mlx.dev)."
    )
    assert rendered.blocks[0] == "<h2>Plan</h2>"
    html = rendered.html
    assert "<strong>bold</strong>" in html and "<em>italic</em>" in html
    assert "<s>old</s>" in html and "<code>x &lt; 1</code>" in html
    assert '<a href="https://mlx.dev">docs</a>' in html


def test_headings_are_styled_by_the_document_style_sheet():
    css = document_style_sheet(LIGHT_THEME)
    assert "h1 { font-size: x-large; font-weight: 600;" in css
    assert "blockquote { color: #59636e; margin-left: 12px;" in css


def test_nested_and_ordered_lists(plain):
    html = render_markdown(
        "- one\n- two\n  - two a\n  - two b\n- three\n\n3. c\n4. d"
    ).html
    assert html.count("<ul>") == 2 and html.count("</ul>") == 2
    assert '<ol start="3">' in html
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


def test_tables_with_alignment(plain):
    html = render_markdown(
        "| Preset | KV |\n|:--|--:|\n| chat | 8 |\n| precise | 16 |"
    ).html
    assert html.count("<tr>") == 3
    assert '<th align="left"' in html and '<td align="right"' in html
    assert "precise" in plain(html)


def test_task_lists_and_footnotes():
    html = render_markdown(
        "- [x] load the model\n- [ ] trim the cache\n\nSee the note.[^n]\n\n[^n]: It is short."
    ).html
    assert '<ul style="list-style-type: none;">' in html
    assert "<li>\u2611 load the model</li>" in html
    assert "<li>\u2610 trim the cache</li>" in html
    assert (
        "<sup>[1]</sup>" in html
        and "<hr/><ol><li><p>It is short.</p></li></ol>" in html
    )


def test_code_blocks_are_highlighted_and_copyable(plain):
    rendered = render_markdown(
        "Try:\n\n```python\ndef f(x):\n    return x * 2\n```\nDone."
    )
    assert rendered.code_blocks == ("def f(x):\n    return x * 2",)
    assert '<a href="copy-code:0">Copy</a>' in rendered.html
    assert "<span style=" in rendered.html  # Pygments colours inline
    assert ">python<" in rendered.html
    assert "def f(x):" in plain(rendered.html)
    assert plain(rendered.html).rstrip().endswith("Done.")


def test_code_blocks_are_numbered_in_order_and_keep_leading_blank_lines():
    rendered = render_markdown("```\n\nfirst\n```\n\n    indented\n\n~~~js\nthird\n~~~")
    assert rendered.code_blocks == ("\nfirst", "indented", "third")
    for index in range(3):
        assert f'href="copy-code:{index}"' in rendered.html


def test_an_open_fence_while_streaming_is_already_a_code_block():
    rendered = render_markdown("Here:\n```js\nconsole.log(1)")
    assert rendered.code_blocks == ("console.log(1)",)


def test_a_code_block_inside_a_list_item(plain):
    rendered = render_markdown(
        "1. Install:\n   ```bash\n   pip install mlx\n   ```\n2. Run it\n\nThe end."
    )
    assert rendered.code_blocks == ("pip install mlx",)
    text = plain(rendered.html)
    assert "Run it" in text and text.rstrip().endswith("The end.")
    assert rendered.html.count("<li>") == 2


def test_unknown_languages_and_dark_theme():
    rendered = render_markdown("```no-such-language\n<plain> text\n```", DARK_THEME)
    assert rendered.code_blocks == ("<plain> text",)
    assert "&lt;plain&gt; text" in rendered.html
    assert DARK_THEME.code_background in rendered.html
    assert LIGHT_THEME.code_background not in rendered.html


def test_quotes_rules_and_hard_breaks():
    html = render_markdown("> quoted\n\n---\n\nline one  \nline two").html
    assert "<blockquote><p>quoted</p></blockquote>" in html
    assert "<hr/>" in html and "line one<br/>line two" in html


def test_alerts_are_quotes_with_their_kind():
    html = render_markdown("> [!WARNING]\n> Trim first.").html
    assert html == "<blockquote><p><b>Warning</b></p><p>Trim first.</p></blockquote>"


# The failures of the regex renderer that chat users saw daily (issue 15).


def test_bold_around_a_url_is_bold_and_the_link_is_whole():
    html = render_markdown("See **https://example.com/docs** now").html
    assert (
        '<strong><a href="https://example.com/docs">https://example.com/docs</a></strong>'
        in html
    )


def test_urls_with_parentheses_are_not_cut_short():
    html = render_markdown(
        "Read https://en.wikipedia.org/wiki/Mercury_(planet) and"
        " [this](https://en.wikipedia.org/wiki/Venus_(planet))."
    ).html
    assert html.count('href="https://en.wikipedia.org/wiki/Mercury_(planet)"') == 1
    assert html.count('href="https://en.wikipedia.org/wiki/Venus_(planet)"') == 1


def test_a_year_after_a_line_break_does_not_start_a_list():
    html = render_markdown("It was released in\n2023. It was a success.").html
    assert html == "<p>It was released in\n2023. It was a success.</p>"


def test_bold_across_a_line_break():
    html = render_markdown("**bold that\nwraps** here").html
    assert html == "<p><strong>bold that\nwraps</strong> here</p>"


def test_a_fence_in_a_list_does_not_swallow_the_rest():
    rendered = render_markdown(
        "- Step one:\n  ```bash\n  pip install mlx\n  ```\n- Step two\n\nThe end."
    )
    assert rendered.code_blocks == ("pip install mlx",)
    assert rendered.blocks[-1] == "<p>The end.</p>"
    assert "<li>Step two</li>" in rendered.blocks[0]


def test_relative_links_and_escapes_are_not_shown_raw():
    html = render_markdown(r"Set `x` in [the guide](docs/guide.md): MAX\_TOKENS").html
    assert html == (
        '<p>Set <code>x</code> in <span title="docs/guide.md">the guide</span>:'
        " MAX_TOKENS</p>"
    )


def test_entities_are_not_escaped_twice(plain):
    html = render_markdown("Tom &amp; Jerry &copy; &#35; & more").html
    assert "&amp;amp;" not in html
    assert plain(html) == "Tom & Jerry \u00a9 # & more"


# Limits that keep Qt fast.


def test_inline_nesting_is_bounded_without_losing_text(plain):
    html = render_markdown("*" * 200 + "deep" + "*" * 200).html
    assert html.count("<em>") + html.count("<strong>") <= MAX_INLINE_NESTING + 2
    assert plain(html) == "deep"


def test_control_characters_are_dropped():
    assert clean_text("a\x00b\x1bc\r\nd\te\rf") == "abc\nd\te\nf"


def test_a_huge_paragraph_is_cut_into_pieces_that_read_on(plain):
    """#31 point 7: Qt lays out one paragraph at once, quadratic in a run without
    spaces (a 1 MB line froze the window for tens of seconds)."""
    from app.core.text.qt_html_renderer import PIECE_CHARS

    unbroken = "x" * (PIECE_CHARS * 10)
    rendered = render_markdown(unbroken)
    assert len(rendered.blocks) == 10
    assert all(len(plain(block)) <= PIECE_CHARS for block in rendered.blocks)
    assert "".join(plain(block) for block in rendered.blocks) == unbroken
    assert rendered.settled == len(rendered.blocks)

    words = " ".join(f"w{i}" for i in range(PIECE_CHARS * 2))
    pieces = render_markdown(f"# {words}").blocks
    assert len(pieces) > 3 and all(p.startswith("<h1") for p in pieces)
    # Cut after a space: every piece ends a word and the words read on in order.
    texts = [plain(piece) for piece in pieces]
    assert all(text.endswith(" ") for text in texts[:-1])
    assert "".join(texts) == words


def test_tags_open_at_a_cut_are_closed_before_it_and_opened_after_it(plain):
    from app.core.text.qt_html_renderer import PIECE_CHARS

    long_words = " ".join("word" for _ in range(PIECE_CHARS))
    text = f"before **bold [link *{long_words}* end](https://a.example) after** tail"
    pieces = render_markdown(text).blocks
    assert len(pieces) > 2
    for piece in pieces:
        for tag in ("strong", "a", "em"):
            assert piece.count(f"<{tag}") == piece.count(f"</{tag}>")
    middle = pieces[1]
    assert middle.startswith('<p style="margin-top: 0px; margin-bottom: 0px;">')
    assert '<strong><a href="https://a.example"><em>' in middle
    assert plain("".join(pieces)).split() == plain(render_markdown(text).html).split()


def test_a_huge_list_item_is_cut_and_the_list_goes_on_numbered(plain):
    """#31 point 7: a huge list item was one block of HTML, laid out at once."""
    from app.core.text.qt_html_renderer import PIECE_CHARS

    huge = "word " * (PIECE_CHARS // 2)
    rendered = render_markdown(f"3. first\n4. {huge}\n5. last\n")
    assert len(rendered.blocks) >= 3
    assert all(len(plain(block)) <= PIECE_CHARS + 100 for block in rendered.blocks)
    # Every piece is a whole list; the continued item has no marker of its own, and
    # the item after it is numbered on.
    assert all(b.startswith("<ol") and b.endswith("</ol>") for b in rendered.blocks)
    assert "list-style-type: none" in rendered.blocks[1]
    assert '<ol start="5"' in rendered.blocks[-1]
    text = "".join(plain(block) for block in rendered.blocks)
    assert "".join(text.split()) == "".join(f"first{huge}last".split())
    quoted = render_markdown("> " + huge)  # a quote's paragraph is cut alike
    assert len(quoted.blocks) > 1
    assert all(b.startswith("<blockquote") for b in quoted.blocks)


def test_a_huge_code_block_is_cut_at_line_ends_and_copied_whole(plain):
    from app.core.text.qt_html_renderer import CODE_PIECE_CHARS, PIECE_CHARS

    source = "\n".join(f"value_{i} = compute({i})" for i in range(CODE_PIECE_CHARS))
    rendered = render_markdown(f"```python\n{source}\n```\n")
    assert len(rendered.blocks) > 10
    assert rendered.code_blocks == (source,)  # Copy copies the whole block
    assert sum(block.count("copy-code:0") for block in rendered.blocks) == 1
    assert all(len(plain(block)) <= PIECE_CHARS + 100 for block in rendered.blocks)
    shown = "\n".join(plain(block) for block in rendered.blocks)
    assert source in shown.replace("python\tCopy\n", "").replace(
        "pythonCopy\n", ""
    ) or ("".join(source.split()) in "".join(shown.split()))
    small = render_markdown("```\nprint(1)\n```\n")  # most code stays one table
    assert len(small.blocks) == 1
