"""What the notice area says, and for how long.

Every notice of the window comes through here: memory pressure (the level from
`app/core/memory`, the words from `pressure_words`), the demo model, a trim, a refused
message, a document being read, a damaged database, a broken settings file. A notice has
a key (the same situation updates its notice instead of adding another), a kind, plain
text, maybe one action, and either stays until dismissed (when it matters) or ends by
itself after a while (when it only informs). The area shows the most severe, then the
newest; the others wait behind arrows. Nothing here moves the chat: the area's height
never changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer

from app.core.memory.pressure_words import pressure_notice
from app.core.notice_words import (
    document_started_notice,
    document_stopped_notice,
    trim_notice,
)

log = logging.getLogger(__name__)

SEVERITY = {"info": 0, "warning": 1, "error": 2}
INFO_MS = 12_000
DEMO_TEXT = (
    "Demo model: its weights are random, so its replies are noise. For real answers, "
    "open Models… and download an MLX model or add a folder with one."
)


@dataclass(frozen=True)
class Notice:
    """One notice.

    Attributes:
        key: The situation it is about.
        kind: ``info``, ``warning`` or ``error``.
        text: Plain text.
        action: Button text and what it does, or None.
        timeout_ms: It ends by itself after this long; None: it stays until dismissed.
    """

    key: str
    kind: str
    text: str
    action: tuple[str, Callable[[], None]] | None = None
    timeout_ms: int | None = None


class NoticesController(QObject):
    """Decides what the `NoticeAreaView` shows.

    Args:
        area: The notice area.
        parent: Owner.
    """

    def __init__(self, area, parent: QObject | None = None):
        super().__init__(parent)
        self._area = area
        self._notices: dict[str, Notice] = {}
        self._timers: dict[str, QTimer] = {}
        self._order: list[str] = []  # newest last
        self._shown_key: str | None = None
        self._pressure = "normal"
        self.open_models: Callable[[], None] = lambda: None
        area.action_clicked.connect(self._on_area_action_clicked)
        area.dismissed.connect(self.dismiss)
        area.previous_requested.connect(lambda: self._step(-1))
        area.next_requested.connect(lambda: self._step(1))

    # -- the notices -------------------------------------------------------------------

    def notice(self, key: str) -> Notice | None:
        """The notice under ``key``, if any."""
        return self._notices.get(key)

    @property
    def keys(self) -> list[str]:
        """Keys of the notices waiting, in the order the area shows them."""
        return self._ranked()

    def show(self, notice: Notice) -> None:
        """Show ``notice`` (replacing the one with its key) and make it current."""
        self._drop(notice.key)
        self._notices[notice.key] = notice
        self._order.append(notice.key)
        if notice.timeout_ms is not None:
            timer = QTimer(self)
            timer.setSingleShot(True)
            timer.timeout.connect(lambda key=notice.key: self.dismiss(key))
            timer.start(notice.timeout_ms)
            self._timers[notice.key] = timer
        self._shown_key = None
        self._render()

    def dismiss(self, key: str) -> None:
        """Remove the notice ``key`` (no-op when absent)."""
        if self._drop(key):
            self._render()

    # -- sources -----------------------------------------------------------------------

    def show_pressure(self, snapshot) -> None:
        """Follow a memory snapshot (a notice while its pressure is not normal)."""
        level = snapshot.pressure.value
        if level == self._pressure:
            return
        self._pressure = level
        notice = pressure_notice(snapshot)
        if notice is None:
            self.dismiss("pressure")
            return
        kind = "error" if level == "critical" else "warning"
        self.show(Notice("pressure", kind, notice.text))

    def show_model_loaded(self, info) -> None:
        """Say so when the model's replies are noise (the demo)."""
        if info.random_weights:
            self.show(
                Notice("demo", "info", DEMO_TEXT, ("Open models…", self.open_models))
            )
        else:
            self.dismiss("demo")

    def show_refusal(self, text: str) -> None:
        """A request that could not be done now, in its words (it stays a while)."""
        self.show(Notice("refused", "warning", text, timeout_ms=INFO_MS))

    def show_trim(self, _conversation_id: int, outcome) -> None:
        """A conversation was summarised to stay within its limit."""
        text = trim_notice(outcome.dropped_messages, outcome.summary_method)
        self.show(Notice("trim", "info", text, timeout_ms=INFO_MS))

    def show_reply_failed(self, _conversation_id: int, error) -> None:
        """A refused or failed reply (known errors; bugs get a dialog instead)."""
        if error.known:
            self.show(Notice("refused", "error", error.message))

    def show_document_started(self, _conversation_id: int, event, name: str) -> None:
        """How the document is being read."""
        log.info("document %s: %s", name, event.mode_reason)
        text = document_started_notice(name, event)
        self.show(Notice("document", "info", text, timeout_ms=INFO_MS))

    def show_document_refused(self, text: str) -> None:
        """A document that cannot be read now (no model, another one is read)."""
        self.show(Notice("document", "warning", text, timeout_ms=INFO_MS))

    def show_document_finished(self, _conversation_id: int, event) -> None:
        """A reading ended: say how to go on when it was stopped."""
        if event is not None and event.cancelled:
            self.show(Notice("document", "info", document_stopped_notice(event)))
        else:
            self.dismiss("document")

    def show_store_recovery(self, store) -> None:
        """What the store repaired when it opened."""
        notice = store.recovery_notice() if hasattr(store, "recovery_notice") else None
        if notice is not None:
            self.show(Notice("recovered", "warning", notice))
        replies = getattr(store, "recovered_replies", 0)
        if replies:
            noun = "reply was" if replies == 1 else "replies were"
            self.show(
                Notice(
                    "interrupted",
                    "info",
                    f"{replies} {noun} cut off when Swapless last stopped; kept and "
                    "marked stopped.",
                    timeout_ms=INFO_MS,
                )
            )

    def show_server_failed(self, text: str) -> None:
        """The local server could not start (a port in use, say)."""
        self.show(Notice("server", "warning", text))

    def show_settings_problem(self, problem: str) -> None:
        """The settings file could not be used."""
        self.show(
            Notice(
                "settings",
                "warning",
                f"{problem}. Swapless is using the default settings; fix the file or "
                "save new settings (Ctrl+,).",
            )
        )

    def show_preset_problems(self, problems: list[str]) -> None:
        """User preset files that are not used (unreadable, or named like a built-in
        one): said in the window too, not only in the log (`skipped_user_presets`)."""
        if not problems:
            self.dismiss("presets")
            return
        self.show(Notice("presets", "warning", " ".join(problems)))

    # -- internals ---------------------------------------------------------------------

    def _drop(self, key: str) -> bool:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.stop()
            timer.deleteLater()
        if self._notices.pop(key, None) is None:
            return False
        self._order.remove(key)
        if self._shown_key == key:
            self._shown_key = None
        return True

    def _ranked(self) -> list[str]:
        newest_first = list(reversed(self._order))
        return sorted(newest_first, key=lambda k: -SEVERITY[self._notices[k].kind])

    def _render(self) -> None:
        ranked = self._ranked()
        if not ranked:
            self._area.clear()
            return
        key = self._shown_key if self._shown_key in ranked else ranked[0]
        self._shown_key = key
        notice = self._notices[key]
        self._area.show_notice(
            key,
            notice.kind,
            notice.text,
            notice.action[0] if notice.action else None,
            (ranked.index(key) + 1, len(ranked)),
        )

    def _step(self, direction: int) -> None:
        ranked = self._ranked()
        if ranked and self._shown_key in ranked:
            index = (ranked.index(self._shown_key) + direction) % len(ranked)
            self._shown_key = ranked[index]
            self._render()

    def _on_area_action_clicked(self, key: str) -> None:
        notice = self._notices.get(key)
        if notice is not None and notice.action is not None:
            self.dismiss(key)
            notice.action[1]()
