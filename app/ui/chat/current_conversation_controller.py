"""Which conversation the window shows, and the preset its next turn uses.

A stored conversation's preset lives in the store (the session reads it from there and
`GenerationWorker.apply_preset` saves changes there), so `preset` reads it from the
store rather than keeping a copy that could drift. A new chat is not stored until its
first message, so until then its preset is held here. Everything that depends on the
open conversation (the transcript, the list's selection, the preset picker, the context
meter, the window title) follows `opened`, `preset_changed` and `title_changed`.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QWidget

from app.core.errors import KnownError, SettingsError
from app.core.presets.presets import Preset, get_preset, preset_from_dict
from app.ui.common.dialogs import show_error, show_failure
from app.ui.conversations.conversation_list_view import UNTITLED

log = logging.getLogger(__name__)

APP_NAME = "Swapless"


class CurrentConversationController(QObject):
    """The open conversation (None: a new chat not sent yet).

    Args:
        store: The open store.
        worker: The generation worker (it saves preset changes).
        settings: The `SettingsController` (the preset of new chats).
        window: Parent of the dialogs.
    """

    opened = Signal(object, object)  # conversation id or None, message id to reveal
    adopted = Signal(int)  # the new chat shown was stored under this id
    preset_changed = Signal(object)  # the preset the next turn uses
    title_changed = Signal(str)  # the window title
    open_failed = Signal(int)  # a conversation that could not be read

    def __init__(self, store, worker, settings, window: QWidget):
        super().__init__(window)
        self._store = store
        self._worker = worker
        self._settings = settings
        self._window = window
        self.conversation_id: int | None = None
        self._new_chat_preset = self.default_preset()
        worker.preset_applied.connect(self._on_worker_preset_applied)
        worker.preset_failed.connect(self._on_worker_preset_failed)
        settings.settings_changed.connect(self._on_settings_settings_changed)

    def default_preset(self) -> Preset:
        """The preset of new chats (from the settings; ``chat`` if that one is gone)."""
        try:
            return get_preset(self._settings.settings.default_preset)
        except SettingsError:
            return get_preset("chat")

    def preset(self) -> Preset:
        """The preset the next turn of the open conversation uses."""
        if self.conversation_id is None:
            return self._new_chat_preset
        try:
            conversation = self._store.get_conversation(self.conversation_id)
            return preset_from_dict(
                conversation.preset or "chat", conversation.settings
            )
        except (KnownError, SettingsError) as exc:
            log.warning("conversation %s: %s", self.conversation_id, exc)
            return self.default_preset()

    def new_chat(self) -> None:
        """Show an empty chat with the default preset; it is stored on its first send."""
        self.conversation_id = None
        self._new_chat_preset = self.default_preset()
        self.opened.emit(None, None)
        self.preset_changed.emit(self._new_chat_preset)
        self.refresh_title()

    def open(self, conversation_id: int, reveal_message: int | None = None) -> bool:
        """Show a stored conversation (scrolled to ``reveal_message`` if given)."""
        try:
            self._store.get_conversation(conversation_id)
        except KnownError as exc:
            show_error(self._window, "Cannot open the conversation", str(exc))
            self.open_failed.emit(conversation_id)
            return False
        self.conversation_id = conversation_id
        self.opened.emit(conversation_id, reveal_message)
        self.preset_changed.emit(self.preset())
        self.refresh_title()
        return True

    def adopt(self, conversation_id: int) -> None:
        """The new chat on screen was just stored as ``conversation_id``."""
        self.conversation_id = conversation_id
        self.adopted.emit(conversation_id)
        # A document read into a new chat stores it with long-document settings when
        # the chat's preset does not read in segments: the picker follows at once.
        stored = self.preset()
        if stored != self._new_chat_preset:
            self.preset_changed.emit(stored)

    def set_preset(self, preset: Preset) -> None:
        """Use ``preset`` from the next turn of the open conversation on."""
        if self.conversation_id is None:
            self._new_chat_preset = preset
            self.preset_changed.emit(preset)
        else:
            # Saved by the worker; `preset_changed` follows its answer.
            self._worker.apply_preset(self.conversation_id, preset)

    def refresh_title(self) -> None:
        """Emit the window title for the open conversation (its title may change)."""
        if self.conversation_id is None:
            self.title_changed.emit(APP_NAME)
            return
        try:
            title = self._store.get_conversation(self.conversation_id).title
        except KnownError:
            return
        self.title_changed.emit(f"{title or UNTITLED} — {APP_NAME}")

    def _on_worker_preset_applied(self, conversation_id: int, preset) -> None:
        if conversation_id == self.conversation_id:
            self.preset_changed.emit(preset)

    def _on_worker_preset_failed(self, conversation_id: int, error) -> None:
        show_failure(self._window, "Could not change the preset", error)
        if conversation_id == self.conversation_id:
            self.preset_changed.emit(self.preset())

    def _on_settings_settings_changed(self, settings, previous) -> None:
        if self.conversation_id is None and (
            settings.default_preset != previous.default_preset
        ):
            self._new_chat_preset = self.default_preset()
            self.preset_changed.emit(self._new_chat_preset)
