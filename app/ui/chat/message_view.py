"""One message of the chat.

`MessageView` shows a user message or a reply: the text (replies as rendered Markdown
with highlighted code and a Copy link per code block), buttons to copy (it says
"Copied" for a moment), edit and resend (user; Enter sends the edit) or regenerate (the
last reply), and the reply's stats. Text from data (footers with an error) is shown as
plain text, never markup. The card that stands for a summarised stretch of messages is
`trim_card_view`.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QFrame,
    QGraphicsOpacityEffect,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.store.records import Message
from app.core.text.display_numbers import message_footer
from app.core.text.markdown_html import LIGHT_THEME, MarkdownTheme
from app.ui.chat.recall_chip_view import RecallChipView
from app.ui.chat.rich_text_view import RichTextView
from app.ui.chat.sending_text_edit import SendingTextEdit
from app.ui.chat.thinking_view import ThinkingView
from app.ui.common.icons import set_icon
from app.ui.common.look import SPACE, set_type

ROLE_NAMES = {"user": "You", "assistant": "Assistant", "system": "System"}
COPIED_FEEDBACK_MS = 1500
USER_BUBBLE_SHARE = 0.8
"""At most this share of the column is taken by a user's bubble."""
LINES_MEASURED = 200
"""A user's bubble is sized to its longest line among the first this many."""
LONG_LINE_CHARS = 400
"""A line longer than this fills the bubble's widest without being measured."""


def _action_button(icon_name: str, text: str, tooltip: str) -> QToolButton:
    """A message action: an icon, its name as the accessible text and the tooltip."""
    button = QToolButton()
    button.setObjectName("messageAction")
    button.setText(text)
    button.setToolTip(tooltip)
    button.setAccessibleName(text)
    button.setAutoRaise(True)
    button.setCursor(Qt.CursorShape.PointingHandCursor)
    button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonIconOnly)
    set_icon(button, icon_name)
    return button


class MessageView(QFrame):
    """A user message or a reply.

    Args:
        role: ``user`` or ``assistant``.
        text: The content.
        theme: Markdown colours.
        message_id: The stored message, or None while it is being written.
        footer: The line under it (stats, "Stopped"...).
        read_only: No edit or regenerate buttons (e.g. inside a trim card).
    """

    edit_submitted = Signal(int, str)
    regenerate_requested = Signal()
    pin_toggled = Signal(int, bool)

    def __init__(
        self,
        role: str,
        text: str,
        theme: MarkdownTheme = LIGHT_THEME,
        *,
        message_id: int | None = None,
        footer: str = "",
        read_only: bool = False,
        parent: QWidget | None = None,
    ):
        super().__init__(parent)
        self.setObjectName("message")
        self.setProperty("role", role)
        self.role = role
        self.message_id = message_id
        self.text = text
        self._theme = theme
        self._actions_enabled = True

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(SPACE["xxs"])
        # The user's words sit in a tinted bubble on the right, as wide as they need;
        # a reply is plain text across the column (the look of LM Studio, Jan, ChatGPT).
        self.bubble = QFrame(self)
        self.bubble.setObjectName("bubble")
        self.bubble.setProperty("role", role)
        layout = QVBoxLayout(self.bubble)
        if role == "user":
            layout.setContentsMargins(SPACE["m"], SPACE["s"], SPACE["m"], SPACE["s"])
            bubble_row = QHBoxLayout()
            bubble_row.setContentsMargins(0, 0, 0, 0)
            bubble_row.addStretch(1)
            bubble_row.addWidget(self.bubble)
            outer.addLayout(bubble_row)
        else:
            layout.setContentsMargins(SPACE["xs"], 0, SPACE["xs"], 0)
            outer.addWidget(self.bubble)
        layout.setSpacing(SPACE["xxs"])
        self.role_label = QLabel(ROLE_NAMES.get(role, role))
        self.role_label.setObjectName("roleLabel")
        set_type(self.role_label, "caption", weight=600)
        self.role_label.setVisible(role != "user")
        layout.addWidget(self.role_label)

        # The actions: icon buttons under the message, shown while the mouse is over
        # it (or a button has the keyboard focus, or the reply is the last one); their
        # place is kept, so nothing moves when they appear.
        self.action_bar = QWidget(self)
        self.action_bar.setObjectName("messageActions")
        actions = QHBoxLayout(self.action_bar)
        actions.setContentsMargins(0, 0, 0, 0)
        actions.setSpacing(SPACE["xxs"])
        self.action_bar.setSizePolicy(
            QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed
        )
        self._actions_effect = QGraphicsOpacityEffect(self.action_bar)
        self.action_bar.setGraphicsEffect(self._actions_effect)
        self.copy_button = _action_button("copy", "Copy", "Copy this message")
        self.copy_button.clicked.connect(self._on_copy_button_clicked)
        self._copied_timer = QTimer(self)
        self._copied_timer.setSingleShot(True)
        self._copied_timer.setInterval(COPIED_FEEDBACK_MS)
        self._copied_timer.timeout.connect(self._on_copied_timer_timeout)
        self.edit_button = _action_button(
            "pencil", "Edit", "Edit this message and send it again"
        )
        self.edit_button.clicked.connect(self._on_edit_button_clicked)
        self.edit_button.setVisible(role == "user" and not read_only)
        self.regenerate_button = _action_button(
            "refresh-cw", "Regenerate", "Write this reply again"
        )
        self.regenerate_button.clicked.connect(self.regenerate_requested)
        self.regenerate_button.hide()
        self.pin_button = _action_button(
            "pin", "Pin", "Keep this message word for word after the summary"
        )
        self.pin_button.setCheckable(True)
        self.pin_button.clicked.connect(self._on_pin_button_clicked)
        self.pin_button.setVisible(message_id is not None and not read_only)
        for button in (
            self.copy_button,
            self.edit_button,
            self.regenerate_button,
            self.pin_button,
        ):
            button.installEventFilter(self)
            actions.addWidget(button)
        self.recall_chip: RecallChipView | None = None
        self._layout = layout

        self.thinking = ThinkingView(self)
        layout.addWidget(self.thinking)
        self.body = RichTextView(self)
        self.body.code_copied.connect(self._on_body_code_copied)
        layout.addWidget(self.body)

        self.editor = SendingTextEdit(self)
        self.editor.setObjectName("messageEditor")
        self.editor.setToolTip("Enter sends, Shift+Enter adds a line")
        self.editor.submitted.connect(self._on_send_edit_button_clicked)
        self.editor.hide()
        layout.addWidget(self.editor)
        edit_buttons = QHBoxLayout()
        edit_buttons.setContentsMargins(0, 0, 0, 0)
        edit_buttons.addStretch(1)
        self.cancel_edit_button = QPushButton("Cancel")
        self.cancel_edit_button.clicked.connect(self._on_cancel_edit_button_clicked)
        self.send_edit_button = QPushButton("Save and send")
        self.send_edit_button.setDefault(True)
        self.send_edit_button.clicked.connect(self._on_send_edit_button_clicked)
        edit_buttons.addWidget(self.cancel_edit_button)
        edit_buttons.addWidget(self.send_edit_button)
        self._edit_row = QWidget(self)
        self._edit_row.setLayout(edit_buttons)
        self._edit_row.hide()
        layout.addWidget(self._edit_row)

        self.footer_label = QLabel()
        self.footer_label.setObjectName("messageFooter")
        self.footer_label.setTextFormat(Qt.TextFormat.PlainText)
        self.footer_label.setWordWrap(True)
        self.footer_label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )
        set_type(self.footer_label, "caption")
        under = QHBoxLayout()
        under.setContentsMargins(SPACE["xs"] if role != "user" else 0, 0, 0, 0)
        under.setSpacing(SPACE["s"])
        if role == "user":
            under.addStretch(1)
            under.addWidget(self.footer_label)
            under.addWidget(self.action_bar)
        else:
            under.addWidget(self.action_bar)
            under.addWidget(self.footer_label, 1)
            under.addStretch(0)
        outer.addLayout(under)
        self._hovered = False
        self._update_actions_shown()
        self.set_footer(footer)
        self._render()

    @classmethod
    def from_message(
        cls, message: Message, theme: MarkdownTheme, *, read_only: bool = False
    ) -> MessageView:
        """A view of a stored message."""
        view = cls(
            message.role,
            message.content,
            theme,
            message_id=message.id,
            footer=message_footer(message),
            read_only=read_only,
        )
        view.show_stored(message)
        view.show_stored_reasoning(message)
        return view

    def show_stored(self, message: Message) -> None:
        """Show what the store says beyond the text: the recall chip, the pin."""
        self.set_pinned(message.pinned)
        if message.recalled and self.recall_chip is None:
            self.recall_chip = RecallChipView(message.recalled, self)
            # Under the header, above the text: it came before the message.
            self._layout.insertWidget(1, self.recall_chip)
            self._fit_bubble()

    def set_pinned(self, pinned: bool) -> None:
        """Show the message as pinned or not."""
        self.pin_button.setChecked(pinned)
        self.pin_button.setText("Pinned" if pinned else "Pin")
        self.pin_button.setToolTip(
            "Pinned: kept word for word after the summary (click to unpin)"
            if pinned
            else "Keep this message word for word after the summary"
        )

    def show_stored_reasoning(self, message: Message) -> None:
        """Show a stored reply's reasoning collapsed (nothing when it has none)."""
        if message.reasoning:
            self.thinking.show_done(
                message.reasoning,
                message.stats.reasoning_tokens or 0,
                message.stats.reasoning_s or 0.0,
            )

    def adopt(self, message: Message) -> None:
        """Become the view of a stored message (a live turn that was just saved).

        Re-rendering a long reply only to show the same text costs tens of
        milliseconds of UI time at the end of every turn; taking over the live view
        avoids it.
        """
        self.message_id = message.id
        self.setProperty("live", False)
        self.edit_button.setVisible(self.role == "user")
        self.pin_button.setVisible(True)
        if message.content != self.text:
            self.set_text(message.content)
        self.show_stored_reasoning(message)
        self.set_footer(message_footer(message))
        self.show_stored(message)

    def set_text(self, text: str) -> None:
        """Replace the text (a streaming reply grows through this)."""
        self.text = text
        self._render()
        self._fit_bubble()

    def set_theme(self, theme: MarkdownTheme) -> None:
        """Re-render with other colours."""
        self._theme = theme
        self._render()

    def set_footer(self, text: str) -> None:
        """Set the line under the message (hidden when empty)."""
        self.footer_label.setText(text)
        self.footer_label.setVisible(bool(text))

    def set_regenerate_visible(self, visible: bool) -> None:
        """Offer to regenerate (only the last reply has it; its actions always show)."""
        self.regenerate_button.setVisible(visible)
        self._update_actions_shown()

    @property
    def actions_shown(self) -> bool:
        """True while the action buttons are drawn (hover, focus, the last reply)."""
        return self._actions_effect.opacity() > 0

    def enterEvent(self, event) -> None:
        self._hovered = True
        self._update_actions_shown()
        super().enterEvent(event)

    def leaveEvent(self, event) -> None:
        self._hovered = False
        self._update_actions_shown()
        super().leaveEvent(event)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() in (QEvent.Type.FocusIn, QEvent.Type.FocusOut):
            # The focus has moved when the event arrives: hasFocus() tells already.
            self._update_actions_shown()
        return super().eventFilter(watched, event)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_bubble()

    def _update_actions_shown(self) -> None:
        focused = any(
            b.hasFocus()
            for b in (
                self.copy_button,
                self.edit_button,
                self.regenerate_button,
                self.pin_button,
            )
        )
        shown = (
            self._hovered
            or focused
            or self.regenerate_button.isVisibleTo(self)
            or self._copied_timer.isActive()
        )
        self._actions_effect.setOpacity(1.0 if shown else 0.0)

    def _fit_bubble(self) -> None:
        """Size a user's bubble to its longest line, at most `USER_BUBBLE_SHARE` wide."""
        if self.role != "user":
            return
        widest = int(self.width() * USER_BUBBLE_SHARE)
        if self.editor.isVisible() or self.recall_chip is not None:
            self.bubble.setFixedWidth(max(widest, 1))
            return
        metrics = self.body.fontMetrics()
        natural = 0
        for line in self.text.splitlines()[:LINES_MEASURED]:
            if len(line) > LONG_LINE_CHARS:
                natural = widest
                break
            natural = max(natural, metrics.horizontalAdvance(line))
        margins = self._layout.contentsMargins()
        # The document's own margins and a little slack, so the last word never wraps.
        natural += margins.left() + margins.right() + 4 * SPACE["xxs"] + 8
        self.bubble.setFixedWidth(max(1, min(natural, widest)))

    def set_actions_enabled(self, enabled: bool) -> None:
        """Allow or forbid edit and regenerate (forbidden while a reply streams)."""
        self._actions_enabled = enabled
        self.edit_button.setEnabled(enabled)
        self.regenerate_button.setEnabled(enabled)
        self.send_edit_button.setEnabled(enabled)

    def start_editing(self) -> None:
        """Replace the text by an editor holding it."""
        self.editor.setPlainText(self.text)
        self.editor.moveCursor(self.editor.textCursor().MoveOperation.End)
        self.body.hide()
        self.editor.show()
        self._edit_row.show()
        self._fit_bubble()
        self.editor.setFocus()

    def _render(self) -> None:
        if self.role == "assistant":
            self.body.set_markdown(self.text, self._theme)
        else:
            self.body.set_plain(self.text)

    def _on_pin_button_clicked(self, checked: bool) -> None:
        if self.message_id is not None:
            self.pin_toggled.emit(self.message_id, checked)

    def _on_copy_button_clicked(self) -> None:
        QGuiApplication.clipboard().setText(self.text)
        self._show_copied("Copied ✓")

    def _on_body_code_copied(self, _index: int) -> None:
        self._show_copied("Code copied ✓")

    def _show_copied(self, text: str) -> None:
        # Words for a moment: an icon alone would not say what was copied.
        self.copy_button.setText(text)
        self.copy_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self._copied_timer.start()
        self._update_actions_shown()

    def _on_copied_timer_timeout(self) -> None:
        self.copy_button.setText("Copy")
        self.copy_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonIconOnly)
        self._update_actions_shown()

    def _on_edit_button_clicked(self) -> None:
        self.start_editing()

    def _on_cancel_edit_button_clicked(self) -> None:
        self.editor.hide()
        self._edit_row.hide()
        self.body.show()
        self._fit_bubble()

    def _on_send_edit_button_clicked(self) -> None:
        text = self.editor.toPlainText().strip()
        if not text or self.message_id is None or not self._actions_enabled:
            return
        self._on_cancel_edit_button_clicked()
        self.edit_submitted.emit(self.message_id, text)
