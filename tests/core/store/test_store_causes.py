"""Store errors name the real cause: not "a disk error" for a folder, not "a crash".

A database path that is a folder or a link to ``/dev/null`` is named as such; a disk
that is full when the store opens says so; and replies a process could not finish
because the disk was full are not blamed on "an earlier crash" at the next start.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.core.errors import StoreError
from app.core.store import Store

ROOT = Path(__file__).resolve().parents[3]


def test_a_database_path_that_is_a_folder_says_so(tmp_path):
    path = tmp_path / "swapless.db"
    path.mkdir()
    with pytest.raises(StoreError) as raised:
        Store.open(path)
    message = str(raised.value)
    assert f"{path} is a folder, not a database file" in message
    assert "disk" not in message
    assert path.is_dir() and not any(path.iterdir())  # left as it was


def test_a_database_path_linked_to_dev_null_says_so(tmp_path):
    path = tmp_path / "swapless.db"
    path.symlink_to("/dev/null")
    with pytest.raises(StoreError) as raised:
        Store.open(path)
    message = str(raised.value)
    assert "a link to /dev/null" in message and "a character device" in message
    assert "disk" not in message
    assert os.readlink(path) == "/dev/null"


def test_a_dangling_link_names_its_target(tmp_path):
    path = tmp_path / "swapless.db"
    path.symlink_to(tmp_path / "moved-away.db")
    with pytest.raises(StoreError, match="symbolic link to .*moved-away.db"):
        Store.open(path)


def test_a_home_that_is_a_file_says_so(tmp_path, monkeypatch):
    home = tmp_path / "home-file"
    home.write_text("not a folder")
    monkeypatch.setenv("SWAPLESS_HOME", str(home))
    with pytest.raises(StoreError, match="is a file, but Swapless keeps its data"):
        Store.open()


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs mounted for this test (root only)."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError:
            pass
    return filler


def _swapless(args, home):
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        cwd=ROOT,
        env=dict(os.environ, SWAPLESS_HOME=str(home)),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_full_disk_at_open_says_the_disk_is_full(small_disk):
    _fill(small_disk)
    result = _swapless(["conversations"], small_disk / "home")
    assert result.returncode == 2
    assert "The disk is full" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


_WRITER_ON_A_FULL_DISK = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from app.core.errors import StoreError
    from app.core.store import Store
    disk = Path(sys.argv[1])
    store = Store.open(disk / "home" / "swapless.db")
    conversation_id = store.create_conversation("on a small disk")
    reply_id = store.begin_reply(conversation_id)
    store.update_reply_text(reply_id, "The first words")
    with open(disk / "filler", "wb") as handle:  # another program fills the disk
        try:
            while True:
                handle.write(b"\\0" * 65536)
                handle.flush()
        except OSError:
            pass
    try:
        store.finish_reply(reply_id, "The first words and many more. " * 20000)
    except StoreError as exc:
        print(exc, file=sys.stderr)
        sys.exit(2)
    """
)


def test_after_a_disk_full_failure_the_next_start_blames_no_crash(small_disk):
    (small_disk / "home").mkdir(mode=0o700)
    failed = subprocess.run(
        [sys.executable, "-c", _WRITER_ON_A_FULL_DISK, str(small_disk)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert failed.returncode == 2, failed.stderr
    assert "The disk is full" in failed.stderr
    (small_disk / "filler").unlink()  # the user frees some space
    result = _swapless(["conversations"], small_disk / "home")
    assert result.returncode == 0, result.stderr
    assert "marked interrupted" in result.stderr
    assert "crash" not in result.stderr
    assert "could not save" in result.stderr
    with Store.open(small_disk / "home" / "swapless.db") as store:
        (conversation,) = store.list_conversations()
        reply = store.messages(conversation.id)[-1]
    assert (reply.state, reply.content) == ("interrupted", "The first words")
    shutil.rmtree(small_disk / "home")
