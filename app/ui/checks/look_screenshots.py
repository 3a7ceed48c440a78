"""`make screenshots-look`: the window's design, scene by scene, in a theme.

Runs the real window on a throw-away home under a real X server and saves what the
screen shows (``import -window root``, so dialogs are in the picture; offscreen it
grabs the window instead): the welcome screen, a chat whose reply streams Markdown and
code under a collapsed Thinking block and a tool call's card, the Thinking block open
while a thought streams, the preset editor and the Models dialog. The demo model
writes noise, so the chat's words are scripted: they go through the chat view's own
streaming path (`ChatView.start_live_turn` / `set_live_text`), the way a model's tokens
do, and the stored exchange above them through the store. Nothing else is staged.

``python -m app.ui.checks.look_screenshots DIR --theme light|dark [--prefix NAME]``
writes ``DIR/NAME-welcome.png``, ``-chat``, ``-thinking``, ``-preset-editor``,
``-models``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from app.ui.checks.screenshot import _Session

EARLIER_QUESTION = "What does a KV cache hold, in one sentence?"
EARLIER_ANSWER = (
    "The **keys and values** of every token already read, so each new token attends "
    "to them instead of running the whole prompt again."
)
QUESTION = "How do I keep a chat inside a 4 GB budget? A short example, please."
THOUGHT = (
    "The user wants a budget. The weights take most of it; the KV cache grows with "
    "every token, 4-bit KV is a quarter of 16-bit. A preset with a context limit and "
    "a trim that keeps half the context answers it; show the numbers, then the code."
)
REPLY = """Three things decide what a chat costs in memory:

1. **The weights**: fixed once the model is loaded (a 3B model at 4 bits ≈ 1.8 GB).
2. **The KV cache**: grows with every token; a *4-bit* cache is a quarter of 16-bit.
3. **The context limit**: past it, Swapless trims the oldest messages into a summary.

| KV bits | 8k tokens | 32k tokens |
|---|---|---|
| 16 | 1.0 GB | 4.0 GB |
| 4 | 0.25 GB | 1.0 GB |

A preset that fits 4 GB:

```python
preset = get_preset("chat").with_changes(
    max_context=8192,  # trims past this
    kv_bits=4,
)
```

Then watch the `Memory` gauge at the bottom: it warns before the machine would swap.
"""
CHUNK_CHARS = 24
SHOT_DELAY_MS = 700


def _capture(session: _Session, path: Path) -> Path:
    """The screen (a real X server) or the window (offscreen), as PNG."""
    session.app.processEvents()
    session.pause(250)
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.environ.get("DISPLAY") and shutil.which("import"):
        subprocess.run(["import", "-window", "root", str(path)], check=True)
        return path
    return session.save(path)


def _dialog_shot(session: _Session, open_it: Callable[[], None], path: Path) -> Path:
    """Open a dialog (modal or not), capture the screen, close it again."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QDialog

    done: list[bool] = []

    def shoot() -> None:
        dialogs = [
            w
            for w in QApplication.topLevelWidgets()
            if isinstance(w, QDialog) and w.isVisible()
        ]
        _capture(session, path)
        for dialog in dialogs:
            dialog.close()
        done.append(True)

    QTimer.singleShot(SHOT_DELAY_MS, shoot)
    open_it()  # returns at once, or once the dialog closes (a modal exec)
    while not done:
        session.pause(100)
    session.pause(200)
    return path


def _stored_exchange(session: _Session) -> None:
    """A finished earlier exchange in a conversation, opened in the window."""
    store = session.window.store
    conversation = store.create_conversation("Memory budget for long chats")
    store.add_message(conversation, "user", EARLIER_QUESTION)
    store.add_message(conversation, "assistant", EARLIER_ANSWER)
    session.window.conversation_list.refresh()
    session.window.current.open(conversation)
    session.pause(300)


def _stream(session: _Session, text: str) -> None:
    view = session.window.chat_view
    for end in range(CHUNK_CHARS, len(text) + CHUNK_CHARS, CHUNK_CHARS):
        view.set_live_text(text[:end])
        session.pause(15)
    session.pause(400)


def take_look_screenshots(folder: Path, theme: str, prefix: str) -> list[Path]:
    """Save the scenes of the module docstring in ``folder``, in ``theme``."""
    from app.core.store.calls.tool_calls import StoredToolCall
    from app.ui.chat.tools.tool_call_card import ToolCallCard

    with tempfile.TemporaryDirectory(prefix="swapless-look-") as home:
        os.environ["SWAPLESS_HOME"] = home
        screen = None
        session = _Session((1280, 800))
        try:
            from PySide6.QtGui import QGuiApplication

            screen = QGuiApplication.primaryScreen().geometry()
            window = session.window
            window.setGeometry(0, 0, screen.width(), screen.height())
            if theme == "dark":
                session.switch_to_dark()
            saved = [_capture(session, folder / f"{prefix}-welcome.png")]
            session.wait(window.models.loaded, 300, window.models.load_demo)
            _stored_exchange(session)
            view = window.chat_view
            view.start_live_turn(QUESTION)
            view.set_live_footer("Thinking…")
            words = THOUGHT.split(" ")
            for count in range(1, len(words) + 1, 3):
                view.set_live_reasoning(
                    " ".join(words[:count]), count * 2, count * 0.05, done=False
                )
                session.pause(15)
            view.scroll_to_bottom()
            saved.append(_capture(session, folder / f"{prefix}-thinking.png"))
            view.set_live_reasoning(THOUGHT, 96, 2.4, done=True)
            card = ToolCallCard.from_call(
                StoredToolCall(
                    call_id="call_1",
                    server="files",
                    tool="read_file",
                    arguments='{"path": "notes/budget.md"}',
                    result="Budget: 4 GB for the model and its caches.",
                    decision="once",
                    seconds=0.04,
                )
            )
            view.add_live_card(card)
            _stream(session, REPLY)
            view.set_live_footer("Writing… 21.4 tok/s")
            view.scroll_to_bottom()
            session.pause(300)
            saved.append(_capture(session, folder / f"{prefix}-chat.png"))
            saved.append(
                _dialog_shot(
                    session,
                    window.toolbar.preset_button.click,
                    folder / f"{prefix}-preset-editor.png",
                )
            )
            saved.append(
                _dialog_shot(
                    session,
                    window.toolbar.models_button.click,
                    folder / f"{prefix}-models.png",
                )
            )
            view.end_live_turn()
            return saved
        finally:
            session.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m app.ui.checks.look_screenshots DIR --theme light|dark``."""
    parser = argparse.ArgumentParser(prog="python -m app.ui.checks.look_screenshots")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--theme", choices=("light", "dark"), default="light")
    parser.add_argument("--prefix", default="")
    args = parser.parse_args(argv)
    for path in take_look_screenshots(
        args.folder, args.theme, args.prefix or args.theme
    ):
        print(f"screenshot saved to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
