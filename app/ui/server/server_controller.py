"""The local server inside the app: started and stopped by the Settings switch.

The app's server runs on the app's own engine, so its requests queue on the one model
thread with the window's chats and answer with the model the window loaded, inside the
same memory budget (the gauge's pressure level makes it trim earlier and drop idle
caches first, as the chats do). Its HTTP loop runs on its own thread
(`app.server.LocalServer`); this controller only starts it, stops it off the UI thread,
and polls its status once a second for the label beside the gauges. The server
package (Starlette, uvicorn) is imported only when the switch is on.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.errors import KnownError, SettingsError
from app.core.presets.presets import get_preset
from app.core.settings import AppSettings
from app.ui.common.background import TaskSet

if TYPE_CHECKING:  # imported when the server starts
    from app.server.local_server import LocalServer

log = logging.getLogger(__name__)

POLL_MS = 1000


class ServerController(QObject):
    """Runs `LocalServer` while ``server_enabled`` is set.

    Args:
        worker: The generation worker (its engine and pressure source are served).
        settings_controller: The app settings (the switch, the port, the preset).
        parent: The window.
    """

    status_changed = Signal(object)  # a ServerStatus, or None while off
    failed = Signal(str)  # why the server could not start, in words

    def __init__(self, worker, settings_controller, parent: QObject | None = None):
        super().__init__(parent)
        self._worker = worker
        self._settings = settings_controller
        self._server: LocalServer | None = None
        self._tasks = TaskSet(self)
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._on_timer_timeout)
        settings_controller.settings_changed.connect(
            self._on_settings_controller_settings_changed
        )

    @property
    def server(self):
        """The running `LocalServer`, or None."""
        return self._server

    def start_if_enabled(self) -> None:
        """Start the server if the settings say so (at app start)."""
        if self._settings.settings.server_enabled:
            self._start(self._settings.settings)

    def stop(self) -> None:
        """Stop the server now (at shutdown; running replies stop within a token)."""
        self._timer.stop()
        server, self._server = self._server, None
        if server is not None:
            server.stop()
        self.status_changed.emit(None)

    def _on_settings_controller_settings_changed(
        self, settings: AppSettings, previous: AppSettings
    ) -> None:
        wanted = settings.server_enabled
        moved = settings.server_port != previous.server_port
        if self._server is not None and (not wanted or moved):
            self._stop_in_background()
        if wanted and (self._server is None or moved):
            self._start(settings)
        elif self._server is not None and settings.default_preset != (
            previous.default_preset
        ):
            self._server.set_preset(self._preset(settings))

    def _start(self, settings: AppSettings) -> None:
        from app.server.config import ServerConfig
        from app.server.local_server import LocalServer

        try:
            config = ServerConfig(
                preset=self._preset(settings), port=settings.server_port
            )
            server = LocalServer(
                self._worker.engine, config, pressure=self._worker.pressure
            )
            server.start()
        except (KnownError, SettingsError) as exc:
            self.failed.emit(f"The local server did not start: {exc}")
            self.status_changed.emit(None)
            return
        self._server = server
        self._timer.start()
        self._on_timer_timeout()

    def _stop_in_background(self) -> None:
        # Stopping waits for open streams (about 0.2 s): not on the UI thread.
        server, self._server = self._server, None
        assert server is not None, "called only while one runs"
        self._timer.stop()
        self._tasks.start(lambda _report: server.stop())
        self.status_changed.emit(None)

    @staticmethod
    def _preset(settings: AppSettings):
        try:
            return get_preset(settings.default_preset)
        except SettingsError:
            return get_preset("chat")

    def _on_timer_timeout(self) -> None:
        if self._server is not None:
            self.status_changed.emit(self._server.status())
