"""`swapless pin ID`: pins a message, refuses in one line what cannot be pinned."""

from __future__ import annotations

import os
import subprocess
import sys

from app.core.presets.presets import get_preset
from app.core.store import Store


def cli(args, home):
    env = dict(os.environ, SWAPLESS_HOME=str(home))
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _conversation(max_context):
    preset = get_preset("chat").with_changes(max_context=max_context)
    with Store.open() as store:
        conversation = store.create_conversation(
            model="m", preset="chat", settings=preset.to_dict()
        )
        short = store.add_message(conversation, "user", "My locker is 4417.")
        long = store.add_message(conversation, "assistant", "word " * 2000)
    return short, long


def test_pin_and_unpin_a_message(swapless_home):
    short, _ = _conversation(4096)
    done = cli(["pin", str(short)], swapless_home)
    assert done.returncode == 0, done.stderr
    assert "stays word for word" in done.stdout
    with Store.open() as store:
        assert store.get_message(short).pinned
    done = cli(["pin", "--off", str(short)], swapless_home)
    assert done.returncode == 0 and "no longer pinned" in done.stdout
    with Store.open() as store:
        assert not store.get_message(short).pinned


def test_a_pin_that_cannot_fit_is_refused_in_words(swapless_home):
    _, long = _conversation(1024)
    done = cli(["pin", str(long)], swapless_home)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert f"Message {long} cannot be pinned" in done.stderr
    assert "1,024-token limit" in done.stderr
    with Store.open() as store:
        assert not store.get_message(long).pinned


def test_a_missing_message_is_one_line(swapless_home):
    _conversation(1024)
    done = cli(["pin", "999"], swapless_home)
    assert done.returncode == 2
    assert done.stderr == "swapless: there is no message 999\n"
