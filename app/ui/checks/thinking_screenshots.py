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

QUESTION = (
    "Remember this: the secret code is 4817. Lots of text follows here so that the "
    "code is some way back. What is the secret code?"
)
LIVE_AFTER_CHUNKS = 12


def _turn(session: _Session, folder: Path, theme: str) -> list[Path]:
    """One thinking turn: the live shot during the reasoning, the collapsed one after."""
    from app.core.presets.presets import get_preset

    window = session.window
    window.current.new_chat()
    window.current.set_preset(
        get_preset("chat").with_changes(
            thinking=True, max_tokens=120, temperature=0.0, system_prompt=""
        )
    )
    saved: list[Path] = []
    seen = [0]

    def on_reasoning(_conversation: int, _text: str) -> None:
        seen[0] += 1
        if seen[0] == LIVE_AFTER_CHUNKS and not saved:
            window.chat_view.scroll_to_bottom()
            saved.append(session.save(folder / f"thinking-live-{theme}.png"))

    window.worker.reasoning_received.connect(on_reasoning)
    try:
        session.wait(
            window.turns.reply_finished, 120, lambda: window.turns.send(QUESTION)
        )
    finally:
        window.worker.reasoning_received.disconnect(on_reasoning)
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
