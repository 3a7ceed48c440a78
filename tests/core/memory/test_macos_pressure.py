"""The macOS sysctl reader, with a fake C library (these machines run Linux)."""

from __future__ import annotations

import sys

from app.core.memory.macos import PRESSURE_SYSCTL, MacPressureReader


class FakeLibc:
    """Mimics ``sysctlbyname`` writing an int through the pointer it is given."""

    def __init__(self, value: int, status: int = 0):
        self.value, self.status, self.names = value, status, []

    def sysctlbyname(self, name, oldp, oldlenp, newp, newlen):
        self.names.append(name)
        oldp._obj.value = self.value  # ctypes.byref() keeps the target in _obj
        return self.status


def test_reads_the_level_through_the_pointer():
    libc = FakeLibc(4)
    reader = MacPressureReader(libc=libc)
    assert reader.available
    assert reader.read() == 4
    assert libc.names == [PRESSURE_SYSCTL]


def test_failed_sysctl_reads_as_none():
    assert MacPressureReader(libc=FakeLibc(2, status=-1)).read() is None


def test_unavailable_off_macos():
    if sys.platform == "darwin":
        reader = MacPressureReader()
        assert reader.read() in (1, 2, 4)
    else:
        reader = MacPressureReader()
        assert not reader.available
        assert reader.read() is None
