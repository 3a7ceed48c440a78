"""One cancel token for every long piece of work (chat turns, documents, trims).

A consumer on one thread (the Qt worker, the CLI's main thread, a server request)
creates the token and hands it down; whoever runs the work checks it between steps (the
engine after every token and between prefill chunks). `cancel` is safe from any thread,
including a signal handler.
"""

from __future__ import annotations

import threading


class CancelToken:
    """A flag that asks running work to stop soon; it cannot be reset."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Ask the work to stop at its next check."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """True once `cancel` was called."""
        return self._event.is_set()

    def __call__(self) -> bool:
        """The same as `cancelled`, for APIs that poll a callable."""
        return self._event.is_set()
