"""The notice area: one calm line that never moves the chat, plain words, the right order."""

from __future__ import annotations

from dataclasses import replace

import pytest
from PySide6.QtCore import Qt

from app.core.memory.pressure import PsiReading, pressure_signals, worst_level
from app.core.memory.snapshot import PressureLevel
from app.ui.status.notices_controller import Notice

JARGON = ("PSI", "avg10", "did not line up", "safe limit of", "[warning]")


def _pressured(snapshot, *, available_fraction: float, psi_some: float):
    signals = pressure_signals(
        available_fraction=available_fraction, psi=PsiReading(psi_some, 0.0)
    )
    return replace(
        snapshot,
        available_bytes=int(snapshot.total_bytes * available_fraction),
        pressure=worst_level(signals),
        pressure_source="test",
        pressure_signals=tuple(signals),
    )


@pytest.fixture
def snapshot(qtbot, window):
    qtbot.waitUntil(lambda: window.memory_gauge.snapshot is not None, timeout=3000)
    return window.memory_gauge.snapshot


@pytest.mark.parametrize(
    ("fraction", "psi", "level", "says"),
    [
        (0.94, 30.0, "warning", "Programs had to wait for memory 30% of the time"),
        (0.07, 0.0, "warning", "Memory is running low"),
        (0.03, 0.0, "critical", "will not start reading a new prompt"),
    ],
)
def test_memory_pressure_is_said_in_plain_words(
    qtbot, window, snapshot, fraction, psi, level, says
):
    tight = _pressured(snapshot, available_fraction=fraction, psi_some=psi)
    assert tight.pressure is PressureLevel(level)
    window.notices.show_pressure(tight)
    notice = window.notices.notice("pressure")
    assert notice is not None and says in notice.text
    assert notice.timeout_ms is None  # it matters: it stays while the pressure lasts
    assert window.notice_area.key == "pressure"
    assert not any(word in notice.text for word in JARGON)
    if fraction > 0.5:
        assert "tight" not in notice.text and "low" not in notice.text
    window.notices.show_pressure(replace(tight, pressure=PressureLevel.NORMAL))
    assert window.notices.notice("pressure") is None
    assert window.notice_area.key in (None, "demo")


def test_notices_never_move_the_chat(qtbot, window, snapshot, send):
    send(window, "Something to look at")
    qtbot.wait(50)
    chat = window.main_stack.geometry()
    area_height = window.notice_area.height()
    copy_button = window.chat_view.message_views()[0].copy_button
    button_place = copy_button.mapTo(window, copy_button.rect().center())
    for i in range(4):
        window.notices.show(Notice(f"n{i}", "info", f"Notice number {i} " * 20))
    window.notices.show_pressure(
        _pressured(snapshot, available_fraction=0.03, psi_some=0.0)
    )
    qtbot.wait(50)
    assert window.main_stack.geometry() == chat
    assert window.notice_area.height() == area_height
    assert copy_button.mapTo(window, copy_button.rect().center()) == button_place
    for key in list(window.notices.keys):
        window.notices.dismiss(key)
    qtbot.wait(50)
    assert window.main_stack.geometry() == chat
    assert window.notice_area.text == ""


def test_the_most_severe_notice_shows_first_and_others_wait(qtbot, window):
    notices, area = window.notices, window.notice_area
    notices.dismiss("demo")
    notices.show(Notice("a", "info", "An info"))
    notices.show(Notice("b", "error", "An error"))
    notices.show(Notice("c", "info", "A newer info"))
    assert notices.keys == ["b", "c", "a"]
    # A newer info does not hide the error: the most severe stays in view.
    assert area.key == "b" and area.text == "An error"
    assert area.position_label.text() == "1/3" and area.next_button.isVisibleTo(window)
    qtbot.mouseClick(area.next_button, Qt.MouseButton.LeftButton)
    assert area.key == "c" and area.text == "A newer info"
    qtbot.mouseClick(area.close_button, Qt.MouseButton.LeftButton)
    assert notices.keys == ["b", "a"] and area.key == "b"


def test_an_informative_notice_ends_by_itself(qtbot, window):
    window.notices.show(Notice("brief", "info", "Soon gone", timeout_ms=50))
    assert window.notices.notice("brief") is not None
    qtbot.waitUntil(lambda: window.notices.notice("brief") is None, timeout=2000)


def test_an_action_runs_and_dismisses_its_notice(qtbot, window):
    ran = []
    window.notices.show(
        Notice("act", "warning", "Do it", ("Go", lambda: ran.append(1)))
    )
    assert window.notice_area.action_button.text() == "Go"
    qtbot.mouseClick(window.notice_area.action_button, Qt.MouseButton.LeftButton)
    assert ran == [1] and window.notices.notice("act") is None


def test_notice_text_from_data_stays_plain(qtbot, window):
    hostile = "<h1>Big</h1><img src='file:///etc/passwd'>"
    window.notices.show(Notice("x", "error", hostile))
    assert window.notice_area.text == hostile
    shown = window.notice_area.text_label.text()
    assert "<h1>" not in shown and "&lt;h1&gt;" in shown


def test_unused_user_presets_are_said_in_the_window(qtbot, window, swapless_home):
    """#31 'also seen': a user preset that cannot be read, or one named like a
    built-in (the built-in is kept), was only logged; the window says it too."""
    import tomli_w

    from app.core.presets.presets import get_preset, skipped_user_presets

    presets = swapless_home / "presets"
    presets.mkdir(exist_ok=True)
    (presets / "broken.toml").write_bytes(b'system_prompt = "form\x0cfeed"\n')
    table = get_preset("chat").with_changes(description="mine").to_dict()
    del table["name"]
    (presets / "chat.toml").write_text(
        tomli_w.dumps({k: v for k, v in table.items() if v is not None})
    )
    window.notices.show_preset_problems(skipped_user_presets())
    said = window.notice_area.text
    assert "broken.toml" in said and "chat.toml" in said
    assert "name of a built-in preset" in said
    (presets / "broken.toml").unlink()
    (presets / "chat.toml").unlink()
    window.notices.show_preset_problems(skipped_user_presets())
    assert "presets" not in window.notice_area.text
