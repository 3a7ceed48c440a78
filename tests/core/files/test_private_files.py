"""The home and what Swapless keeps in it are readable only by the user.

Another account on the same machine must not read the messages (database, WAL) or the
prompts' token ids (prefix cache); a home left open by an older version is tightened
the first time it is used, with one note.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.files import paths, private_files
from app.core.presets.presets import get_preset, save_user_preset
from app.core.settings import AppSettings, save_settings
from app.core.store import Store

ROOT = Path(__file__).resolve().parents[3]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def fresh_home(tmp_path, monkeypatch):
    home = tmp_path / "not-yet" / "home"
    monkeypatch.setenv(paths.HOME_ENV, str(home))
    return home


@pytest.fixture
def open_umask():
    """The most permissive umask: private modes must not depend on it."""
    previous = os.umask(0)
    yield
    os.umask(previous)


def test_a_new_home_and_everything_in_it_is_private(fresh_home, open_umask):
    with Store.open() as store:
        store.add_message(store.create_conversation("secret"), "user", "my secret")
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        files = ["swapless.db", "swapless.db-wal", "swapless.db-shm"]
        assert {name: mode(fresh_home / name) for name in files} == dict.fromkeys(
            files, 0o600
        )
    save_settings(AppSettings(theme="dark"))
    save_user_preset(get_preset("chat").with_changes(name="mine"))
    assert mode(fresh_home) == 0o700
    for folder in ("presets", "prefix-cache", "logs", "models"):
        assert mode(getattr(paths, _dir_function(folder))()) == 0o700, folder
    assert mode(paths.settings_path()) == 0o600
    assert mode(paths.presets_dir() / "mine.toml") == 0o600
    # The parents the home was created in are not Swapless's to lock down.
    assert mode(fresh_home.parent) == 0o777


def _dir_function(folder: str) -> str:
    return {
        "presets": "presets_dir",
        "prefix-cache": "prefix_cache_dir",
        "logs": "logs_dir",
        "models": "models_dir",
    }[folder]


def _loose_home(home: Path) -> list[Path]:
    """A home as version 0.1 left it: 0755 folders, 0644 files."""
    (home / "prefix-cache").mkdir(parents=True)
    (home / "logs").mkdir()
    (home / "models" / "demo").mkdir(parents=True)
    files = [
        home / "swapless.db",
        home / "swapless.db-wal",
        home / "settings.toml",
        home / "prefix-cache" / "abc.safetensors",
        home / "logs" / "swapless.log",
    ]
    for path in files:
        path.write_bytes(b"")
        path.chmod(0o644)
    for folder in (home, home / "prefix-cache", home / "logs", home / "models"):
        folder.chmod(0o755)
    return files


def test_an_existing_loose_home_is_tightened_once_with_a_note(
    tmp_path, monkeypatch, caplog
):
    home = tmp_path / "old-home"
    files = _loose_home(home)
    weights = home / "models" / "demo" / "model.safetensors"
    weights.write_bytes(b"")
    weights.chmod(0o644)
    monkeypatch.setenv(paths.HOME_ENV, str(home))
    with caplog.at_level(logging.WARNING, logger="app.core.files.private_files"):
        assert paths.app_home() == home
    notes = [r.getMessage() for r in caplog.records]
    assert (
        len(notes) == 1 and str(home) in notes[0] and "readable only by you" in notes[0]
    )
    assert mode(home) == 0o700
    assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
    for folder in ("prefix-cache", "logs", "models"):
        assert mode(home / folder) == 0o700
    # The models folder is closed, but weights inside it are not walked.
    assert mode(weights) == 0o644
    caplog.clear()
    paths.app_home()
    assert private_files.tighten_home(home) == 0 and caplog.records == []


def test_a_shared_sticky_folder_is_never_locked(tmp_path):
    shared = tmp_path / "scratch"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp: everyone's
    assert private_files.make_private(shared) is False
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777


def test_a_database_file_opened_directly_is_tightened(tmp_path, caplog):
    path = tmp_path / "loose.db"
    Store.open(path).close()
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING):
        Store.open(path).close()
    assert mode(path) == 0o600
    assert any(str(path) in r.getMessage() for r in caplog.records)


def test_the_cli_says_once_that_it_tightened_the_home(tmp_path):
    home = tmp_path / "cli-home"
    _loose_home(home)
    (home / "swapless.db").unlink()
    (home / "swapless.db-wal").unlink()
    env = {"SWAPLESS_HOME": str(home), "PATH": "/usr/bin:/bin"}

    def run():
        return subprocess.run(
            [sys.executable, "-m", "app", "conversations"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    first, second = run(), run()
    assert first.returncode == 0 and second.returncode == 0, first.stderr
    note = [
        line for line in first.stderr.splitlines() if "readable only by you" in line
    ]
    assert len(note) == 1 and str(home) in note[0]
    assert "readable only by you" not in second.stderr
    assert mode(home) == 0o700 and mode(home / "swapless.db") == 0o600


def test_every_folder_made_on_the_way_is_private(fresh_home, open_umask):
    """``make-model HOME/models/NAME`` made models/ with the umask's mode (0777 here)."""
    from app.core.modelkit.model_builder import build_model

    home = paths.app_home()
    build_model(home / "models" / "mine", shape="tiny", bits=16, seed=0)
    assert mode(home / "models") == 0o700
    assert mode(home / "models" / "mine") == 0o700
    deep = private_files.make_private_dir(home / "a" / "b" / "c")
    assert [mode(p) for p in (home / "a", home / "a" / "b", deep)] == [0o700] * 3


def test_a_home_others_can_write_is_refused_in_one_line(tmp_path):
    home = tmp_path / "open-home"
    home.mkdir()
    home.chmod(0o777)
    env = {**os.environ, paths.HOME_ENV: str(home)}
    result = subprocess.run(
        [sys.executable, "-m", "app", "conversations"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"chmod 700 {home}" in lines[0], result.stderr
    assert mode(home) == 0o777  # refused, not silently changed
    assert list(home.iterdir()) == []


@pytest.mark.skipif(
    os.geteuid() != 0, reason="making a folder another user's needs root"
)
def test_a_home_of_another_user_is_refused(tmp_path, monkeypatch):
    home = tmp_path / "their-home"
    home.mkdir(mode=0o700)
    os.chown(home, 4242, 4242)
    monkeypatch.setenv(paths.HOME_ENV, str(home))
    with pytest.raises(paths.UnsafeHomeError, match="belongs to another user"):
        paths.app_home()
    with pytest.raises(paths.UnsafeHomeError):
        Store.open()
