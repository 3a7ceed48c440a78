"""The left column: search box, New chat, and the conversations, newest first.

Titles are edited in place (double-click, F2, or Rename in the context menu). While the
search box holds text, the list is replaced by the search hits (title and a snippet
with the matches in bold); clicking one opens its conversation. The view only shows
and reports: the window does the store calls.
"""

from __future__ import annotations

import html
import re

from PySide6.QtCore import QEvent, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QIcon, QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.store.records import Conversation, SearchHit
from app.ui.common.icons import set_action_icon, set_icon
from app.ui.common.plain_text import plain_tooltip
from app.ui.common.theme import muted_colour

UNTITLED = "New conversation"
SEARCH_DELAY_MS = 200
ID_ROLE = Qt.ItemDataRole.UserRole
MESSAGE_ROLE = Qt.ItemDataRole.UserRole + 1


def snippet_html(snippet: str) -> str:
    """A search snippet as HTML: ``[match]`` markers become bold."""
    escaped = html.escape(snippet)
    return re.sub(r"\[([^\[\]]*)\]", r"<b>\1</b>", escaped)


class ConversationListView(QWidget):
    """Conversations and search results."""

    conversation_selected = Signal(int)
    new_requested = Signal()
    rename_submitted = Signal(int, str)
    delete_requested = Signal(int)
    import_requested = Signal()
    search_changed = Signal(str)
    search_hit_activated = Signal(int, object)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("conversationList")
        self._filling = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 4, 8)
        layout.setSpacing(6)

        top = QHBoxLayout()
        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Search all messages")
        self.search_edit.setClearButtonEnabled(True)
        search_icon = self.search_edit.addAction(
            QIcon(), QLineEdit.ActionPosition.LeadingPosition
        )
        set_action_icon(search_icon, "search")
        self.search_edit.textChanged.connect(self._on_search_edit_text_changed)
        self.search_edit.setToolTip(
            "Search every message (Ctrl+F); Down or Enter goes to the results, Esc clears"
        )
        self.search_edit.installEventFilter(self)
        top.addWidget(self.search_edit, 1)
        layout.addLayout(top)
        self.new_button = QPushButton("New chat")
        set_icon(self.new_button, "square-pen")
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.new_requested)
        layout.addWidget(self.new_button)

        self.stack = QStackedWidget()
        self.list = QListWidget()
        self.list.setObjectName("conversations")
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setEditTriggers(
            QAbstractItemView.EditTrigger.DoubleClicked
            | QAbstractItemView.EditTrigger.EditKeyPressed
        )
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(
            self._on_list_context_menu_requested
        )
        self.list.currentItemChanged.connect(self._on_list_current_item_changed)
        self.list.itemChanged.connect(self._on_list_item_changed)
        self.stack.addWidget(self.list)

        results = QWidget()
        results_layout = QVBoxLayout(results)
        results_layout.setContentsMargins(0, 0, 0, 0)
        self.results_label = QLabel()
        self.results_label.setWordWrap(True)
        results_layout.addWidget(self.results_label)
        self.results = QListWidget()
        self.results.setObjectName("searchResults")
        self.results.setWordWrap(True)
        self.results.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.results.itemClicked.connect(self._on_results_item_clicked)
        self.results.itemActivated.connect(self._on_results_item_clicked)
        self.results.viewport().installEventFilter(self)
        results_layout.addWidget(self.results, 1)
        self.stack.addWidget(results)
        layout.addWidget(self.stack, 1)

        self.delete_action = QAction("Delete conversation", self)
        self.delete_action.setShortcut(QKeySequence.StandardKey.Delete)
        self.delete_action.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        self.delete_action.triggered.connect(self._on_delete_action_triggered)
        self.list.addAction(self.delete_action)

        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(SEARCH_DELAY_MS)
        self._search_timer.timeout.connect(self._on_search_timer_timeout)

    # -- conversations -----------------------------------------------------------------

    def set_conversations(
        self, conversations: list[Conversation], current_id: int | None
    ) -> None:
        """Show ``conversations`` (already newest first) and select ``current_id``."""
        self._filling = True
        try:
            self.list.clear()
            for conversation in conversations:
                item = QListWidgetItem(conversation.title or UNTITLED)
                item.setData(ID_ROLE, conversation.id)
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
                updated = conversation.updated_at.astimezone().strftime(
                    "%Y-%m-%d %H:%M"
                )
                model = conversation.model or "no model yet"
                item.setToolTip(
                    plain_tooltip(
                        f"{conversation.title or UNTITLED}\nLast message {updated}\n"
                        f"Preset {conversation.preset or 'chat'} · {model}\n"
                        "Double-click to rename"
                    )
                )
                self.list.addItem(item)
            self.select(current_id)
        finally:
            self._filling = False

    def select(self, conversation_id: int | None) -> None:
        """Highlight a conversation without announcing it."""
        was_filling, self._filling = self._filling, True
        try:
            item = self._item(conversation_id)
            # Qt takes None (no current item); PySide6's stub leaves it out.
            self.list.setCurrentItem(item)  # type: ignore[arg-type]
            if item is None:
                self.list.clearSelection()
        finally:
            self._filling = was_filling

    def conversation_ids(self) -> list[int]:
        """Ids in the order shown."""
        return [self.list.item(i).data(ID_ROLE) for i in range(self.list.count())]

    def current_id(self) -> int | None:
        """The highlighted conversation."""
        item = self.list.currentItem()
        return item.data(ID_ROLE) if item is not None else None

    def start_rename(self, conversation_id: int) -> None:
        """Open the in-place title editor."""
        item = self._item(conversation_id)
        if item is not None:
            self.list.setCurrentItem(item)
            self.list.editItem(item)

    def _item(self, conversation_id: int | None) -> QListWidgetItem | None:
        for i in range(self.list.count()):
            item = self.list.item(i)
            if item.data(ID_ROLE) == conversation_id:
                return item
        return None

    def _on_list_current_item_changed(self, current, _previous) -> None:
        if current is not None and not self._filling:
            self.conversation_selected.emit(current.data(ID_ROLE))

    def _on_list_item_changed(self, item: QListWidgetItem) -> None:
        if self._filling:
            return
        title = item.text().strip()
        if title and title != UNTITLED:
            self.rename_submitted.emit(item.data(ID_ROLE), title)

    def _on_list_context_menu_requested(self, position) -> None:
        item = self.list.itemAt(position)
        menu = QMenu(self)
        if item is not None:
            menu.addAction("Rename", lambda: self.list.editItem(item))
            menu.addAction(
                "Delete…", lambda: self.delete_requested.emit(item.data(ID_ROLE))
            )
            menu.addSeparator()
        menu.addAction("Import conversation…", self.import_requested.emit)
        menu.popup(self.list.viewport().mapToGlobal(position))

    def _on_delete_action_triggered(self) -> None:
        conversation_id = self.current_id()
        if conversation_id is not None:
            self.delete_requested.emit(conversation_id)

    # -- search ------------------------------------------------------------------------

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """The search box's keys: Down/Enter enter the results, Esc clears the search."""
        results = getattr(self, "results", None)  # events come during construction
        if results is not None and watched is results.viewport():
            if event.type() == QEvent.Type.Resize:
                self._fit_results()
        elif (
            watched is self.search_edit
            and event.type() == QEvent.Type.KeyPress
            and isinstance(event, QKeyEvent)
        ):
            key = event.key()
            if key == Qt.Key.Key_Escape and self.search_edit.text():
                self.clear_search()
                return True
            if key in (Qt.Key.Key_Down, Qt.Key.Key_Return, Qt.Key.Key_Enter):
                return self._enter_results(activate=key != Qt.Key.Key_Down)
        return super().eventFilter(watched, event)

    def _enter_results(self, activate: bool) -> bool:
        """Move the keyboard into the results (Enter also opens the first hit)."""
        if self.search_edit.text().strip() and self._search_timer.isActive():
            self._search_timer.stop()
            self._on_search_timer_timeout()  # search now, not after the typing pause
        if self.stack.currentIndex() != 1 or self.results.count() == 0:
            return False
        self.results.setCurrentRow(0)
        self.results.setFocus()
        if activate:
            self._on_results_item_clicked(self.results.item(0))
        return True

    def focus_search(self) -> None:
        """Put the cursor in the search box, selecting what is there."""
        self.search_edit.setFocus()
        self.search_edit.selectAll()

    def show_search_results(self, text: str, hits: list[SearchHit]) -> None:
        """List the hits of a search for ``text``."""
        self.results.clear()
        if not hits:
            self.results_label.setText(f"Nothing found for “{html.escape(text)}”.")
        else:
            noun = "match" if len(hits) == 1 else "matches"
            self.results_label.setText(f"{len(hits)} {noun} for “{html.escape(text)}”")
        for hit in hits:
            where = (
                "title"
                if hit.message_id is None
                else ("you" if hit.role == "user" else hit.role)
            )
            label = QLabel(
                f"<b>{html.escape(hit.conversation_title or UNTITLED)}</b>"
                f" <span style='color: {muted_colour()}'>({where})</span><br/>{snippet_html(hit.snippet)}"
            )
            label.setWordWrap(True)
            label.setContentsMargins(4, 4, 4, 4)
            label.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
            item = QListWidgetItem()
            item.setData(ID_ROLE, hit.conversation_id)
            item.setData(MESSAGE_ROLE, hit.message_id)
            item.setToolTip(plain_tooltip(hit.snippet))
            self.results.addItem(item)
            self.results.setItemWidget(item, label)
        self._fit_results()
        self.stack.setCurrentIndex(1)

    def _fit_results(self) -> None:
        """Size each result to its text at the list's width (again on every resize).

        Sized once, a result kept the height of the width it was made at, and its
        last lines were cut off without a sign when the list got narrower.
        """
        width = max(self.results.viewport().width() - 8, 160)
        for row in range(self.results.count()):
            item = self.results.item(row)
            label = self.results.itemWidget(item)
            if label is not None:
                item.setSizeHint(QSize(width, label.heightForWidth(width) + 4))

    def clear_search(self) -> None:
        """Empty the search box and show the conversations again."""
        self.search_edit.clear()

    def _on_search_edit_text_changed(self, text: str) -> None:
        if not text.strip():
            self._search_timer.stop()
            self.stack.setCurrentIndex(0)
            return
        self._search_timer.start()

    def _on_search_timer_timeout(self) -> None:
        text = self.search_edit.text().strip()
        if text:
            self.search_changed.emit(text)

    def _on_results_item_clicked(self, item: QListWidgetItem) -> None:
        self.search_hit_activated.emit(item.data(ID_ROLE), item.data(MESSAGE_ROLE))
