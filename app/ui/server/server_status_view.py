"""The local server's line beside the gauges: where it listens and what it is doing.

Layout only: `ServerController` feeds it a `ServerStatus` (or None when the server is
off, which hides the line). The text is plain and elides; the tooltip has the details a
client needs.
"""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from app.ui.common.elided_label import ElidedLabel

RUNNING = "#1a7f37"
FAILED = "#cf222e"


class ServerStatusView(ElidedLabel):
    """``● Server :8989 · 2 running`` while the local server runs; hidden otherwise."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__("", parent)
        self.setObjectName("serverStatus")
        self.status = None
        self.hide()

    def set_status(self, status) -> None:
        """Show a `ServerStatus`, or hide the line for None."""
        self.status = status
        if status is None:
            self.hide()
            return
        if status.running:
            busy = (
                f" · {status.active_requests} running" if status.active_requests else ""
            )
            parts = [("● ", RUNNING), (f"Server :{status.port}{busy}", None)]
            tip = (
                f"Local OpenAI-compatible server at {status.base_url}\n"
                f"Model: {status.model or 'none loaded'}\n"
                f"Requests answered: {status.requests_total}; client conversations "
                f"in memory: {status.conversations}\n"
                "Turn it off in Settings (Ctrl+,)."
            )
        else:
            parts = [("● ", FAILED), ("Server stopped", None)]
            tip = status.error or "The local server is not running."
        self.set_parts(parts)
        self.setToolTip(tip)
        self.show()
