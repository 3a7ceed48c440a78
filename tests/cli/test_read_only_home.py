"""A read-only home (a mounted backup) can be listed, searched and exported (#31)."""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from app.core.errors import StoreError
from app.core.store import Store

READ_ONLY_LINE = "is read-only: its conversations are opened for reading"


def _can_mount_read_only(tmp_path) -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind {tmp_path} {tmp_path}"],
        capture_output=True,
    )
    return probe.returncode == 0


def _run_on_read_only_home(home, args, tmp_path):
    """Run the CLI with ``home`` read-only: a read-only bind mount when this process
    may mount (root ignores file modes), else the modes of a backup copy."""
    command = [sys.executable, "-m", "app", *args]
    env = dict(os.environ, SWAPLESS_HOME=str(home))
    if _can_mount_read_only(tmp_path):
        script = (
            f"mount --bind {home} {home} && mount -o remount,bind,ro {home} && "
            + shlex.join(command)
        )
        command = ["unshare", "-m", "sh", "-c", script]
    elif os.geteuid() == 0:
        pytest.skip("root without mount namespaces: nothing here is read-only")
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture
def backup_home(tmp_path):
    home = tmp_path / "backup"
    home.mkdir(mode=0o700)
    with Store.open(home / "swapless.db") as store:
        conversation_id = store.create_conversation(title="Backup talk")
        store.add_message(conversation_id, "user", "hello from the backup")
    digest = hashlib.sha256((home / "swapless.db").read_bytes()).hexdigest()
    if os.geteuid() != 0:
        (home / "swapless.db").chmod(0o400)
        home.chmod(0o500)
    yield home, digest
    home.chmod(0o700)


def test_a_read_only_home_is_listed_searched_and_exported(backup_home, tmp_path):
    home, digest = backup_home
    before = sorted(p.name for p in home.iterdir())
    for args, expected in (
        (["conversations"], "Backup talk"),
        (["export", "1"], "hello from the backup"),
        (["export", "1", "--format", "json"], '"content": "hello from the backup"'),
        (["search", "backup"], "hello from the [backup]"),
    ):
        result = _run_on_read_only_home(home, args, tmp_path)
        assert result.returncode == 0, (args, result.stderr)
        assert expected in result.stdout
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and READ_ONLY_LINE in lines[0], result.stderr
    assert sorted(p.name for p in home.iterdir()) == before  # no sidecar, no log
    assert hashlib.sha256((home / "swapless.db").read_bytes()).hexdigest() == digest


def test_a_store_opened_read_only_reads_and_refuses_every_write(tmp_path):
    path = tmp_path / "swapless.db"
    with Store.open(path) as store:
        conversation_id = store.create_conversation(title="Kept")
        store.add_message(conversation_id, "user", "a message")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with Store.open_read_only(path) as store:
        assert store.read_only
        assert [c.title for c in store.list_conversations()] == ["Kept"]
        assert store.messages(conversation_id)[0].content == "a message"
        with pytest.raises(StoreError):
            store.add_message(conversation_id, "user", "not written")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    with pytest.raises(StoreError, match="no conversation database"):
        Store.open_read_only(tmp_path / "missing.db")
