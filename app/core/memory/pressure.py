"""Turn raw memory signals into a pressure level, purely, so tests can feed any input.

Each platform gives a different signal: Linux has PSI (the share of recent time tasks
stalled waiting for memory), macOS has the kernel's own memorystatus level, and both
have available memory and swap counters. `classify_pressure` combines whichever are
present, takes the worst, and says in words what it was based on, so a user seeing
"warning" can tell why. The thresholds are constants below, with their reasons.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.memory.snapshot import PressureLevel

# Linux PSI avg10, in percent of the last 10 s. Android's lmkd calls 70 ms of partial
# stall per second (7% "some") medium pressure; a desktop tolerates a little more
# before it is felt, hence 10%. "full" means every runnable task was stalled, i.e. the
# machine made no progress: 5% of that is already noticeable, 20% is thrashing.
PSI_SOME_WARNING = 10.0
PSI_SOME_CRITICAL = 40.0
PSI_FULL_WARNING = 5.0
PSI_FULL_CRITICAL = 20.0

# Available memory as a share of total. The budget plans to leave at least a quarter
# of RAM untouched by default, so dropping under a tenth means something else is
# eating memory; under 5% the kernel is reclaiming hard.
AVAILABLE_WARNING_FRACTION = 0.10
AVAILABLE_CRITICAL_FRACTION = 0.05

# Swap traffic in bytes/s. A trickle of page-outs of idle pages is normal on a busy
# desktop; a sustained megabyte per second is the start of what Swapless exists to
# prevent, and 16 MiB/s (4096 pages/s) is thrashing.
SWAP_WARNING_RATE = 1 * 1024 * 1024
SWAP_CRITICAL_RATE = 16 * 1024 * 1024

# kern.memorystatus_vm_pressure_level values (xnu's kVMPressure* constants).
MACOS_LEVELS = {
    1: PressureLevel.NORMAL,
    2: PressureLevel.WARNING,
    4: PressureLevel.CRITICAL,
}


@dataclass(frozen=True)
class PsiReading:
    """The avg10 figures of ``/proc/pressure/memory``, in percent."""

    some_avg10: float
    full_avg10: float | None


def parse_psi(text: str) -> PsiReading:
    """Parse the contents of ``/proc/pressure/memory``.

    Args:
        text: Lines such as ``some avg10=0.00 avg60=0.00 avg300=0.00 total=0``.

    Returns:
        The ``some`` and (when present) ``full`` avg10 values.

    Raises:
        ValueError: No ``some`` line with an ``avg10`` value.
    """
    values: dict[str, float] = {}
    for line in text.splitlines():
        kind, _, rest = line.strip().partition(" ")
        for field in rest.split():
            key, _, value = field.partition("=")
            if key == "avg10":
                values[kind] = float(value)
    if "some" not in values:
        raise ValueError(f"no 'some avg10=' in PSI text {text!r}")
    return PsiReading(values["some"], values.get("full"))


@dataclass(frozen=True)
class PressureSignal:
    """One signal the level was decided from, kept apart so it can be put in words.

    Attributes:
        kind: ``macos``, ``psi``, ``psi-missing``, ``available`` or ``swap``.
        description: The signal with its figures, for logs and tooltips.
        level: The level this signal alone points to.
        value: Its main figure: the macOS level, PSI ``some`` avg10 (percent), the
            available share (0–1), or the larger swap rate (bytes/s); 0 when missing.
    """

    kind: str
    description: str
    level: PressureLevel
    value: float = 0.0


def pressure_signals(
    *,
    available_fraction: float,
    psi: PsiReading | None = None,
    psi_missing_reason: str | None = None,
    macos_level: int | None = None,
    swap_total: int = 0,
    swap_in_rate: float = 0.0,
    swap_out_rate: float = 0.0,
) -> list[PressureSignal]:
    """Read each signal this platform provides, with the level it points to.

    Args:
        available_fraction: Available memory / total memory.
        psi: Linux PSI reading, or ``None`` where there is none.
        psi_missing_reason: Why PSI is missing on Linux (shown to the user).
        macos_level: ``kern.memorystatus_vm_pressure_level`` on macOS (1, 2 or 4),
            else ``None``. When valid it replaces the available-memory heuristic:
            macOS keeps memory full of cache on purpose, so its "available" figure is
            a poor guide.
        swap_total: Swap configured; swap traffic is mentioned only if there is swap
            or traffic.
        swap_in_rate: Bytes/s swapped in.
        swap_out_rate: Bytes/s swapped out.

    Returns:
        The signals in a fixed order (macOS, PSI, available memory, swap).
    """
    signals: list[PressureSignal] = []
    # An unexpected macOS value is ignored: the available-memory heuristic stands in.
    kernel_level = MACOS_LEVELS.get(macos_level) if macos_level is not None else None
    if kernel_level is not None and macos_level is not None:
        signals.append(
            PressureSignal(
                "macos",
                f"macOS memorystatus level {macos_level}",
                kernel_level,
                float(macos_level),
            )
        )
    if psi is not None:
        signals.append(_psi_signal(psi))
    elif psi_missing_reason:
        signals.append(
            PressureSignal("psi-missing", psi_missing_reason, PressureLevel.NORMAL)
        )
    if kernel_level is None:
        signals.append(_available_signal(available_fraction))
    if swap_total or swap_in_rate or swap_out_rate:
        signals.append(_swap_signal(swap_in_rate, swap_out_rate))
    return signals


def classify_pressure(**readings) -> tuple[PressureLevel, str]:
    """Decide the pressure level from whatever signals this platform provides.

    Args:
        readings: The keyword arguments of `pressure_signals`.

    Returns:
        The worst level among the signals, and a description of the signals with the
        ones that raised the level marked.
    """
    signals = pressure_signals(**readings)
    return worst_level(signals), describe_signals(signals)


def worst_level(signals: list[PressureSignal]) -> PressureLevel:
    """The most severe level among ``signals``."""
    return PressureLevel.worst([signal.level for signal in signals])


def describe_signals(signals: list[PressureSignal]) -> str:
    """The signals in one line, the ones that raised the level marked."""
    return " + ".join(
        s.description
        if s.level is PressureLevel.NORMAL
        else f"{s.description} [{s.level.value}]"
        for s in signals
    )


def _psi_signal(psi: PsiReading) -> PressureSignal:
    full = psi.full_avg10 if psi.full_avg10 is not None else 0.0
    if psi.some_avg10 >= PSI_SOME_CRITICAL or full >= PSI_FULL_CRITICAL:
        level = PressureLevel.CRITICAL
    elif psi.some_avg10 >= PSI_SOME_WARNING or full >= PSI_FULL_WARNING:
        level = PressureLevel.WARNING
    else:
        level = PressureLevel.NORMAL
    text = f"Linux PSI some avg10={psi.some_avg10:.2f}"
    if psi.full_avg10 is not None:
        text += f" full avg10={psi.full_avg10:.2f}"
    return PressureSignal("psi", text, level, psi.some_avg10)


def _available_signal(fraction: float) -> PressureSignal:
    if fraction < AVAILABLE_CRITICAL_FRACTION:
        level = PressureLevel.CRITICAL
    elif fraction < AVAILABLE_WARNING_FRACTION:
        level = PressureLevel.WARNING
    else:
        level = PressureLevel.NORMAL
    return PressureSignal(
        "available", f"available memory {fraction:.0%}", level, fraction
    )


def _swap_signal(swap_in: float, swap_out: float) -> PressureSignal:
    worst = max(swap_in, swap_out)
    if worst >= SWAP_CRITICAL_RATE:
        level = PressureLevel.CRITICAL
    elif worst >= SWAP_WARNING_RATE:
        level = PressureLevel.WARNING
    else:
        level = PressureLevel.NORMAL
    return PressureSignal(
        "swap", f"swap in {_rate(swap_in)} out {_rate(swap_out)}", level, worst
    )


def _rate(bytes_per_s: float) -> str:
    if bytes_per_s < 1024:
        return f"{bytes_per_s:.0f} B/s"
    if bytes_per_s < 1024 * 1024:
        return f"{bytes_per_s / 1024:.0f} KiB/s"
    return f"{bytes_per_s / (1024 * 1024):.1f} MiB/s"
