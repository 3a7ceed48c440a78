"""The first-start panel, shown while no model is loaded and no conversation is open.

It explains what Swapless does in two sentences and offers the three ways to start: the
model manager (a real model), the reference model that ships with Swapless (tiny, but
it answers offline) and the demo model, whose replies are noise; each said plainly.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.core.models.model_catalog import REFERENCE_EXPLANATION
from app.ui.common.icons import set_icon
from app.ui.common.look import SPACE, set_type

DEMO_EXPLANATION = (
    "The demo model is tiny and has random weights: it is built on this machine in a "
    "few seconds and lets you see streaming, the memory gauge and trimming work, but "
    "its replies are noise. For real answers, open the model manager and download an "
    "MLX model (e.g. mlx-community/Qwen2.5-0.5B-Instruct-4bit) or add a folder with "
    "one."
)

REFERENCE_LINE = (
    "The reference model ships with Swapless and answers offline: it is tiny, so it "
    "continues text and recalls a fact you gave it, but it is no assistant."
)


class WelcomeView(QWidget):
    """Welcome text with "Open the model manager" and "Try the demo model"."""

    models_requested = Signal()
    reference_requested = Signal()
    demo_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("welcome")
        outer = QVBoxLayout(self)
        outer.addStretch(1)
        column = QVBoxLayout()
        column.setSpacing(SPACE["l"])
        title = QLabel("Welcome to Swapless")
        set_type(title, "display", weight=600)
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        column.addWidget(title)
        intro = QLabel(
            "Chat with local MLX models without the machine ever swapping: Swapless "
            "sizes the KV cache to the memory you have, summarises old turns before the "
            "context outgrows it, and shows where every byte goes."
        )
        intro.setWordWrap(True)
        set_type(intro, "title")
        intro.setAlignment(Qt.AlignmentFlag.AlignCenter)
        column.addWidget(intro)
        buttons = QHBoxLayout()
        buttons.setSpacing(SPACE["s"])
        buttons.addStretch(1)
        self.models_button = QPushButton("Open the model manager")
        self.models_button.setObjectName("primary")
        set_icon(self.models_button, "boxes", on_accent=True)
        self.models_button.setDefault(True)
        self.models_button.clicked.connect(self.models_requested)
        buttons.addWidget(self.models_button)
        self.reference_button = QPushButton("Try the reference model")
        self.reference_button.setToolTip(REFERENCE_EXPLANATION)
        self.reference_button.clicked.connect(self.reference_requested)
        buttons.addWidget(self.reference_button)
        self.demo_button = QPushButton("Try the demo model")
        self.demo_button.clicked.connect(self.demo_requested)
        buttons.addWidget(self.demo_button)
        buttons.addStretch(1)
        column.addLayout(buttons)
        reference = QLabel(REFERENCE_LINE)
        reference.setObjectName("referenceExplanation")
        reference.setWordWrap(True)
        reference.setAlignment(Qt.AlignmentFlag.AlignCenter)
        reference.setStyleSheet("color: palette(placeholder-text);")
        column.addWidget(reference)
        demo = QLabel(DEMO_EXPLANATION)
        demo.setObjectName("demoExplanation")
        demo.setWordWrap(True)
        demo.setAlignment(Qt.AlignmentFlag.AlignCenter)
        demo.setStyleSheet("color: palette(placeholder-text);")
        column.addWidget(demo)
        row = QHBoxLayout()
        row.addStretch(1)
        holder = QWidget()
        holder.setLayout(column)
        holder.setMaximumWidth(640)
        row.addWidget(holder, 3)
        row.addStretch(1)
        outer.addLayout(row)
        outer.addStretch(2)

    def set_loading(self, loading: bool, text: str = "") -> None:
        """Disable the buttons while a model loads."""
        self.models_button.setEnabled(not loading)
        self.reference_button.setEnabled(not loading)
        self.demo_button.setEnabled(not loading)
        self.demo_button.setText(text or "Try the demo model")
