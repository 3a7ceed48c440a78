"""Run the Qt event loop until a signal fires: for the smoke test and the UI benchmark.

Both drive the real window outside pytest-qt, so they need their own bounded wait that
turns a failure signal or a time-out into an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


def wait_for_signal(
    signal,
    timeout_s: float,
    *,
    failures: Iterable = (),
    start: Callable[[], None] | None = None,
    error: type[Exception] = RuntimeError,
    timeout_message: str = "timed out after {:.0f} s",
) -> tuple:
    """Return the arguments of ``signal`` once it fires.

    Args:
        signal: The signal waited for.
        timeout_s: Seconds before giving up.
        failures: Signals whose firing means the wait failed (last argument: the error).
        start: Called once the signals are connected (so a fast signal is not missed).
        error: Exception class raised on failure or time-out.
        timeout_message: Message of the time-out, formatted with ``timeout_s``.

    Raises:
        error: A failure signal fired, or nothing happened in time.
    """
    from PySide6.QtCore import QEventLoop, QTimer

    failures = list(failures)
    loop = QEventLoop()
    outcome: dict = {}

    def done(*args):
        outcome.setdefault("ok", args)
        loop.quit()

    def failed(*args):
        outcome.setdefault("failed", args)
        loop.quit()

    signal.connect(done)
    for failure in failures:
        failure.connect(failed)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    if start is not None:
        start()
    if not outcome:
        loop.exec()
    signal.disconnect(done)
    for failure in failures:
        failure.disconnect(failed)
    if "failed" in outcome:
        problem = outcome["failed"][-1]
        raise error(getattr(problem, "message", str(problem)))
    if "ok" not in outcome:
        raise error(timeout_message.format(timeout_s))
    return outcome["ok"]
