"""`swapless chat` on a real terminal (a pty): slash commands, Ctrl+C, Ctrl+D."""

from __future__ import annotations

import os
import pty
import re
import select
import sys
import time
from pathlib import Path

from app.core.store import Store

ROOT = Path(__file__).resolve().parents[2]
# How long to wait for the prompt while a model loads on a busy machine (not timed).
PATIENCE_S = 240


class Terminal:
    """A `swapless chat` whose stdin, stdout and stderr are one terminal."""

    def __init__(self, args: list[str], home: Path):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the command, with the pty as its terminal
            os.chdir(ROOT)
            env = dict(os.environ, SWAPLESS_HOME=str(home), PYTHONPATH=str(ROOT))
            os.execve(sys.executable, [sys.executable, "-m", "app", *args], env)
        self.screen = ""

    def read_until(self, text: str) -> str:
        """Read until ``text`` appears after what was read before; return the new part."""
        start = len(self.screen)
        deadline = time.monotonic() + PATIENCE_S
        while text not in self.screen[start:]:
            assert time.monotonic() < deadline, self.screen[-2000:]
            ready, _, _ = select.select([self.fd], [], [], 1.0)
            if ready:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    break
                if not data:
                    break
                self.screen += data.decode("utf-8", "replace").replace("\r\n", "\n")
        return self.screen[start:]

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def wait(self) -> int:
        self.read_until("\0")  # drain until the command closes the terminal
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)


def test_slash_commands_are_understood_and_other_text_is_sent(
    tiny_model_dir, swapless_home
):
    chat = Terminal(
        ["chat", "--model", str(tiny_model_dir), "--max-tokens", "3"], swapless_home
    )
    greeting = chat.read_until("you> ")
    assert "/help lists the commands" in greeting
    chat.type("/help\n")
    shown = chat.read_until("you> ")
    for command in ("/help", "/new", "/preset NAME", "/quit"):
        assert command in shown
    assert "sent to the model as is" in shown
    chat.type("/preset code\n")
    assert "Preset code from the next message." in chat.read_until("you> ")
    chat.type("/preset nonsense\n")
    assert "nonsense" in chat.read_until("you> ")
    chat.type("//help is a word\n")  # sent as "/help is a word"
    chat.read_until("you> ")
    chat.type("/new\n")
    assert "preset code" in chat.read_until("you> ")  # a new one, same settings
    chat.type("/quit\n")
    assert chat.wait() == 0
    with Store.open(swapless_home / "swapless.db") as store:
        first, second = sorted(c.id for c in store.list_conversations())
        sent = [m.content for m in store.messages(first) if m.role == "user"]
        assert sent == ["/help is a word"]  # commands never reached the model
        assert store.get_conversation(first).preset == "code"
        assert store.messages(second) == []


def test_ctrl_c_stops_a_reply_and_says_so_and_ctrl_d_leaves_on_a_new_line(
    tiny_model_dir, swapless_home
):
    chat = Terminal(
        ["chat", "--model", str(tiny_model_dir), "--max-tokens", "4000"], swapless_home
    )
    chat.read_until("you> ")
    # The random model may end a reply on its own before Ctrl+C lands (a fast machine
    # wrote 319 tokens in 0.4 s): such a reply ends with its plain figures, and the
    # test asks again. A Ctrl+C that lands must stop the reply and say so.
    for _ in range(5):
        chat.type("Tell me a long story.\n")
        chat.read_until("swapless> ")
        chat.read_until(" ")  # the reply has started streaming
        chat.type("\x03")
        figures = chat.read_until("you> ")
        if not re.search(r"\n\[\d+ tokens", figures):
            break
    assert re.search(r"\[stopped · \d+ tokens", figures), figures
    chat.type("\x04")
    assert chat.wait() == 0
    # The shell's prompt would start on a line of its own.
    assert chat.screen.endswith("you> \n"), repr(chat.screen[-40:])
