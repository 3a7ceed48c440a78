"""Read macOS's own memory pressure level through ``sysctlbyname``, in microseconds.

The kernel's ``kern.memorystatus_vm_pressure_level`` (1 normal, 2 warning, 4 critical)
is what Activity Monitor's pressure graph and the jetsam killer act on, so it is the
best single signal on a Mac. It is read with ``ctypes`` rather than by running
``sysctl``: the probe samples every 500 ms and must cost well under a millisecond,
and a subprocess costs several.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any

PRESSURE_SYSCTL = b"kern.memorystatus_vm_pressure_level"


class MacPressureReader:
    """Reads ``kern.memorystatus_vm_pressure_level``; ``None`` wherever it cannot."""

    def __init__(self, libc: Any | None = None, platform: str = sys.platform):
        """Bind to the C library.

        Args:
            libc: An object with a ctypes-style ``sysctlbyname`` (tests pass a fake);
                by default the system C library on macOS, nothing elsewhere.
            platform: ``sys.platform``, injectable for tests.
        """
        if libc is None and platform == "darwin":
            libc = _load_libc()
        self._libc = libc

    @property
    def available(self) -> bool:
        """Whether the sysctl can be read at all on this machine."""
        return self._libc is not None

    def read(self) -> int | None:
        """The current level (1, 2 or 4), or ``None`` if the sysctl failed."""
        if self._libc is None:
            return None
        value = ctypes.c_int(0)
        size = ctypes.c_size_t(ctypes.sizeof(value))
        status = self._libc.sysctlbyname(
            PRESSURE_SYSCTL, ctypes.byref(value), ctypes.byref(size), None, 0
        )
        return value.value if status == 0 else None


def _load_libc() -> Any | None:
    path = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(path or "libc.dylib", use_errno=True)
        func = libc.sysctlbyname
    except (OSError, AttributeError):
        return None
    func.argtypes = [
        ctypes.c_char_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.c_void_p,
        ctypes.c_size_t,
    ]
    func.restype = ctypes.c_int
    return libc
