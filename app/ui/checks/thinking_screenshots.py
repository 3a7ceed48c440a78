"""`make screenshots-thinking`: the Thinking block of a real reasoning model, both themes.

The shipped reference model thinks before it answers (docs/reference-model.md). This
drives the real window under Xvfb (or offscreen) on a throw-away home: it installs and
loads that model, sends a question with thinking on, grabs the window while the
reasoning streams (the block live, its text scrolling) and again once the answer has
come (the block collapsed to "Thought for … · N tokens"), then does the same in the
dark theme. Nothing is staged: the texts are the model's own.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from app.ui.checks.screenshot import LAPTOP_SIZE, _Session

# A pass-key question as the model was trained on (docs/reference-model.md): the code
# stated first, text after it, the question last.
QUESTION = (
    "The secret code is 4817. Remember it. The memory gauge shows how much memory "
    "the model, the caches and everything else use, and warns before the machine "
    "would swap. What is the secret code?"
)
LIVE_AFTER_CHUNKS = 12


def _live_shot_class():
    from PySide6.QtCore import QObject, Slot

    class LiveShot(QObject):
        """Grabs the window once, after a few reasoning chunks have been shown."""

        def __init__(self, session: _Session, path: Path, saved: list[Path]):
            super().__init__()
            self._session, self._path, self._saved = session, path, saved
            self._seen = 0

        @Slot(int, str)
        def on_reasoning(self, _conversation: int, _text: str) -> None:
            self._seen += 1
            if self._seen == LIVE_AFTER_CHUNKS and not self._saved:
                self._session.window.chat_view.scroll_to_bottom()
                self._saved.append(self._session.save(self._path))

    return LiveShot


def _LiveShot(session: _Session, path: Path, saved: list[Path]):  # noqa: N802
    return _live_shot_class()(session, path, saved)


def _turn(session: _Session, folder: Path, theme: str) -> list[Path]:
    """One thinking turn: the live shot during the reasoning, the collapsed one after."""
    from app.core.presets.presets import get_preset

    window = session.window
    window.current.new_chat()
    window.current.set_preset(
        get_preset("chat").with_changes(
            thinking=True, max_tokens=40, temperature=0.0, system_prompt=""
        )
    )
    saved: list[Path] = []
    relay = _LiveShot(session, folder / f"thinking-live-{theme}.png", saved)
    # The relay lives on the UI thread, so the worker's signal reaches it queued: a
    # grab from the worker's own thread paints widgets off the UI thread and crashes.
    window.worker.reasoning_received.connect(relay.on_reasoning)
    try:
        session.wait(
            window.turns.reply_finished, 120, lambda: window.turns.send(QUESTION)
        )
    finally:
        window.worker.reasoning_received.disconnect(relay.on_reasoning)
    if not saved:
        raise RuntimeError("the model wrote no reasoning to show live")
    session.pause(300)
    window.chat_view.scroll_to_bottom()
    saved.append(session.save(folder / f"thinking-collapsed-{theme}.png"))
    return saved


def take_thinking_screenshots(folder: Path) -> list[Path]:
    """Save the Thinking block live and collapsed, light and dark, in ``folder``."""
    from app.core.modelkit.reference.install import install_reference_model

    with tempfile.TemporaryDirectory(prefix="swapless-thinking-") as home:
        os.environ["SWAPLESS_HOME"] = home
        session = _Session(LAPTOP_SIZE)
        try:
            model = install_reference_model(Path(home) / "models" / "reference")
            window = session.window
            session.wait(
                window.models.loaded, 300, lambda: window.models.load(str(model))
            )
            if window.models.info is None:
                raise RuntimeError("the reference model did not load")
            saved = _turn(session, folder, "light")
            session.switch_to_dark()
            saved += _turn(session, folder, "dark")
            return saved
        finally:
            session.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m app.ui.checks.thinking_screenshots DIR``."""
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else Path("docs/screenshots")
    for path in take_thinking_screenshots(folder):
        print(f"screenshot saved to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
