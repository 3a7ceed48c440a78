"""The card that stands where a trim replaced earlier messages.

"N earlier messages summarised" and how the summary was written, expanding to the
summary and, on demand, to the original messages, which the store keeps (shown
read-only as `MessageView`s). The card's wording is shown as plain text, never markup.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.core.notice_words import trim_card_title
from app.core.store.records import Message, Summary
from app.core.text.markdown_html import LIGHT_THEME, MarkdownTheme
from app.ui.chat.message_view import MessageView
from app.ui.chat.rich_text_view import RichTextView


class TrimCardView(QFrame):
    """Stands for messages a summary replaced: expands to the summary and the originals.

    Args:
        summary: The active summary.
        messages: The messages it covers, in order.
        theme: Markdown colours.
        origin: How the summary was written (`notice_words.summary_origin`).
    """

    def __init__(
        self,
        summary: Summary,
        messages: list[Message],
        theme: MarkdownTheme = LIGHT_THEME,
        origin: str = "",
        parent: QWidget | None = None,
    ):
        super().__init__(parent)
        self.setObjectName("trimCard")
        self.summary = summary
        self.messages = messages
        self._theme = theme
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        header = QHBoxLayout()
        count = len(messages)
        noun = "message" if count == 1 else "messages"
        heading = QVBoxLayout()
        heading.setSpacing(0)
        self.title_label = QLabel(
            trim_card_title(
                count, summary.cause, summary.limit_tokens, summary.trim_at_tokens
            )
        )
        self.title_label.setTextFormat(Qt.TextFormat.PlainText)
        self.title_label.setWordWrap(True)
        bold = self.title_label.font()
        bold.setBold(True)
        self.title_label.setFont(bold)
        heading.addWidget(self.title_label)
        self.origin_label = QLabel(f"Summary {origin or 'written'}.")
        self.origin_label.setObjectName("trimOrigin")
        self.origin_label.setTextFormat(Qt.TextFormat.PlainText)
        self.origin_label.setWordWrap(True)
        heading.addWidget(self.origin_label)
        header.addLayout(heading, 1)
        self.summary_button = QPushButton("Show summary")
        self.summary_button.setCheckable(True)
        self.summary_button.toggled.connect(self._on_summary_button_toggled)
        header.addWidget(self.summary_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(header)

        self.summary_view = RichTextView(self)
        self.summary_view.hide()
        layout.addWidget(self.summary_view)
        self.originals_button = QPushButton(f"Show the {count} original {noun}")
        self.originals_button.setCheckable(True)
        self.originals_button.toggled.connect(self._on_originals_button_toggled)
        self.originals_button.hide()
        layout.addWidget(self.originals_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.originals = QWidget(self)
        self.originals.setObjectName("trimOriginals")
        self._originals_layout = QVBoxLayout(self.originals)
        self._originals_layout.setContentsMargins(0, 4, 0, 0)
        self.originals.hide()
        layout.addWidget(self.originals)
        self.original_views: list[MessageView] = []

    @property
    def message_ids(self) -> list[int]:
        """Ids of the covered messages."""
        return [m.id for m in self.messages]

    def expand_summary(self, expanded: bool = True) -> None:
        """Show or hide the summary."""
        self.summary_button.setChecked(expanded)

    def expand_originals(self, expanded: bool = True) -> None:
        """Show or hide the original messages (showing the summary too)."""
        if expanded:
            self.expand_summary(True)
        self.originals_button.setChecked(expanded)

    def original_view(self, message_id: int) -> MessageView | None:
        """The view of a covered message, once the originals are shown."""
        return next(
            (v for v in self.original_views if v.message_id == message_id), None
        )

    def set_theme(self, theme: MarkdownTheme) -> None:
        """Re-render what is shown with other colours."""
        self._theme = theme
        if self.summary_view.toPlainText():
            self.summary_view.set_markdown(self.summary.content, theme)
        for view in self.original_views:
            view.set_theme(theme)

    def _on_summary_button_toggled(self, checked: bool) -> None:
        if checked and not self.summary_view.toPlainText():
            self.summary_view.set_markdown(self.summary.content, self._theme)
        self.summary_view.setVisible(checked)
        self.originals_button.setVisible(checked)
        self.summary_button.setText("Hide summary" if checked else "Show summary")
        if not checked:
            self.originals_button.setChecked(False)
        else:
            _reveal(self.summary_view)

    def _on_originals_button_toggled(self, checked: bool) -> None:
        if checked and not self.original_views:
            for message in self.messages:
                view = MessageView.from_message(message, self._theme, read_only=True)
                view.setProperty("trimmed", True)
                self._originals_layout.addWidget(view)
                self.original_views.append(view)
        self.originals.setVisible(checked)
        count = len(self.messages)
        noun = "message" if count == 1 else "messages"
        self.originals_button.setText(
            f"Hide the original {noun}"
            if checked
            else f"Show the {count} original {noun}"
        )


def _reveal(widget: QWidget) -> None:
    """Scroll the chat so ``widget`` (just opened) is in view, once it is laid out.

    A summary opened on a card at the top of a long chat grew above the viewport.
    """
    area = widget.parentWidget()
    while area is not None and not isinstance(area, QScrollArea):
        area = area.parentWidget()
    if area is not None:
        QTimer.singleShot(0, lambda: area.ensureWidgetVisible(widget, 0, 40))
