"""Dropping a file onto the window or the composer reads it as a document.

An event filter, installed on the window and on the composer's text box (which would
otherwise paste the file's address as text), accepts drags that carry local files and
hands the first dropped file to a callback: the `DocumentController` then plans its
reading. Anything else dragged (text, a web address) is left to the widget.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QWidget


def local_files(mime) -> list[str]:
    """The local file paths a drag carries (none for text or remote addresses)."""
    if mime is None or not mime.hasUrls():
        return []
    return [url.toLocalFile() for url in mime.urls() if url.isLocalFile()]


class FileDropFilter(QObject):
    """Accepts dropped files on the widgets it watches.

    Args:
        dropped: Called with the path of the first dropped file.
        parent: Owner of the filter.
    """

    def __init__(self, dropped: Callable[[str], object], parent: QObject | None = None):
        super().__init__(parent)
        self._dropped = dropped

    def watch(self, widget: QWidget) -> None:
        """Accept file drops on ``widget``."""
        widget.setAcceptDrops(True)
        widget.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:
        kind = event.type()
        if kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove):
            if local_files(event.mimeData()):
                event.acceptProposedAction()
                return True
        elif kind == QEvent.Type.Drop:
            files = local_files(event.mimeData())
            if files:
                event.acceptProposedAction()
                self._dropped(files[0])
                return True
        return super().eventFilter(watched, event)
