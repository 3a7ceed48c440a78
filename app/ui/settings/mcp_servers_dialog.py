"""Settings › Tool servers (MCP): the servers, what each runs, which chats use them.

The list is the `mcpServers` file (the shape LM Studio and Claude Desktop use); each
server's full command or URL is shown as it will run, before anything is started.
A server is added or changed from its name and its command line (or URL); its
environment and headers stay in the file, never shown. The checks say which servers
the open conversation (or new chats) may use; trusted tools run without asking; the
cap bounds the calls in one turn. Nothing is written until OK, and a value the core
refuses is said in words with OK disabled.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.errors import ToolServerError
from app.core.mcp.config import ServerConfig, load_config, save_config
from app.core.mcp.tool_prefs import (
    MAX_CALLS_RANGE,
    ToolPrefs,
    load_prefs,
    save_prefs,
    server_from_fields,
)
from app.ui.common.theme import error_colour


class McpServersDialog(QDialog):
    """Edit the tool servers and the tool preferences.

    Args:
        conversation_id: The open conversation (its servers are checked), or None:
            the checks are the servers of new chats.
        parent: The window.
    """

    saved = Signal()

    def __init__(self, conversation_id: int | None, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Tool servers (MCP)")
        self.conversation_id = conversation_id
        self.error_label = QLabel(self)
        self.error_label.setObjectName("settingsError")
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        try:
            self.servers: dict[str, ServerConfig] = load_config()
            self.prefs: ToolPrefs = load_prefs()
        except ToolServerError as exc:
            self.servers, self.prefs = {}, ToolPrefs()
            self._show_error(f"{exc} (saving replaces it)")
        layout = QVBoxLayout(self)
        scope = "this conversation" if conversation_id is not None else "new chats"
        layout.addWidget(
            QLabel(f"Checked servers are offered to the model in {scope}.")
        )
        self.list = QListWidget(self)
        self.list.currentItemChanged.connect(self._on_list_current_item_changed)
        layout.addWidget(self.list)
        form = QFormLayout()
        self.name = QLineEdit(self)
        self.name.setPlaceholderText("files")
        form.addRow("Name", self.name)
        self.runs = QLineEdit(self)
        self.runs.setPlaceholderText("npx -y some-mcp-server   or   https://…/mcp")
        self.runs.textChanged.connect(self._on_fields_changed)
        self.name.textChanged.connect(self._on_fields_changed)
        form.addRow("Command or URL", self.runs)
        self.disabled = QCheckBox("Switched off", self)
        form.addRow("", self.disabled)
        self.shown_command = QLabel(self)
        self.shown_command.setWordWrap(True)
        self.shown_command.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )
        form.addRow("Runs", self.shown_command)
        layout.addLayout(form)
        row = QHBoxLayout()
        self.save_server = QPushButton("Add or update server", self)
        self.save_server.clicked.connect(self._on_save_server_clicked)
        self.remove_server = QPushButton("Remove server", self)
        self.remove_server.clicked.connect(self._on_remove_server_clicked)
        row.addWidget(self.save_server)
        row.addWidget(self.remove_server)
        row.addStretch(1)
        layout.addLayout(row)
        more = QFormLayout()
        self.trusted = QLineEdit(", ".join(sorted(self.prefs.trusted)), self)
        self.trusted.setPlaceholderText("server/tool, … (run without asking)")
        more.addRow("Trusted tools", self.trusted)
        self.max_calls = QSpinBox(self)
        self.max_calls.setRange(*MAX_CALLS_RANGE)
        self.max_calls.setValue(self.prefs.max_calls)
        more.addRow("Tool calls per turn", self.max_calls)
        layout.addLayout(more)
        layout.addWidget(self.error_label)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons.accepted.connect(self._on_buttons_accepted)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self._fill(self.prefs.enabled_for(conversation_id))

    # -- the list ----------------------------------------------------------------------

    def _fill(self, checked: tuple[str, ...]) -> None:
        self.list.clear()
        for name, server in sorted(self.servers.items()):
            off = " (switched off)" if server.disabled else ""
            item = QListWidgetItem(f"{name} [{server.transport}]{off}")
            item.setData(Qt.ItemDataRole.UserRole, name)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(
                Qt.CheckState.Checked if name in checked else Qt.CheckState.Unchecked
            )
            self.list.addItem(item)

    def checked_servers(self) -> tuple[str, ...]:
        """The servers checked for this conversation (or new chats)."""
        names = []
        for row in range(self.list.count()):
            item = self.list.item(row)
            if item.checkState() == Qt.CheckState.Checked:
                names.append(item.data(Qt.ItemDataRole.UserRole))
        return tuple(names)

    def _on_list_current_item_changed(self, item, _previous) -> None:
        if item is None:
            return
        server = self.servers[item.data(Qt.ItemDataRole.UserRole)]
        self.name.setText(server.name)
        self.runs.setText(server.url or server.describe().split(" (environment:")[0])
        self.disabled.setChecked(server.disabled)
        self.shown_command.setText(server.describe())

    # -- editing -----------------------------------------------------------------------

    def _edited(self) -> ServerConfig:
        return server_from_fields(
            self.name.text(),
            self.runs.text(),
            self.disabled.isChecked(),
            keep=self.servers.get(self.name.text().strip()),
        )

    def _on_fields_changed(self, *_args) -> None:
        try:
            self.shown_command.setText(self._edited().describe())
            self.error_label.hide()
        except ToolServerError as exc:
            self.shown_command.setText("")
            self._show_error(str(exc))

    def _on_save_server_clicked(self) -> None:
        try:
            server = self._edited()
        except ToolServerError as exc:
            self._show_error(str(exc))
            return
        checked = self.checked_servers()
        self.servers[server.name] = server
        self._fill(checked)

    def _on_remove_server_clicked(self) -> None:
        item = self.list.currentItem()
        if item is None:
            return
        checked = self.checked_servers()
        self.servers.pop(item.data(Qt.ItemDataRole.UserRole), None)
        self._fill(tuple(n for n in checked if n in self.servers))

    def _show_error(self, text: str) -> None:
        self.error_label.setText(text)
        self.error_label.setStyleSheet(f"color: {error_colour()};")
        self.error_label.show()

    # -- saving ------------------------------------------------------------------------

    def result_prefs(self) -> ToolPrefs:
        """The tool preferences as edited."""
        trusted = frozenset(
            t.strip() for t in self.trusted.text().split(",") if t.strip()
        )
        prefs = ToolPrefs(
            trusted=trusted,
            max_calls=self.max_calls.value(),
            conversations=dict(self.prefs.conversations),
            new_chats=self.prefs.new_chats,
        )
        checked = self.checked_servers()
        if self.conversation_id is None:
            return ToolPrefs(
                trusted, prefs.max_calls, prefs.conversations, new_chats=checked
            )
        return prefs.with_enabled(self.conversation_id, checked)

    def _on_buttons_accepted(self) -> None:
        try:
            save_config(self.servers)
            save_prefs(self.result_prefs())
        except (ToolServerError, OSError) as exc:
            self._show_error(f"Not saved: {exc}")
            return
        self.saved.emit()
        self.accept()
