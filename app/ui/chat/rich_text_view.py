"""Rendered Markdown in the chat: long replies laid out in pieces, big renders off the UI thread.

Qt lays out a whole document again whenever its HTML is set: 0.45 s for a 200 KB reply
here, which at every streaming flush would freeze the window. So a `RichTextView` is a
column of read-only documents. Finished ("settled", see
`app.core.text.incremental_markdown`) blocks are sealed into documents of about
`SEAL_CHARS` of HTML that are never touched again; only the last document, holding the
blocks that can still change, is set again on each update. A streaming reply renders
through one `IncrementalMarkdown`, so each update parses only the reply's end.

Rendering itself moves to a worker thread when it has much to parse (a long stored
reply, a theme change, a huge last block); the result is laid out a few documents per
event-loop turn. Short texts render at once, so a small message is complete as soon as
its view exists. Updates that arrive while a render runs are folded into one.
"""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Sequence

from PySide6.QtCore import QSize, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser, QVBoxLayout, QWidget

from app.core.text.code_html import COPY_CODE_SCHEME
from app.core.text.incremental_markdown import IncrementalMarkdown
from app.core.text.link_policy import is_openable
from app.core.text.markdown_html import RenderedMarkdown, clean_text
from app.core.text.markdown_theme import MarkdownTheme, document_style_sheet
from app.core.text.qt_html_renderer import PIECE_CHARS
from app.ui.common.background import TaskSet

SEAL_CHARS = 8_000
"""HTML characters per sealed document. The last document, set again at every update,
holds less than this plus the blocks still open (setting 7 KB took 4.4 ms, median, on
the 2-core test machine); a reply shorter than this stays one document, so one
selection can cover all of it."""
SYNC_CHARS = 16_000
"""Renders that parse more characters than this run on a worker thread."""
LAYOUT_SLICE_CHARS = 48_000
"""HTML laid out per event-loop turn when a long render arrives."""
BACKOFF_FACTOR = 3
"""After an update that cost T of UI time, the next streaming update waits 3·T."""
BACKOFF_MIN_S = 0.010

log = logging.getLogger(__name__)


class _Document(QTextBrowser):
    """One piece of a `RichTextView`: read-only, as tall as its contents."""

    def __init__(self, parent: QWidget):
        super().__init__(parent)
        self.setObjectName("richText")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setOpenLinks(False)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.viewport().setAutoFillBackground(False)
        self.setStyleSheet("QTextBrowser#richText { background: transparent; }")
        self.document().setDocumentMargin(2)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self.setFixedHeight(24)

    def show_html(self, html_text: str, style_sheet: str) -> None:
        if self.document().defaultStyleSheet() != style_sheet:
            self.document().setDefaultStyleSheet(style_sheet)
        self.setHtml(html_text)

    def sizeHint(self) -> QSize:
        return QSize(super().sizeHint().width(), self.height())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()

    def wheelEvent(self, event) -> None:
        event.ignore()  # let the chat's scroll area scroll

    def _fit(self, *_args) -> None:
        height = int(self.document().size().height()) + 2 * self.frameWidth()
        bar = self.horizontalScrollBar()
        if bar.isVisible():
            height += bar.sizeHint().height()
        if height != self.height():
            self.setFixedHeight(max(height, 18))


class RichTextView(QWidget):
    """A read-only block of rendered Markdown or plain text, as tall as its contents.

    Signals:
        code_copied: A code block's Copy link was clicked (its index).
        anchorClicked: A link was clicked (emitted by any piece; emit it to click).
        markdown_shown: The text of the latest `set_markdown` call is on screen.
    """

    code_copied = Signal(int)
    anchorClicked = Signal(QUrl)
    markdown_shown = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(0)
        self._sealed: list[_Document] = []
        self._sealed_blocks: list[str] = []  # the blocks shown by the sealed pieces
        self._live = self._new_document()
        self._live_html: str | None = None
        self._code_blocks: tuple[str, ...] = ()
        self._theme: MarkdownTheme | None = None
        self._style_sheet = ""
        self._pieces_style = ""  # the style sheet of the documents shown
        self._renderer: IncrementalMarkdown | None = None
        self._generation = 0  # bumped whenever the shown content is replaced
        self._rendering = False  # a render (worker or sliced layout) is under way
        self._wanted: tuple[str, MarkdownTheme] | None = None
        self._shown_text: str | None = None
        self._layout_queue: list[list[str]] = []
        self._final_live: list[str] = []
        self._next_update_at = 0.0
        self._tasks = TaskSet(self)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._on_timer_timeout)
        self.anchorClicked.connect(self._on_self_anchor_clicked)

    # -- what is shown -----------------------------------------------------------------

    @property
    def code_blocks(self) -> tuple[str, ...]:
        """The code of the rendered code blocks."""
        return self._code_blocks

    @property
    def pieces(self) -> int:
        """How many documents the text is laid out in."""
        return len(self._sealed) + 1

    @property
    def busy(self) -> bool:
        """Whether a render has not reached the screen yet."""
        return self._rendering or self._wanted is not None

    def toPlainText(self) -> str:  # QTextEdit's name, which callers use
        """The text shown, without markup."""
        parts = [d.toPlainText() for d in (*self._sealed, self._live)]
        return "\n".join(p for p in parts if p)

    def set_markdown(self, text: str, theme: MarkdownTheme) -> None:
        """Show ``text`` rendered as Markdown (text that extends the shown text, as a
        streaming reply does, costs only its end)."""
        self._wanted = (text, theme)
        if self._rendering:
            return  # folded into the next render
        streaming = (
            self._shown_text is not None
            and theme == self._theme
            and text.startswith(self._shown_text)
        )
        if not streaming:
            self._timer.stop()
        elif self._timer.isActive():
            return
        else:
            delay = self._next_update_at - time.monotonic()
            if delay > 0:  # the last update was costly: give the UI thread a turn
                self._timer.start(int(delay * 1000) + 1)
                return
        self._render_wanted()

    def set_plain(self, text: str) -> None:
        """Show ``text`` as typed (line breaks kept, no Markdown); a long text is laid
        out in pieces, as a long reply is."""
        self._replace_content()
        self._wanted = None
        self._timer.stop()
        self._style_sheet = self._pieces_style = ""
        self._theme = None  # the next Markdown render lays everything out anew
        blocks = [
            f"<p style='margin: 0px; white-space: pre-wrap;'>{_plain_html(piece)}</p>"
            for piece in _plain_pieces(clean_text(text))
        ]
        groups, group = _groups(blocks)
        if not groups:
            self._live.show_html("\n".join(group), "")
            self._live_html = None
            return
        self._rendering = True
        self._layout_queue += groups[:-1]
        self._final_live = groups[-1] + group
        self._lay_out_some()

    def retire(self) -> None:
        """Stop for good (the message left the screen): renders still under way or
        pieces still queued are dropped when they land, and nothing is drawn."""
        self._generation += 1
        self._renderer = None
        self._wanted = None
        self._timer.stop()
        self._tasks.forget_all()
        self._layout_queue.clear()
        self._rendering = False
        self.hide()

    # -- rendering ---------------------------------------------------------------------

    def _render_wanted(self) -> None:
        if self._wanted is None:
            return
        text, theme = self._wanted
        self._wanted = None
        if theme != self._theme or self._renderer is None:
            # What is shown stays until the new render replaces it (no blank flash).
            self._theme = theme
            self._style_sheet = document_style_sheet(theme)
            self._renderer = IncrementalMarkdown(theme)
        renderer, generation = self._renderer, self._generation
        self._rendering = True
        if renderer.work(text) > SYNC_CHARS:
            self._tasks.start(
                lambda _report: renderer.render(text),
                lambda result: self._show(result, text, generation),
                lambda error: self._fail(error, text, generation),
            )
            return
        try:
            result = renderer.render(text)
        except Exception as error:  # a renderer bug must not break the chat
            self._fail(error, text, generation)
            return
        self._show(result, text, generation)

    def _fail(self, error: Exception, text: str, generation: int) -> None:
        log.error("rendering Markdown failed", exc_info=error)
        if generation != self._generation:
            return
        self.set_plain(text)  # shown as typed rather than not at all

    def _show(self, result: RenderedMarkdown, text: str, generation: int) -> None:
        if generation != self._generation:
            return  # the content was replaced meanwhile
        started = time.monotonic()
        self._code_blocks = result.code_blocks
        self._shown_text = text
        sealed = len(self._sealed_blocks)
        if (
            self._pieces_style != self._style_sheet
            or tuple(self._sealed_blocks) != result.blocks[:sealed]
        ):
            # Other colours, other text, or a document-wide change (a late link
            # definition): lay everything out again.
            self._drop_sealed()
            self._pieces_style = self._style_sheet
            self._live_html = None
            sealed = 0
        # Settled blocks are sealed; so is a huge open tail (a stored reply that is one
        # long paragraph: its last block is never settled), all but its last pieces:
        # laid out whole it froze the window for tens of seconds. Should one of them
        # still change, the prefix check above lays everything out again.
        sealable = result.settled
        rest = sum(len(block) for block in result.blocks[sealable:])
        while rest > SEAL_CHARS and sealable < len(result.blocks) - 1:
            rest -= len(result.blocks[sealable])
            sealable += 1
        groups, group = _groups(result.blocks[sealed:sealable])
        self._layout_queue += groups
        self._final_live = group + list(result.blocks[sealable:])
        self._lay_out_some()
        self._next_update_at = time.monotonic() + max(
            BACKOFF_MIN_S, BACKOFF_FACTOR * (time.monotonic() - started)
        )

    def _continue_layout(self, generation: int) -> None:
        if generation == self._generation:
            self._lay_out_some()

    def _lay_out_some(self) -> None:
        budget = LAYOUT_SLICE_CHARS
        while self._layout_queue and budget > 0:
            group = self._layout_queue.pop(0)
            document = self._new_document()
            document.show_html("\n".join(group), self._style_sheet)
            self._layout.insertWidget(len(self._sealed), document)
            self._sealed.append(document)
            self._sealed_blocks += group
            budget -= sum(len(block) for block in group)
        if self._layout_queue:
            self._live.show_html(
                "", self._style_sheet
            )  # nothing below what is laid out
            self._live_html = ""
            generation = self._generation
            QTimer.singleShot(0, self, lambda: self._continue_layout(generation))
            return
        live_html = "\n".join(self._final_live)
        if live_html != self._live_html:
            self._live.show_html(live_html, self._style_sheet)
            self._live_html = live_html
        self._rendering = False
        if self._wanted is None:
            self.markdown_shown.emit()
        else:
            self.set_markdown(*self._wanted)

    def _on_timer_timeout(self) -> None:
        if not self._rendering:
            self._render_wanted()

    # -- pieces ------------------------------------------------------------------------

    def _new_document(self) -> _Document:
        document = _Document(self)
        document.anchorClicked.connect(self.anchorClicked)
        self._layout.addWidget(document)
        return document

    def _replace_content(self) -> None:
        """Forget what is shown (plain text replaces it); renders under way are dropped."""
        self._generation += 1
        self._renderer = None  # a dropped render may still be using it on the worker
        self._drop_sealed()
        self._layout_queue.clear()
        self._final_live = []
        self._code_blocks = ()
        self._shown_text = None
        self._live_html = None
        self._rendering = False

    def _drop_sealed(self) -> None:
        for document in self._sealed:
            self._layout.removeWidget(document)
            document.deleteLater()
        self._sealed.clear()
        self._sealed_blocks.clear()

    def _on_self_anchor_clicked(self, url: QUrl) -> None:
        if url.scheme() == COPY_CODE_SCHEME:
            index = int(url.path() or url.toString().split(":", 1)[1])
            if 0 <= index < len(self._code_blocks):
                QGuiApplication.clipboard().setText(self._code_blocks[index])
                self.code_copied.emit(index)
            return
        if is_openable(url.toString()):
            QDesktopServices.openUrl(url)


def _groups(blocks: Sequence[str]) -> tuple[list[list[str]], list[str]]:
    """Cut ``blocks`` into groups of at least `SEAL_CHARS` characters, and the rest."""
    groups: list[list[str]] = []
    group: list[str] = []
    size = 0
    for block in blocks:
        group.append(block)
        size += len(block)
        if size >= SEAL_CHARS:
            groups.append(group)
            group, size = [], 0
    return groups, group


def _plain_pieces(text: str) -> list[str]:
    """Cut plain text into pieces of at most `PIECE_CHARS` characters, after a line
    break or a space where there is one near the end of a piece."""
    pieces: list[str] = []
    start = 0
    while len(text) - start > PIECE_CHARS:
        end = start + PIECE_CHARS
        cut = text.rfind("\n", start + PIECE_CHARS // 2, end)
        if cut < 0:
            cut = text.rfind(" ", start + PIECE_CHARS // 2, end)
        end = cut + 1 if cut >= 0 else end
        pieces.append(text[start:end])
        start = end
    pieces.append(text[start:])
    return pieces


def _plain_html(text: str) -> str:
    return html.escape(text.removesuffix("\n")).replace("\n", "<br/>")
