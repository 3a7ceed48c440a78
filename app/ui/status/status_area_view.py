"""The panel at the bottom of the window: notices, memory, context, a document's progress.

The local server's line sits at the end of the row when the server runs; a document's
progress beside the context meter while one is read.

Always visible and always the same height, so what it shows changing never moves the
chat above it. Layout only.
"""

from __future__ import annotations

from PySide6.QtWidgets import QFrame, QHBoxLayout, QVBoxLayout, QWidget

from app.ui.documents.document_card_view import DocumentProgressView
from app.ui.server.server_status_view import ServerStatusView
from app.ui.status.context_meter_view import ContextMeterView
from app.ui.status.memory_gauge_view import MemoryGaugeView
from app.ui.status.notice_area_view import NoticeAreaView


class StatusAreaView(QFrame):
    """Notices on top; memory and context side by side below."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("statusArea")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        column = QVBoxLayout(self)
        column.setContentsMargins(10, 4, 10, 5)
        column.setSpacing(3)
        self.notice_area = NoticeAreaView()
        column.addWidget(self.notice_area)
        row = QHBoxLayout()
        row.setSpacing(14)
        self.memory_gauge = MemoryGaugeView()
        row.addWidget(self.memory_gauge, 3)
        divider = QFrame()
        divider.setFrameShape(QFrame.Shape.VLine)
        divider.setFrameShadow(QFrame.Shadow.Sunken)
        row.addWidget(divider)
        self.context_meter = ContextMeterView()
        row.addWidget(self.context_meter, 2)
        # Shown only while a document is read, in whichever conversation.
        self.document_progress = DocumentProgressView()
        row.addWidget(self.document_progress, 2)
        self.server_status = ServerStatusView()
        row.addWidget(self.server_status)
        column.addLayout(row)
