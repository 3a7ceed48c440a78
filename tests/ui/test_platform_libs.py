"""Qt's xcb plugin: the missing system libraries are found before Qt aborts, and named."""

from __future__ import annotations

import sys

import pytest

from app.cli import main as cli_main
from app.ui import platform_libs


def test_the_advice_names_each_library_and_both_distributions_packages():
    line = platform_libs.install_advice(["libxcb-icccm.so.4", "libxcb-keysyms.so.1"])
    assert "\n" not in line
    assert "libxcb-icccm.so.4, libxcb-keysyms.so.1" in line
    assert "sudo apt install libxcb-icccm4 libxcb-keysyms1` (Debian/Ubuntu)" in line
    assert "sudo dnf install xcb-util-wm xcb-util-keysyms` (Fedora)" in line


def test_an_unlisted_library_gets_debians_usual_name_and_a_way_to_find_fedoras():
    line = platform_libs.install_advice(["libxcb-frobnicate.so.2", "libfoo-x11.so.0"])
    assert "sudo apt install libxcb-frobnicate2 libfoo-x11-0`" in line
    assert "dnf provides" in line and "libxcb-frobnicate.so.2" in line


def test_one_package_serving_several_libraries_is_named_once():
    line = platform_libs.install_advice(["libxcb-shm.so.0", "libxcb-sync.so.1"])
    assert "sudo dnf install libxcb` (Fedora)" in line


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"DISPLAY": ":0"}, True),
        ({}, False),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, False),
        ({"QT_QPA_PLATFORM": "wayland;xcb"}, True),
        (
            {"DISPLAY": ":0", "WAYLAND_DISPLAY": "w", "XDG_SESSION_TYPE": "wayland"},
            False,
        ),
    ],
)
def test_the_check_applies_only_where_qt_would_pick_xcb(env, expected):
    if sys.platform in ("darwin", "win32"):
        expected = False
    assert platform_libs.uses_xcb(env) is expected


def test_without_ldd_each_library_is_loaded_to_find_the_missing_ones(monkeypatch):
    monkeypatch.setattr(platform_libs.shutil, "which", lambda name: None)
    monkeypatch.setattr(
        platform_libs,
        "PACKAGES",
        {"libc.so.6": ("libc6", "glibc"), "libswapless-absent.so.9": ("x", "y")},
    )
    assert platform_libs.missing_libraries() == ["libswapless-absent.so.9"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="xcb is Linux's")
def test_on_this_machine_the_real_plugin_finds_all_its_libraries():
    plugin = platform_libs.xcb_plugin()
    assert plugin is not None and plugin.name == "libqxcb.so"
    # The test machine installs the packages the README names (.ci/run does the same).
    assert platform_libs.missing_libraries(plugin) == []
    assert platform_libs.window_blocker({"DISPLAY": ":0"}) is None


def test_missing_libraries_start_the_terminal_chat_with_the_advice(monkeypatch, capsys):
    advice = platform_libs.install_advice(["libxcb-icccm.so.4"])
    monkeypatch.setattr(cli_main, "_has_display", lambda: True)
    monkeypatch.setattr(platform_libs, "window_blocker", lambda environ=None: advice)
    started: list[list[str]] = []
    monkeypatch.setattr(cli_main, "main", lambda argv=None: started.append(argv) or 0)
    assert cli_main._run_desktop_or_chat(["--model", "/m"], "/m") == 0
    assert started == [["chat", "--model", "/m"]]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "libxcb-icccm4" in err and "terminal chat" in err


def test_the_readme_gives_linux_users_the_same_package_line():
    readme = platform_libs.Path(__file__).resolve().parents[2] / "README.md"
    start_here = readme.read_text(encoding="utf-8").split("## Start here", 1)[1]
    assert platform_libs.APT_LINE in start_here.split("\n## ", 1)[0]
