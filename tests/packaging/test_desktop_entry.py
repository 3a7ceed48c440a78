"""The Linux desktop entry and its installation into a user's application menu."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def _keys(text: str) -> dict[str, str]:
    lines = text.splitlines()
    assert lines[0] == "[Desktop Entry]"
    return dict(line.split("=", 1) for line in lines[1:] if line)


def _bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "dist" / "swapless"
    bundle.mkdir(parents=True)
    executable = bundle / "swapless"
    executable.write_text("#!/bin/sh\n")
    executable.chmod(0o755)
    for size in ("16x16", "256x256"):
        icon = bundle / "icons" / "hicolor" / size / "apps" / "swapless.png"
        icon.parent.mkdir(parents=True)
        icon.write_bytes(b"\x89PNG")
    svg = bundle / "icons" / "hicolor" / "scalable" / "apps" / "swapless.svg"
    svg.parent.mkdir(parents=True)
    svg.write_text("<svg/>")
    return bundle


def test_entry_has_the_keys_a_menu_needs(desktop):
    keys = _keys(
        desktop.desktop_entry(Path("/opt/swapless/swapless"), "swapless", "0.1.0")
    )
    assert keys["Type"] == "Application"
    assert keys["Name"] == "Swapless"
    assert keys["Exec"] == "/opt/swapless/swapless"
    assert keys["TryExec"] == "/opt/swapless/swapless"
    assert keys["Icon"] == "swapless"
    assert keys["Terminal"] == "false"
    assert keys["Categories"] == "Utility;Development;"
    assert keys["StartupWMClass"] == "Swapless"
    assert keys["X-Swapless-Version"] == "0.1.0"


def test_entry_refuses_a_relative_executable(desktop):
    with pytest.raises(ValueError, match="absolute"):
        desktop.desktop_entry(Path("dist/swapless/swapless"), "swapless")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/opt/swapless/swapless", "/opt/swapless/swapless"),
        ("/home/a b/swapless", '"/home/a b/swapless"'),
        ('/home/x"y/swapless', '"/home/x\\\\"y/swapless"'),
        ("/home/$HOME/swapless", '"/home/\\\\$HOME/swapless"'),
        ("/home/100%/swapless", "/home/100%%/swapless"),
    ],
)
def test_exec_quoting_follows_the_spec(desktop, path, expected):
    assert desktop.quote_exec_argument(path) == expected


def test_install_puts_the_app_in_the_menu_and_uninstall_removes_it(desktop, tmp_path):
    bundle = _bundle(tmp_path)
    home = tmp_path / "share"
    written = desktop.install(bundle, home, "0.1.0")
    entry = home / "applications" / "swapless.desktop"
    assert entry in written
    keys = _keys(entry.read_text())
    assert keys["Exec"] == str(bundle / "swapless")
    assert keys["Icon"] == "swapless"
    for relative in ("16x16/apps/swapless.png", "scalable/apps/swapless.svg"):
        assert (home / "icons" / "hicolor" / relative).is_file()

    removed = desktop.uninstall(home)
    assert entry in removed
    assert not entry.exists()
    assert not (home / "icons" / "hicolor" / "16x16" / "apps" / "swapless.png").exists()


def test_install_needs_a_built_bundle(desktop, tmp_path):
    with pytest.raises(FileNotFoundError, match="make package"):
        desktop.install(tmp_path / "missing", tmp_path / "share")


def test_bundle_entry_uses_absolute_icon_path(desktop, tmp_path):
    bundle = _bundle(tmp_path)
    entry = desktop.write_bundle_entry(bundle, bundle / "swapless.desktop", "0.1.0")
    icon = Path(_keys(entry.read_text())["Icon"])
    assert icon.is_absolute() and icon.is_file()


@pytest.mark.skipif(
    shutil.which("desktop-file-validate") is None,
    reason="desktop-file-validate (Debian desktop-file-utils) is not installed",
)
def test_entry_passes_desktop_file_validate(desktop, tmp_path):
    bundle = _bundle(tmp_path / "with space")
    entry = desktop.write_bundle_entry(bundle, tmp_path / "swapless.desktop", "0.1.0")
    result = subprocess.run(
        ["desktop-file-validate", str(entry)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # Hints are allowed: Utility and Development are both main categories, on purpose.
    assert " error: " not in result.stdout and " warning: " not in result.stdout
