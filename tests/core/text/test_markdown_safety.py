"""A reply is untrusted text: HTML is shown, images never load, only web and mail links open."""

from __future__ import annotations

import pytest

from app.core.text.link_policy import is_openable
from app.core.text.markdown_html import render_markdown


@pytest.fixture
def document_of(qapp):
    """Load rendered HTML into a real QTextDocument that records resource loads."""
    from PySide6.QtGui import QTextDocument

    class RecordingDocument(QTextDocument):
        def __init__(self):
            super().__init__()
            self.loads: list[str] = []

        def loadResource(self, kind, url):  # Qt's name
            self.loads.append(url.toString())
            return super().loadResource(kind, url)

    def load(markdown: str) -> RecordingDocument:
        document = RecordingDocument()
        document.setHtml(render_markdown(markdown).html)
        document.size()  # lay out: images would load now
        return document

    return load


def _anchors(document) -> list[str]:
    hrefs = []
    block = document.begin()
    while block.isValid():
        fragments = block.begin()
        while not fragments.atEnd():
            char_format = fragments.fragment().charFormat()
            if char_format.isAnchor():
                hrefs.append(char_format.anchorHref())
            fragments += 1
        block = block.next()
    return hrefs


def test_raw_html_is_shown_as_typed_never_run(document_of):
    markdown = (
        "<script>alert(1)</script> & <b>not bold</b>\n\n"
        '<div style="color:red">block</div>\n\n<img src="file:///etc/passwd">\n'
    )
    html = render_markdown(markdown).html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "&lt;b&gt;not bold&lt;/b&gt;" in html and "<b>" not in html
    assert "<div" not in html and "<img" not in html
    document = document_of(markdown)
    assert "<b>not bold</b>" in document.toPlainText()
    assert document.loads == []


def test_images_are_links_with_their_alt_text_and_never_load(document_of):
    markdown = (
        "![a chart](https://example.com/chart.png) ![](https://example.com/x.png)"
        " ![local](file:///home/me/secret.png) ![data](data:image/png;base64,AAAA)"
    )
    html = render_markdown(markdown).html
    assert "<img" not in html
    assert '<a href="https://example.com/chart.png" title="Image:' in html
    assert ">a chart</a>" in html
    assert ">https://example.com/x.png</a>" in html  # no alt text: the address
    document = document_of(markdown)
    assert document.loads == []
    assert _anchors(document) == [
        "https://example.com/chart.png",
        "https://example.com/x.png",
    ]
    assert "local" in document.toPlainText() and "data" in document.toPlainText()


@pytest.mark.parametrize(
    "target",
    [
        "docs/guide.md",
        "/etc/passwd",
        "../up",
        "#section",
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        "file:///etc/passwd",
        "data:text/html;base64,PHNjcmlwdD4=",
        "vbscript:msgbox",
        "ftp://example.com/file",
        "copy-code:0",
    ],
)
def test_other_links_are_inert_text(document_of, target):
    markdown = f"[click me]({target}) and <{target}>"
    document = document_of(markdown)
    assert _anchors(document) == []
    assert "click me" in document.toPlainText()


def test_web_and_mail_links_are_links(document_of):
    document = document_of(
        "[site](https://example.com/a?b=1&c=2) <http://example.org>"
        " <someone@example.com> [mail](mailto:me@example.com) www.example.net"
    )
    assert _anchors(document) == [
        "https://example.com/a?b=1&c=2",
        "http://example.org",
        "mailto:someone@example.com",
        "mailto:me@example.com",
        "http://www.example.net",
    ]


def test_a_link_target_cannot_break_out_of_its_attribute():
    html = render_markdown('[x](https://e.com/"onmouseover="alert(1))').html
    assert '"onmouseover=' not in html


@pytest.mark.parametrize(
    ("url", "openable"),
    [
        ("https://example.com", True),
        ("HTTP://EXAMPLE.COM", True),
        ("mailto:a@b.c", True),
        ("https://", False),
        ("http:example.com", False),
        ("example.com", False),
        ("javascript:alert(1)", False),
        ("file:///x", False),
        ("", False),
    ],
)
def test_link_policy(url, openable):
    assert is_openable(url) is openable
