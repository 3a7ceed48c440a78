"""The frozen event stream of a quality check, and its one cancel token.

Every consumer (the CLI's progress bar, a Qt worker, a test) loops over the same
events: `QualityProgress` while a cell runs, `CellMeasured` when it is done, and one
`QualityFinished` at the end, also after a stop, carrying every cell measured so far.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from app.core.quality.metrics import CellResult


class CancelToken:
    """A stop request any thread may set; the check polls it between forward passes."""

    def __init__(self):
        self._event = threading.Event()

    def cancel(self) -> None:
        """Ask the check to stop; cells already measured are kept."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """True once `cancel` was called."""
        return self._event.is_set()


@dataclass(frozen=True)
class QualityProgress:
    """Work done so far.

    Attributes:
        done: Units of work finished (forward-pass chunks and probes).
        total: Units in the whole check.
        cell_key: The cell running now (``Cell.key``), or ``reference``.
        label: The same, for people.
        elapsed_s: Seconds since the check started.
    """

    done: int
    total: int
    cell_key: str
    label: str
    elapsed_s: float


@dataclass(frozen=True)
class CellMeasured:
    """One cell is done (``result.complete`` is False if it was stopped midway)."""

    result: CellResult


@dataclass(frozen=True)
class QualityReport:
    """The outcome of a check.

    Attributes:
        model_identity: `model_identity` of the folder that was checked.
        model_folder: Where it was.
        settings_key: What else decides the numbers (probe set and version), so a
            quick check and a full one are stored apart.
        quick: True for the quick probe set.
        results: Every measured cell, in run order.
        cancelled: True when stopped before the end.
        seconds: Wall time of the whole check.
        reference_perplexity: Full-precision perplexity on the probe texts.
        reference_recall: (hits, total) of the full-precision cache on the pass keys.
        measured_at: ISO time the check finished (UTC).
    """

    model_identity: str
    model_folder: str
    settings_key: str
    quick: bool
    results: tuple[CellResult, ...] = field(default_factory=tuple)
    cancelled: bool = False
    seconds: float = 0.0
    reference_perplexity: float | None = None
    reference_recall: tuple[int, int] = (0, 0)
    measured_at: str = ""

    def result_for(self, key: str) -> CellResult | None:
        """The result of the cell with this key, or None."""
        for result in self.results:
            if result.cell.key == key:
                return result
        return None

    def to_dict(self) -> dict:
        """A JSON-serializable form."""
        return {
            "model_identity": self.model_identity,
            "model_folder": self.model_folder,
            "settings_key": self.settings_key,
            "quick": self.quick,
            "cancelled": self.cancelled,
            "seconds": self.seconds,
            "reference_perplexity": self.reference_perplexity,
            "reference_recall": list(self.reference_recall),
            "measured_at": self.measured_at,
            "results": [r.to_dict() for r in self.results],
        }


@dataclass(frozen=True)
class QualityFinished:
    """The last event: the report, complete or as far as it got."""

    report: QualityReport
