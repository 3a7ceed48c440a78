"""Settings › Tool servers: list, add, change, remove, enable, trust — written on OK."""

from __future__ import annotations

import stat
import sys

from PySide6.QtCore import Qt

from app.core.mcp.config import ServerConfig, config_path, load_config, save_config
from app.core.mcp.tool_prefs import ToolPrefs, load_prefs, prefs_path, save_prefs
from app.ui.settings.mcp_servers_dialog import McpServersDialog


def _dialog(qtbot, conversation_id=None) -> McpServersDialog:
    dialog = McpServersDialog(conversation_id)
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def test_no_server_is_configured_at_first(qtbot):
    dialog = _dialog(qtbot)
    assert dialog.list.count() == 0 and dialog.checked_servers() == ()


def test_the_full_command_is_shown_and_secrets_are_not(qtbot):
    server = ServerConfig(
        "files", command=sys.executable, args=("-m", "srv", "a b"), env={"KEY": "s3"}
    )
    save_config({"files": server})
    dialog = _dialog(qtbot)
    dialog.list.setCurrentRow(0)
    shown = dialog.shown_command.text()
    assert shown.startswith(sys.executable) and '"a b"' in shown and "KEY" in shown
    assert "s3" not in shown and "s3" not in dialog.runs.text()


def test_a_server_is_added_enabled_trusted_and_saved_privately(qtbot):
    dialog = _dialog(qtbot, conversation_id=7)
    dialog.name.setText("tools")
    dialog.runs.setText(f"{sys.executable} server.py stdio")
    assert dialog.shown_command.text() == f"{sys.executable} server.py stdio"
    dialog.save_server.click()
    assert dialog.list.count() == 1
    dialog.list.item(0).setCheckState(Qt.CheckState.Checked)
    dialog.trusted.setText("tools/secret_word")
    dialog.max_calls.setValue(4)
    with qtbot.waitSignal(dialog.saved):
        dialog.buttons.button(dialog.buttons.StandardButton.Ok).click()
    assert load_config()["tools"].args == ("server.py", "stdio")
    prefs = load_prefs()
    assert prefs.enabled_for(7) == ("tools",) and prefs.enabled_for(8) == ()
    assert prefs.trusted == {"tools/secret_word"} and prefs.max_calls == 4
    for path in (config_path(), prefs_path()):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_editing_keeps_the_environment_and_removing_drops_the_check(qtbot):
    save_config(
        {
            "a": ServerConfig("a", command="old", env={"TOKEN": "x"}),
            "b": ServerConfig("b", url="https://example.com/mcp"),
        }
    )
    save_prefs(ToolPrefs(new_chats=("a", "b")))
    dialog = _dialog(qtbot)
    assert dialog.checked_servers() == ("a", "b")
    dialog.list.setCurrentRow(0)
    dialog.runs.setText("new --flag")
    dialog.save_server.click()
    dialog.list.setCurrentRow(1)
    dialog.remove_server.click()
    dialog.buttons.button(dialog.buttons.StandardButton.Ok).click()
    servers = load_config()
    assert list(servers) == ["a"] and servers["a"].command == "new"
    assert dict(servers["a"].env) == {"TOKEN": "x"}
    assert load_prefs().new_chats == ("a",)


def test_a_refused_value_is_said_and_nothing_is_written(qtbot):
    dialog = _dialog(qtbot)
    dialog.name.setText("web")
    dialog.runs.setText("http://example.com/mcp")
    assert "https" in dialog.error_label.text() and dialog.shown_command.text() == ""
    dialog.save_server.click()
    assert dialog.list.count() == 0
    assert not config_path().exists()
