"""The Markdown view of a reply: pieces for long replies, big renders off the UI thread."""

from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import QTimer, QUrl
from PySide6.QtGui import QGuiApplication, QTextDocument
from PySide6.QtWidgets import QScrollArea

from app.core.text import incremental_markdown
from app.core.text.markdown_html import render_markdown
from app.core.text.markdown_theme import DARK_THEME, LIGHT_THEME, document_style_sheet
from app.core.text.synthetic_text import long_markdown_reply
from app.ui.chat.rich_text_view import SEAL_CHARS, SYNC_CHARS, RichTextView
from app.ui.common.background import TaskSet


@pytest.fixture
def view(qtbot):
    widget = RichTextView()
    widget.resize(700, 400)
    qtbot.addWidget(widget)
    widget.show()
    return widget


def _wait_until_shown(qtbot, view, timeout=30_000):
    if view.busy:
        with qtbot.waitSignal(view.markdown_shown, timeout=timeout):
            pass
    assert not view.busy


def test_a_short_reply_is_shown_at_once(view):
    view.set_markdown(
        "Some **bold** text.\n\n```python\nprint('hi')\n```\n", LIGHT_THEME
    )
    assert not view.busy
    assert view.code_blocks == ("print('hi')",)
    assert view.pieces == 1
    assert view.toPlainText().startswith("Some bold text.")


def test_a_streamed_reply_seals_finished_blocks_and_ends_as_a_whole_render(qtbot, view):
    reply = long_markdown_reply(40_000, seed=1)
    first_piece = None
    first_piece_text = ""
    position = 0
    while position < len(reply):
        position = min(len(reply), position + 800)
        view.set_markdown(reply[:position], LIGHT_THEME)
        _wait_until_shown(qtbot, view)
        if first_piece is None and view.pieces > 1:
            first_piece = view._sealed[0]
            first_piece_text = first_piece.toPlainText()
    assert view.pieces > 40_000 // SEAL_CHARS
    assert view._sealed[0] is first_piece  # sealed pieces are never set again
    assert first_piece.toPlainText() == first_piece_text
    whole = RichTextView()
    qtbot.addWidget(whole)
    whole.set_markdown(reply, LIGHT_THEME)
    _wait_until_shown(qtbot, whole)
    assert view.toPlainText().split() == whole.toPlainText().split()
    assert view.code_blocks == whole.code_blocks


def test_a_long_reply_renders_on_a_worker_thread(qtbot, view, monkeypatch):
    threads: list[int] = []
    render = incremental_markdown.IncrementalMarkdown.render

    def recording_render(self, text):
        threads.append(threading.get_ident())
        return render(self, text)

    monkeypatch.setattr(
        incremental_markdown.IncrementalMarkdown, "render", recording_render
    )
    reply = long_markdown_reply(SYNC_CHARS * 4, seed=2)
    view.set_markdown(reply, LIGHT_THEME)
    assert view.busy and view.code_blocks == ()  # returned before rendering
    _wait_until_shown(qtbot, view)
    assert threads and threads[0] != threading.get_ident()
    assert view.code_blocks and view.pieces > 1
    assert "kept = tokens[-limit:]" in view.toPlainText()


def test_updates_during_a_render_are_folded_into_one(qtbot, view, monkeypatch):
    calls: list[int] = []
    render = incremental_markdown.IncrementalMarkdown.render

    def counting_render(self, text):
        calls.append(len(text))
        return render(self, text)

    monkeypatch.setattr(
        incremental_markdown.IncrementalMarkdown, "render", counting_render
    )
    reply = long_markdown_reply(SYNC_CHARS * 4, seed=3)
    view.set_markdown(reply[: SYNC_CHARS * 3], LIGHT_THEME)
    for end in range(SYNC_CHARS * 3 + 100, len(reply), 100):
        view.set_markdown(reply[:end], LIGHT_THEME)
    view.set_markdown(reply, LIGHT_THEME)
    _wait_until_shown(qtbot, view)
    assert calls[-1] == len(reply)
    assert len(calls) <= 3
    whole = QTextDocument()
    whole.setHtml(render_markdown(reply).html)
    assert view.toPlainText().split() == whole.toPlainText().split()


def test_plain_text_replaces_a_render_still_under_way(qtbot, view):
    view.set_markdown(long_markdown_reply(SYNC_CHARS * 4, seed=4), LIGHT_THEME)
    assert view.busy
    view.set_plain("typed *as is*")
    assert TaskSet.wait(30_000)  # the dropped render finishes on the worker...
    qtbot.wait(50)  # ...and its result is delivered, and ignored
    assert view.toPlainText() == "typed *as is*"
    assert view.code_blocks == () and view.pieces == 1


def test_a_theme_change_renders_everything_again(view):
    view.set_markdown("```\ncode\n```\n\ntext", LIGHT_THEME)
    light = view._live.toHtml()
    view.set_markdown("```\ncode\n```\n\ntext", DARK_THEME)
    dark = view._live.toHtml()
    assert light != dark
    assert DARK_THEME.code_background.lower() in dark.lower()


def test_copy_links_copy_the_code_and_only_web_links_open(view, qtbot, monkeypatch):
    opened: list[str] = []
    monkeypatch.setattr(
        "app.ui.chat.rich_text_view.QDesktopServices.openUrl",
        lambda url: opened.append(url.toString()),
    )
    view.set_markdown("```\nfirst\n```\n\n```\nsecond\n```", LIGHT_THEME)
    with qtbot.waitSignal(view.code_copied, timeout=1000) as blocker:
        view.anchorClicked.emit(QUrl("copy-code:1"))
    assert blocker.args == [1]
    assert QGuiApplication.clipboard().text() == "second"
    for target in ("javascript:alert(1)", "file:///etc/passwd", "docs/x.md"):
        view.anchorClicked.emit(QUrl(target))
    view.anchorClicked.emit(QUrl("https://example.com"))
    assert opened == ["https://example.com"]


def test_a_renderer_failure_shows_the_text_as_typed(view, monkeypatch, caplog):
    def broken(self, text):
        raise RuntimeError("renderer bug")

    monkeypatch.setattr(incremental_markdown.IncrementalMarkdown, "render", broken)
    view.set_markdown("**bold** text", LIGHT_THEME)
    assert view.toPlainText() == "**bold** text"
    assert not view.busy
    assert "rendering Markdown failed" in caplog.text


def test_a_theme_change_keeps_the_old_pieces_until_the_new_ones_are_ready(qtbot, view):
    reply = long_markdown_reply(SYNC_CHARS * 3, seed=5)
    view.set_markdown(reply, LIGHT_THEME)
    _wait_until_shown(qtbot, view)
    before = view.pieces
    view.set_markdown(reply, DARK_THEME)
    assert view.busy and view.pieces == before  # still showing the light pieces
    _wait_until_shown(qtbot, view)
    dark = document_style_sheet(DARK_THEME)
    pieces = [*view._sealed, view._live]
    assert all(p.document().defaultStyleSheet() == dark for p in pieces)
    assert view.pieces == before


@pytest.fixture
def scrolled_view(qtbot):
    """A view inside a scroll area, as in the chat (a bare view grows its window)."""
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.resize(700, 400)
    widget = RichTextView()
    area.setWidget(widget)
    qtbot.addWidget(area)
    area.show()
    yield widget  # the area stays referenced (alive) until the test ends


def _pieces_over_time(qtbot, view) -> list[int]:
    """How many documents the view held, looked at every millisecond until done."""
    seen = [view.pieces]
    timer = QTimer()
    timer.timeout.connect(lambda: seen.append(view.pieces))
    timer.start(1)
    _wait_until_shown(qtbot, view, timeout=120_000)
    timer.stop()
    return seen


@pytest.mark.parametrize("line", ["x" * 1_000_000, "word " * 200_000])
def test_a_reply_of_one_huge_line_is_laid_out_in_pieces_between_events(
    qtbot, scrolled_view, line
):
    """#31 point 7: one 1 MB line was one document, laid out in one go (23-33 s of
    frozen window); now no document holds much more than a sealed piece, and the
    event loop runs between them."""
    view = scrolled_view
    view.set_markdown(line, LIGHT_THEME)
    seen = _pieces_over_time(qtbot, view)
    documents = [*view._sealed, view._live]
    assert max(len(d.toPlainText()) for d in documents) <= 2 * SEAL_CHARS
    assert view.pieces >= len(line) // (2 * SEAL_CHARS)
    # Laid out over many event-loop turns, a few pieces at a time.
    growing = sorted(set(seen))
    assert len(growing) > 5 and growing[1] - growing[0] < view.pieces // 5
    assert "".join(view.toPlainText().split()) == "".join(line.split())


def test_a_huge_typed_message_is_laid_out_in_pieces_too(qtbot, scrolled_view):
    view = scrolled_view
    text = "y" * 300_000 + "\nlast line"
    view.set_plain(text)
    seen = _pieces_over_time(qtbot, view)
    assert len(set(seen)) > 2
    assert max(len(d.toPlainText()) for d in [*view._sealed, view._live]) <= (
        2 * SEAL_CHARS
    )
    assert view.toPlainText().replace("\n", "") == text.replace("\n", "")
    view.set_markdown("now *Markdown*", LIGHT_THEME)  # replaces every plain piece
    assert view.toPlainText() == "now Markdown" and view.pieces == 1


@pytest.mark.parametrize(
    "reply",
    [
        "- " + "x" * 1_000_000,
        "1. first\n2. " + "word " * 200_000 + "\n3. last",
        "```python\n" + "value = compute(1, 2)\n" * 45_000 + "```\n",
        "```\n" + "x" * 1_000_000 + "\n```\n",
    ],
    ids=["list-item-no-space", "list-item-words", "code-lines", "code-one-line"],
)
def test_a_huge_list_item_or_code_block_is_laid_out_in_pieces_between_events(
    qtbot, scrolled_view, reply
):
    """#31 point 7: a huge list item or code block was still one piece (one
    document laid out at once); now it goes in pieces over many event-loop turns."""
    view = scrolled_view
    view.set_markdown(reply, LIGHT_THEME)
    seen = _pieces_over_time(qtbot, view)
    documents = [*view._sealed, view._live]
    assert max(len(d.toPlainText()) for d in documents) <= 2 * SEAL_CHARS
    assert view.pieces >= 1_000_000 // (2 * SEAL_CHARS)
    growing = sorted(set(seen))
    assert len(growing) > 5 and growing[1] - growing[0] < view.pieces // 5
    shown = "".join(view.toPlainText().split())
    body = reply.removeprefix("```python").removeprefix("```").removesuffix("```\n")
    for marker in ("- ", "1. ", "2. ", "3. "):
        body = body.replace(marker, "")
    assert "".join(body.split()) in shown.replace("pythonCopy", "").replace(
        "codeCopy", ""
    )
