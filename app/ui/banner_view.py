"""Banners above the chat: memory pressure, the demo model, undo a delete, notices.

A banner says what is going on and, when there is something to do about it, offers one
button (Undo, Open models…). Banners are keyed so the same situation updates its banner
instead of stacking copies; some hide themselves after a few seconds.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

KIND_COLOURS = {
    # (background, border) pairs readable on light and dark palettes
    "info": ("rgba(9, 105, 218, 0.12)", "rgba(9, 105, 218, 0.45)"),
    "warning": ("rgba(212, 167, 44, 0.16)", "rgba(212, 167, 44, 0.6)"),
    "error": ("rgba(207, 34, 46, 0.14)", "rgba(207, 34, 46, 0.55)"),
}


class BannerView(QFrame):
    """One banner: a message, an optional action button and a close button."""

    def __init__(self, kind: str, text: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("banner")
        self.kind = kind
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        self.label = QLabel(text)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.label, 1)
        self.action_button = QPushButton()
        self.action_button.hide()
        layout.addWidget(self.action_button, 0, Qt.AlignmentFlag.AlignTop)
        self.close_button = QPushButton("✕")
        self.close_button.setFlat(True)
        self.close_button.setToolTip("Dismiss")
        self.close_button.setFixedWidth(28)
        layout.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)
        self.set_kind(kind)

    def set_kind(self, kind: str) -> None:
        """Colour the banner for ``info``, ``warning`` or ``error``."""
        self.kind = kind
        background, border = KIND_COLOURS[kind]
        self.setStyleSheet(
            f"QFrame#banner {{ background: {background}; border: 1px solid {border};"
            " border-radius: 6px; }"
        )


class BannerAreaView(QWidget):
    """A column of keyed banners."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(12, 6, 12, 0)
        self._layout.setSpacing(6)
        self._banners: dict[str, BannerView] = {}
        self._timers: dict[str, QTimer] = {}
        self.hide()

    def banner(self, key: str) -> BannerView | None:
        """The banner shown under ``key``, if any."""
        return self._banners.get(key)

    def show_banner(
        self,
        key: str,
        kind: str,
        text: str,
        action: tuple[str, Callable[[], None]] | None = None,
        timeout_ms: int | None = None,
        on_timeout: Callable[[], None] | None = None,
    ) -> BannerView:
        """Show or update the banner ``key``.

        Args:
            key: Identifies the situation; a second call replaces the first banner.
            kind: ``info``, ``warning`` or ``error``.
            text: What to say.
            action: Button text and what it does (the banner closes after it).
            timeout_ms: Hide after this long.
            on_timeout: Called when the banner times out or is dismissed (not after
                its action, nor when it is replaced or hidden by the app).
        """
        self.hide_banner(key)
        banner = BannerView(kind, text, self)
        banner.setObjectName("banner")
        banner.setProperty("key", key)
        if action is not None:
            label, callback = action
            banner.action_button.setText(label)
            banner.action_button.show()

            def on_action() -> None:
                self.hide_banner(key)
                callback()

            banner.action_button.clicked.connect(on_action)

        def on_done() -> None:
            # Dismissing is the same as letting it time out (e.g. commit a delete now).
            self.hide_banner(key)
            if on_timeout is not None:
                on_timeout()

        banner.close_button.clicked.connect(on_done)
        self._layout.addWidget(banner)
        self._banners[key] = banner
        if timeout_ms is not None:
            timer = QTimer(self)
            timer.setSingleShot(True)
            timer.timeout.connect(on_done)
            timer.start(timeout_ms)
            self._timers[key] = timer
        self.show()
        return banner

    def hide_banner(self, key: str) -> None:
        """Remove the banner ``key`` (no-op if absent); its timeout does not fire."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.stop()
            timer.deleteLater()
        banner = self._banners.pop(key, None)
        if banner is not None:
            banner.hide()
            banner.deleteLater()
        if not self._banners:
            self.hide()
