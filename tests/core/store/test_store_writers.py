"""Several stores and processes on one file: recovery spares live writers, writes wait.

The window and terminal commands share one database. A store that opens must mark
``interrupted`` only what a writer that is gone left unfinished, and concurrent
writers must wait for each other (the busy timeout) instead of failing.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from app.core.files import process_identity
from app.core.store import Store, locking

ROOT = Path(__file__).resolve().parents[3]


def _add_writer(store: Store, **overrides) -> int:
    """Insert a writers row as another process would have; return its id."""
    me = process_identity.current()
    row = {
        "host": me.host,
        "pid": me.pid,
        "process_started_at": me.started_at,
        "store_token": os.urandom(8).hex(),
        "opened_at": "2025-06-01T12:00:00.000000Z",
        **overrides,
    }
    return store.db["writers"].insert(row).last_pk


def _reply_of_writer(store: Store, conversation_id: int, writer_id: int) -> int:
    reply_id = store.begin_reply(conversation_id)
    store.db.execute(
        "UPDATE messages SET writer_id = ? WHERE id = ?", [writer_id, reply_id]
    )
    store.db.conn.commit()
    return reply_id


def _exited_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_second_store_leaves_a_live_reply_alone(db_path, clock):
    with Store.open(db_path, clock=clock) as writer:
        conversation_id = writer.create_conversation()
        reply_id = writer.begin_reply(conversation_id)
        writer.update_reply_text(reply_id, "Once upon")
        with Store.open(db_path, clock=clock) as other:
            assert other.recovered_replies == 0
            assert other.get_message(reply_id).state == "generating"
        # The writer never noticed: it goes on and finishes its reply.
        writer.update_reply_text(reply_id, "Once upon a time")
        writer.finish_reply(reply_id, "Once upon a time.")
        assert writer.get_message(reply_id).state == "complete"
    with Store.open(db_path, clock=clock) as after:
        assert after.recovered_replies == 0
        assert after.db.execute("SELECT COUNT(*) FROM writers").fetchone()[0] == 0


def test_a_closed_store_s_unfinished_reply_is_recovered(db_path, clock):
    with Store.open(db_path, clock=clock) as writer:
        conversation_id = writer.create_conversation()
        reply_id = writer.begin_reply(conversation_id)
        writer.update_reply_text(reply_id, "partial")
    with Store.open(db_path, clock=clock) as store:
        assert store.recovered_replies == 1
        reply = store.get_message(reply_id)
        assert (reply.state, reply.content) == ("interrupted", "partial")
        assert store.db.execute("SELECT COUNT(*) FROM writers").fetchone()[0] == 0


def test_rows_of_dead_or_replaced_processes_are_recovered(store, conversation_id):
    dead = _add_writer(store, pid=_exited_pid())
    # Our own pid, but an earlier start: a process that died and whose id was reused.
    replaced = _add_writer(store, process_started_at=time.time() - 3600)
    live_elsewhere = _add_writer(store, host=socket.gethostname() + "-other-machine")
    parent = _add_writer(
        store,
        pid=os.getppid(),
        process_started_at=psutil.Process(os.getppid()).create_time(),
    )
    store.db.conn.commit()
    replies = {
        name: _reply_of_writer(store, conversation_id, writer)
        for name, writer in [
            ("dead", dead),
            ("replaced", replaced),
            ("elsewhere", live_elsewhere),
            ("parent", parent),
        ]
    }
    assert store.recover_interrupted() == 2
    states = {name: store.get_message(i).state for name, i in replies.items()}
    assert states == {
        "dead": "interrupted",
        "replaced": "interrupted",
        "elsewhere": "generating",  # another machine: its own next start decides
        "parent": "generating",  # the test runner's parent process is alive
    }
    remaining = {row[0] for row in store.db.execute("SELECT id FROM writers")}
    assert dead not in remaining and replaced not in remaining
    assert {live_elsewhere, parent} <= remaining


def test_documents_follow_their_writer_too(db_path, clock):
    with Store.open(db_path, clock=clock) as reader:
        conversation_id = reader.create_conversation()
        document_id = reader.add_document(
            conversation_id, "a.txt", 10, "a" * 64, 256, 3
        )
        reader.save_segment(document_id, 0, 200, "notes")
        with Store.open(db_path, clock=clock) as other:
            assert other.get_document(document_id).status == "reading"
        reader.save_segment(document_id, 1, 200, "more notes")
    with Store.open(db_path, clock=clock) as store:
        assert store.get_document(document_id).status == "interrupted"
        # Resuming makes it this store's reading; completing it releases the writer.
        store.set_document_status(document_id, "reading")
        store.save_segment(document_id, 2, 200, "last notes")
        assert store.get_document(document_id).status == "complete"
        row = store.db.execute(
            "SELECT writer_id FROM documents WHERE id = ?", [document_id]
        ).fetchone()
        assert row == (None,)


def test_opening_waits_for_another_writer_instead_of_failing(db_path, clock):
    """A store opened while another process is mid-write waits for it (busy timeout)."""
    Store.open(db_path, clock=clock).close()
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute(
        "INSERT INTO conversations (title, created_at, updated_at)"
        " VALUES ('held', ?, ?)",
        ["2025-06-01T12:00:00.000000Z"] * 2,
    )
    release = threading.Timer(0.5, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        with Store.open(db_path, clock=clock) as store:
            conversation_id = store.create_conversation("after the wait")
            assert {c.title for c in store.list_conversations()} == {
                "after the wait",
                "held",
            }
            assert store.get_conversation(conversation_id).title == "after the wait"
    finally:
        release.join()
        holder.close()


_HOLDER = textwrap.dedent(
    """
    import sys
    from app.core.store import Store
    store = Store.open(sys.argv[1])
    conversation_id = store.create_conversation("live")
    reply_id = store.begin_reply(conversation_id)
    store.update_reply_text(reply_id, "first words")
    print(reply_id, flush=True)
    sys.stdin.readline()  # the parent opens its own store meanwhile
    store.update_reply_text(reply_id, "first words and more")
    store.finish_reply(reply_id, "first words and more.")
    print("finished", flush=True)
    if sys.argv[2] == "hang":
        sys.stdin.readline()
    store.close()
    """
)


def _start_holder(db_path: Path, mode: str) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(db_path), mode],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline()
    assert line.strip().isdigit(), process.stderr.read()
    return process, int(line)


def test_a_live_writer_process_is_never_interrupted(db_path):
    db_path.parent.mkdir(parents=True)
    process, reply_id = _start_holder(db_path, "finish")
    with Store.open(db_path) as store:
        assert store.recovered_replies == 0
        assert store.get_message(reply_id).state == "generating"
    out, err = process.communicate("go\n", timeout=30)
    assert process.returncode == 0, err
    assert out.strip() == "finished"
    with Store.open(db_path) as store:
        assert store.get_message(reply_id).content == "first words and more."


def test_a_killed_writer_process_s_reply_is_recovered(db_path):
    db_path.parent.mkdir(parents=True)
    process, reply_id = _start_holder(db_path, "hang")
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    with Store.open(db_path) as store:
        assert store.recovered_replies == 1
        reply = store.get_message(reply_id)
        assert (reply.state, reply.content) == ("interrupted", "first words")


_WRITER = textwrap.dedent(
    """
    import sys, time
    from app.core.store import Store
    path, rounds, start = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    while time.time() < start:  # all writers begin at the same moment
        time.sleep(0.001)
    with Store.open(path) as store:
        conversation_id = store.create_conversation(f"writer {sys.argv[4]}")
        for i in range(rounds):
            store.add_message(conversation_id, "user", f"question {i}")
            reply_id = store.begin_reply(conversation_id)
            store.update_reply_text(reply_id, "partial")
            store.finish_reply(reply_id, f"answer {i}")
    """
)


@pytest.mark.parametrize("fresh_file", [True, False], ids=["new-file", "existing"])
def test_three_processes_writing_at_once_all_succeed(db_path, fresh_file):
    """3 processes x 300 writes: 75 rounds of a user message and a streamed reply.

    Each round reads before it writes (as `finish_reply` does), the pattern that failed
    with "database is locked" within 0.3 s when writes began deferred.
    """
    db_path.parent.mkdir(parents=True)
    if not fresh_file:
        Store.open(db_path).close()
    rounds = 75  # x 4 writes = 300 writes per process
    start = time.time() + 2.0  # past every interpreter's start-up
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WRITER,
                str(db_path),
                str(rounds),
                str(start),
                str(n),
            ],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(3)
    ]
    errors = [w.communicate(timeout=300)[1] for w in writers]
    assert [w.returncode for w in writers] == [0, 0, 0], "\n".join(
        error[-3000:] for error in errors
    )
    with Store.open(db_path) as store:
        conversations = store.list_conversations()
        assert len(conversations) == 3
        for conversation in conversations:
            messages = store.messages(conversation.id)
            assert len(messages) == 2 * rounds
            assert {m.state for m in messages} == {"complete"}
            assert messages[-1].content == f"answer {rounds - 1}"


def test_a_busy_lock_is_waited_for_past_the_timeout_while_it_moves(
    db_path, clock, monkeypatch
):
    """Back-to-back writers may starve a third past the busy timeout: it waits on."""
    # Each hold is a tenth of the timeout: on a loaded machine a 40 ms sleep can
    # stretch past a 100 ms timeout and look like a stuck lock, which it is not.
    monkeypatch.setattr(locking, "BUSY_TIMEOUT_MS", 300)
    Store.open(db_path, clock=clock).close()
    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    holder.execute("PRAGMA busy_timeout = 300")
    started_holding = threading.Event()

    def write_back_to_back() -> None:
        # Each transaction is shorter than the busy timeout; together they hold the
        # lock for ten timeouts, with next to no gap between them.
        for i in range(100):
            holder.execute("BEGIN IMMEDIATE")
            started_holding.set()
            holder.execute(
                "INSERT INTO conversations (title, created_at, updated_at)"
                " VALUES (?, ?, ?)",
                [
                    f"held {i}",
                    "2025-06-01T12:00:00.000000Z",
                    "2025-06-01T12:00:00.000000Z",
                ],
            )
            time.sleep(0.03)
            holder.execute("COMMIT")

    thread = threading.Thread(target=write_back_to_back)
    with Store.open(db_path, clock=clock) as store:
        thread.start()
        started_holding.wait(5)
        waited_from = time.monotonic()
        conversation_id = store.create_conversation("patient")
        waited = time.monotonic() - waited_from
        thread.join()
        assert store.get_conversation(conversation_id).title == "patient"
        assert len(store.list_conversations()) == 101
    holder.close()
    assert waited > 0.3  # it waited longer than the busy timeout, and succeeded
