"""The transcript in the centre of the window: stored messages, trim cards, the live reply.

The view shows what the store says (`show_conversation`), plus the turn being written
(`start_live_turn` / `set_live_text`), which the turn controller replaces by the stored
messages once the turn ends. The reply's text so far belongs to the `TurnController`
(it outlives this view's widgets when another conversation is shown); the view only
keeps the newest text it was given to render. Stored messages are keyed by their
content and state, so showing the same conversation again reuses the widgets that did
not change instead of rebuilding the whole transcript. Live text is coalesced by a
`Throttle`: the Markdown is re-rendered at most every 40 ms.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.core.store.calls.tool_calls import StoredToolCall
from app.core.store.records import Message, Summary
from app.core.text.display_numbers import message_footer
from app.core.text.markdown_html import LIGHT_THEME, MarkdownTheme
from app.ui.chat.message_view import MessageView
from app.ui.chat.rich_text_view import RichTextView
from app.ui.chat.tools.tool_call_card import ToolCallCard
from app.ui.chat.trim_card_view import TrimCardView
from app.ui.common.look import SPACE
from app.ui.common.throttle import Throttle

THINKING = "Thinking…"
"""The live reply's status line until something else is known."""

COLUMN_MAX_WIDTH = 920
HIGHLIGHT_MS = 2500
STYLE_SHEET = """
QWidget#chatCanvas { background: palette(base); }
QFrame#bubble[role="user"] { background: palette(alternate-base); border-radius: 14px; }
QFrame#message[highlighted="true"] { border: 2px solid palette(highlight); border-radius: 10px; }
QFrame#trimCard { border: 1px dashed palette(mid); border-radius: 10px; }
QFrame#toolCallCard { border: 1px solid palette(mid); border-radius: 10px; background: palette(window); }
QLabel#messageFooter, QLabel#roleLabel { color: palette(placeholder-text); }
QLabel#emptyHint { color: palette(placeholder-text); }
"""


class ChatView(QWidget):
    """The scrolling transcript of one conversation."""

    edit_submitted = Signal(int, str)
    pin_toggled = Signal(int, bool)
    regenerate_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("chatView")
        self.setStyleSheet(STYLE_SHEET)
        self._theme = LIGHT_THEME
        self._busy = False
        self._stick_to_bottom = True
        self._items: list[QWidget] = []
        self._keys: dict[QWidget, tuple] = {}
        self._live_user: MessageView | None = None
        self._live_reply: MessageView | None = None
        self._live_cards: list[QWidget] = []
        self._text_to_render = ""
        self._adoptable: list[MessageView] = []
        self._throttle = Throttle(self._flush_live_text, parent=self)

        self.scroll_area = QScrollArea(self)
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(
            Qt.ScrollBarPolicy.ScrollBarAlwaysOff
        )
        outer = QWidget()
        outer.setObjectName("chatCanvas")
        row = QHBoxLayout(outer)
        row.setContentsMargins(SPACE["xl"], SPACE["l"], SPACE["xl"], SPACE["l"])
        self._column = QWidget()
        self._column.setMaximumWidth(COLUMN_MAX_WIDTH)
        self._layout = QVBoxLayout(self._column)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(SPACE["l"])
        self.empty_hint = QLabel("Send a message to start the conversation.")
        self.empty_hint.setObjectName("emptyHint")
        self.empty_hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._layout.addWidget(self.empty_hint)
        self._layout.addStretch(1)
        row.addStretch(0)
        row.addWidget(self._column, 1)
        row.addStretch(0)
        self.scroll_area.setWidget(outer)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.scroll_area)

        bar = self.scroll_area.verticalScrollBar()
        bar.rangeChanged.connect(self._on_scroll_bar_range_changed)
        bar.valueChanged.connect(self._on_scroll_bar_value_changed)

    # -- what is shown -----------------------------------------------------------------

    def show_conversation(
        self,
        messages: list[Message],
        summaries: list[Summary],
        *,
        keep_live: bool = False,
        origins: dict[int, str] | None = None,
        tool_calls: dict[int, list[StoredToolCall]] | None = None,
    ) -> None:
        """Show stored messages (trimmed ones inside their summary's card).

        Args:
            messages: Every message, trimmed ones included, in order.
            summaries: The active summaries.
            keep_live: Keep the turn being written below the stored messages.
            origins: How each summary (by id) was written, for its card.
            tool_calls: Each reply's tool calls (by message id), shown as cards.
        """
        adoptable: list[MessageView] = []
        if not keep_live:
            self._throttle.flush()
            adoptable = [
                w for w in (self._live_user, self._live_reply) if w is not None
            ]
            self._live_user = self._live_reply = None
            self._clear_live()
        self._adoptable = adoptable
        wanted = self._plan(messages, summaries, origins or {}, tool_calls or {})
        reusable = {key: widget for widget, key in self._keys.items()}
        items: list[QWidget] = []
        keys: dict[QWidget, tuple] = {}
        for key, make in wanted:
            widget = reusable.pop(key, None) or make()
            items.append(widget)
            keys[widget] = key
        for widget in [*self._items, *adoptable]:
            self._layout.removeWidget(widget)
        for widget in [*reusable.values(), *self._adoptable]:
            _discard(widget)
        self._adoptable = []
        for index, widget in enumerate(items):
            self._layout.insertWidget(index, widget)
            widget.show()  # now, not on the layout's queued show: state is exact at once
        self._items, self._keys = items, keys
        self._update_actions()
        self._update_empty_hint()

    def _plan(
        self,
        messages: list[Message],
        summaries: list[Summary],
        origins: dict,
        tool_calls: dict[int, list[StoredToolCall]],
    ):
        by_id = {s.id: s for s in summaries}
        covered: dict[int, list[Message]] = {}
        for message in messages:
            if message.summary_id in by_id:
                covered.setdefault(message.summary_id, []).append(message)
        wanted = []
        placed: set[int] = set()
        for message in messages:
            if message.state == "generating":
                continue  # the live reply stands for it while it is written
            summary = (
                by_id.get(message.summary_id)
                if message.summary_id is not None
                else None
            )
            if summary is not None:
                if summary.id not in placed:
                    placed.add(summary.id)
                    group = covered[summary.id]
                    origin = origins.get(summary.id, "")
                    key: tuple[object, ...] = (
                        "summary",
                        summary.id,
                        tuple(m.id for m in group),
                        origin,
                    )
                    wanted.append((key, self._card_factory(summary, group, origin)))
                continue
            key = ("message", message.id, message.content, message_footer(message))
            if message.content or message.reasoning or message.id not in tool_calls:
                wanted.append((key, self._message_factory(message)))
            for call in tool_calls.get(message.id, []):
                card_key = ("tool", call.message_id, call.position, call.result)
                wanted.append((card_key, _tool_card_factory(call)))
        return wanted

    def _message_factory(self, message: Message):
        def make() -> MessageView:
            view = next(
                (
                    w
                    for w in self._adoptable
                    if w.role == message.role and w.text == message.content
                ),
                None,
            )
            if view is not None:
                self._adoptable.remove(view)
                view.adopt(message)
            else:
                view = MessageView.from_message(message, self._theme)
            view.edit_submitted.connect(self.edit_submitted)
            view.regenerate_requested.connect(self.regenerate_requested)
            view.pin_toggled.connect(self.pin_toggled)
            return view

        return make

    def _card_factory(self, summary: Summary, group: list[Message], origin: str):
        return lambda: TrimCardView(summary, group, self._theme, origin)

    def clear(self) -> None:
        """Show nothing (a new chat)."""
        self.show_conversation([], [])

    def set_theme(self, theme: MarkdownTheme) -> None:
        """Re-render everything with other colours."""
        if theme == self._theme:
            return
        self._theme = theme
        for widget in [*self._items, self._live_user, self._live_reply]:
            if isinstance(widget, MessageView | TrimCardView):
                widget.set_theme(theme)

    def set_busy(self, busy: bool) -> None:
        """Forbid edits and regeneration while a reply is being written."""
        self._busy = busy
        self._update_actions()

    # -- the live turn -----------------------------------------------------------------

    def start_live_turn(self, user_text: str | None, reply_so_far: str = "") -> None:
        """Show a turn being written: the user's message (if new) and the reply."""
        self._clear_live()
        if user_text is not None:
            self._live_user = MessageView(
                "user", user_text, self._theme, read_only=True
            )
            self._live_user.setProperty("live", True)
            self._layout.insertWidget(self._live_index(), self._live_user)
            self._live_user.show()
        self._text_to_render = reply_so_far
        self._live_reply = MessageView(
            "assistant", reply_so_far, self._theme, read_only=True
        )
        self._live_reply.setProperty("live", True)
        self._live_reply.set_footer(THINKING)
        self._layout.insertWidget(self._live_index(), self._live_reply)
        self._live_reply.show()
        self._stick_to_bottom = True
        self._update_empty_hint()

    def set_live_text(self, text: str) -> None:
        """Show ``text`` as the reply so far (rendered on the next tick)."""
        if self._live_reply is None:
            return
        self._text_to_render = text
        self._throttle.trigger()

    def set_live_reasoning(
        self, text: str, tokens: int, seconds: float, *, done: bool
    ) -> None:
        """Show the live reply's thought: open while it grows, collapsed once done."""
        if self._live_reply is None:
            return
        thinking = self._live_reply.thinking
        if done:
            thinking.show_done(text, tokens, seconds)
        else:
            thinking.show_live(text, tokens, seconds)

    def set_live_footer(self, text: str) -> None:
        """Set the status line of the reply being written."""
        if self._live_reply is not None:
            self._live_reply.set_footer(text)

    def end_live_turn(self) -> None:
        """Remove the live turn (the stored messages replace it)."""
        self._clear_live()

    @property
    def live_reply(self) -> MessageView | None:
        """The reply being written, if any."""
        return self._live_reply

    def _live_index(self) -> int:
        return self._layout.count() - 2  # before the empty hint and the stretch

    def _flush_live_text(self) -> None:
        if self._live_reply is not None:
            self._live_reply.set_text(self._text_to_render)
            self._live_reply.set_footer("Writing…")

    def add_live_card(self, card: QWidget) -> None:
        """Show a tool call's card below the reply being written."""
        self._live_cards.append(card)
        self._layout.insertWidget(self._live_index(), card)
        card.show()

    def _clear_live(self) -> None:
        self._throttle.cancel()
        cards, self._live_cards = self._live_cards, []
        for widget in (self._live_user, self._live_reply, *cards):
            if widget is not None:
                self._layout.removeWidget(widget)
                _discard(widget)
        self._live_user = self._live_reply = None
        self._text_to_render = ""
        self._update_empty_hint()

    # -- editing -----------------------------------------------------------------------

    def remove_from(self, message_id: int) -> None:
        """Remove a message and everything after it (it is being edited and resent)."""
        index = next(
            (
                i
                for i, w in enumerate(self._items)
                if getattr(w, "message_id", None) == message_id
            ),
            None,
        )
        if index is None:
            return
        for widget in self._items[index:]:
            self._layout.removeWidget(widget)
            self._keys.pop(widget, None)
            _discard(widget)
        self._items = self._items[:index]
        self._update_empty_hint()

    def remove_last_reply(self) -> None:
        """Remove the last reply (it is being regenerated)."""
        last = self._items[-1] if self._items else None
        if (
            isinstance(last, MessageView)
            and last.role == "assistant"
            and last.message_id is not None  # listed replies are saved ones
        ):
            self.remove_from(last.message_id)

    # -- lookups -----------------------------------------------------------------------

    def message_views(self) -> list[MessageView]:
        """The stored messages shown outside trim cards, in order."""
        return [w for w in self._items if isinstance(w, MessageView)]

    def trim_cards(self) -> list[TrimCardView]:
        """The trim cards, in order."""
        return [w for w in self._items if isinstance(w, TrimCardView)]

    def reveal_message(self, message_id: int) -> bool:
        """Scroll to a message (opening its trim card if needed) and flash it."""
        target = next(
            (v for v in self.message_views() if v.message_id == message_id), None
        )
        if target is None:
            for card in self.trim_cards():
                if message_id in card.message_ids:
                    card.expand_originals(True)
                    target = card.original_view(message_id)
                    break
        if target is None:
            return False
        self._stick_to_bottom = False
        target.setProperty("highlighted", True)
        self._repolish(target)
        QTimer.singleShot(
            0, lambda: self.scroll_area.ensureWidgetVisible(target, 0, 40)
        )

        def unflash() -> None:
            try:
                target.setProperty("highlighted", False)
                self._repolish(target)
            except RuntimeError:
                pass  # the conversation was closed meanwhile

        QTimer.singleShot(HIGHLIGHT_MS, self, unflash)
        return True

    def scroll_to_bottom(self) -> None:
        """Show the newest message."""
        self._stick_to_bottom = True
        bar = self.scroll_area.verticalScrollBar()
        bar.setValue(bar.maximum())

    # -- internals ---------------------------------------------------------------------

    def _update_actions(self) -> None:
        views = self.message_views()
        last = self._items[-1] if self._items else None
        for view in views:
            view.set_actions_enabled(not self._busy)
            view.set_regenerate_visible(view is last and view.role == "assistant")

    def _update_empty_hint(self) -> None:
        empty = not self._items and self._live_reply is None
        self.empty_hint.setVisible(empty)

    def _on_scroll_bar_range_changed(self, _minimum: int, maximum: int) -> None:
        if self._stick_to_bottom:
            self.scroll_area.verticalScrollBar().setValue(maximum)

    def _on_scroll_bar_value_changed(self, value: int) -> None:
        bar = self.scroll_area.verticalScrollBar()
        self._stick_to_bottom = value >= bar.maximum() - 40

    @staticmethod
    def _repolish(widget: QWidget) -> None:
        widget.style().unpolish(widget)
        widget.style().polish(widget)
        widget.update()


def _discard(widget: QWidget) -> None:
    """Take a message or card off the screen now and delete it later.

    `deleteLater` waits for the event loop; until then a widget taken out of the layout
    stays a visible child of the column, and renders still landing in it (a long reply
    of the conversation just left) drew its text over the one opened (#31 point 8).
    """
    for view in widget.findChildren(RichTextView):
        view.retire()
    widget.hide()
    widget.deleteLater()


def _tool_card_factory(call: StoredToolCall):
    return lambda: ToolCallCard.from_call(call)
