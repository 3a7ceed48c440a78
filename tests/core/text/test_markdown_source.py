"""The Markdown export renders each message as the chat shows it.

The chat renders a reply with `render_markdown` and shows a user's message as typed
(`RichTextView.set_plain`). The export is one Markdown document; rendered with the same
renderer, it must show the same blocks for every reply and the same text for every
typed message, in order, with nothing leaking from one message into the next.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from app.core.store import Store
from app.core.text.markdown_html import clean_text, render_markdown
from app.core.text.markdown_source import closed_markdown, literal_markdown
from app.core.text.synthetic_text import long_markdown_reply

DATA = Path(__file__).resolve().parents[2] / "data"
TYPED = [
    "Plain question?",
    "# not a heading\n> not a quote\n- not a list\n1. not numbered\n2) either",
    "*stars* and _underscores_ and `ticks` and ~~tildes~~ | pipes |",
    "Tom &amp; Jerry &copy; <b>tags</b> <https://x.org> [link](https://x.org)",
    "a line\nanother line\n\n\nafter blank lines",
    "code I pasted:\n    def f(x):\n\treturn x  \\\n---\n===",
    "ends with a backslash \\",
    "```\nnot a fence",
]
REPLIES = [
    "See **https://example.com/docs** now.",
    "It was released in\n2023. It was a success.",
    "| a | b |\n|---|--:|\n| 1 | 2 |\n\n- [x] done\n- [ ] open",
    "Here is the start:\n\n```python\ndef cut_off(",  # an interrupted reply
    "~~~\nopen tilde fence",
    long_markdown_reply(6_000, seed=11),
]
_COPY_INDEX = re.compile(r"copy-code:\d+")


@pytest.fixture
def plain(qapp):
    from PySide6.QtGui import QTextDocument

    def to_plain(html_text: str) -> str:
        document = QTextDocument()
        document.setHtml(html_text)
        return " ".join(document.toPlainText().replace("\xa0", " ").split())

    return to_plain


def _as_the_chat_shows_typed_text(text: str) -> str:
    """The HTML `RichTextView.set_plain` shows."""
    return html.escape(clean_text(text)).replace("\n", "<br/>")


@pytest.mark.parametrize("text", TYPED)
def test_typed_text_renders_as_typed(plain, text):
    assert plain(render_markdown(literal_markdown(text)).html) == plain(
        _as_the_chat_shows_typed_text(text)
    )


def test_every_spec_example_as_typed_text_renders_as_typed(plain):
    examples = json.loads(
        (DATA / "commonmark_0.31.2_examples.json").read_text(encoding="utf-8")
    )["examples"]
    wrong = [
        e["example"]
        for e in examples
        if plain(render_markdown(literal_markdown(e["markdown"])).html)
        != plain(_as_the_chat_shows_typed_text(e["markdown"]))
    ]
    assert wrong == []


def test_typed_text_stays_readable():
    assert literal_markdown("Hello there, how are you?") == "Hello there, how are you?"
    assert literal_markdown("two\nlines") == "two\\\nlines"


@pytest.mark.parametrize(
    ("text", "closed"),
    [
        ("```python\nx = 1", "```python\nx = 1\n```"),
        ("````\nx\n```", "````\nx\n```\n````"),
        ("~~~\nx\n", "~~~\nx\n~~~"),
        ("```", "```\n```"),
        ("```\nx\n```", "```\nx\n```"),
        ("```\nx\n```\n\n", "```\nx\n```\n\n"),
        ("text", "text"),
        ("- ```\n  x", "- ```\n  x"),  # a fence in a list ends with the list
    ],
)
def test_an_open_fence_is_closed(text, closed):
    assert closed_markdown(text) == closed
    assert render_markdown(closed).blocks == render_markdown(text).blocks


def test_the_export_shows_each_message_as_the_chat_does(tmp_path, plain):
    with Store.open(tmp_path / "export.db") as store:
        conversation = store.create_conversation(
            "Agreement", system_prompt="Answer in *plain* words."
        )
        for typed, reply in zip(TYPED, REPLIES * 2, strict=False):
            store.add_message(conversation, "user", typed)
            reply_id = store.begin_reply(conversation)
            store.finish_reply(reply_id, reply)
        exported = render_markdown(store.export_markdown(conversation))
    blocks = [_COPY_INDEX.sub("copy-code", b) for b in exported.blocks]

    def find(shown: list[str], start: int) -> int:
        return next(
            i for i in range(start, len(blocks)) if blocks[i : i + len(shown)] == shown
        )

    position = 0
    for typed, reply in zip(TYPED, REPLIES * 2, strict=False):
        typed_blocks = list(render_markdown(literal_markdown(typed)).blocks)
        position = find(typed_blocks, position) + len(typed_blocks)
        shown = [_COPY_INDEX.sub("copy-code", b) for b in render_markdown(reply).blocks]
        position = find(shown, position) + len(shown)
    assert "Answer in *plain* words." in plain(exported.html)
