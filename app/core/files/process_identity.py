"""Which process wrote something, and whether that process is still running.

Several Swapless processes share one home: the window, terminal chats, `swapless
conversations` in a script. Whatever one of them leaves half-done (a reply still
``generating``, a prefix-cache file still being written) must be cleaned up once its
writer is gone, and never while it is still working. A process id alone cannot tell:
ids are reused. Together with the process's start time (and the machine, for a home on
a shared drive) it identifies one run of one process.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

START_TIME_TOLERANCE_S = 1.0
"""How far two readings of one process's start time may differ. psutil derives it
from the boot time, which the kernel reports to the second and which moves when the
clock is adjusted; a reused process id with a start within a second of the old one
would need the whole id space to wrap in that second."""


@dataclass(frozen=True)
class ProcessIdentity:
    """One run of one process.

    Attributes:
        host: The machine's host name.
        pid: The process id.
        started_at: When the process started (Unix seconds).
    """

    host: str
    pid: int
    started_at: float


_current: ProcessIdentity | None = None


def current() -> ProcessIdentity:
    """Return the identity of this process."""
    global _current
    pid = os.getpid()
    if _current is None or _current.pid != pid:  # first call, or a forked child
        _current = ProcessIdentity(
            host=socket.gethostname(), pid=pid, started_at=_start_time(pid) or 0.0
        )
    return _current


def is_running(identity: ProcessIdentity) -> bool:
    """Return whether the process ``identity`` describes may still be running.

    A process on another machine cannot be checked and counts as running: its own
    next start cleans up after it. So does one this user may not inspect.
    """
    if identity.host != socket.gethostname():
        return True
    if identity.pid == os.getpid():
        return abs(current().started_at - identity.started_at) <= (
            START_TIME_TOLERANCE_S
        )
    import psutil  # here, not at the top: most commands never need it

    try:
        process = psutil.Process(identity.pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False  # killed, only waiting for its parent to read its status
        started = process.create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
    return abs(started - identity.started_at) <= START_TIME_TOLERANCE_S


def _start_time(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None
