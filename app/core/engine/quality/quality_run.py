"""Start a quality check on the engine thread and stream its events to any thread.

The consumer's side mirrors `TurnHandle`: iterate a `QualityRun` to receive
`QualityProgress`, `CellMeasured` and finally `QualityFinished`; an exception raised
on the engine thread is re-raised in the consumer; `cancel` (or the shared
`CancelToken`) stops it and the final event still arrives with what was measured.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator

from app.core.quality.events import CancelToken, QualityFinished, QualityReport
from app.core.quality.plan import CheckPlan

_DONE = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


class QualityRun:
    """The consumer's side of one running check.

    Args:
        cancel: The token the check polls; a new one by default.
    """

    def __init__(self, cancel: CancelToken | None = None):
        self.cancel_token = cancel or CancelToken()
        self._events: queue.Queue = queue.Queue()
        self.report: QualityReport | None = None
        self._ended = False

    def cancel(self) -> None:
        """Stop after the current forward pass; measured cells are kept."""
        self.cancel_token.cancel()

    def _put(self, item) -> None:
        self._events.put(item)

    def next_event(self):
        """The next event, or None after the last one.

        Safe to call again after a KeyboardInterrupt while waiting: no event is lost
        (the CLI stops the check on Ctrl-C and keeps reading).

        Raises:
            Exception: Whatever the check raised on the engine thread.
        """
        if self._ended:
            return None
        item = self._events.get()
        if item is _DONE:
            self._ended = True
            return None
        if isinstance(item, _Failure):
            self._ended = True
            raise item.error
        if isinstance(item, QualityFinished):
            self.report = item.report
        return item

    def __iter__(self) -> Iterator[object]:
        while (item := self.next_event()) is not None:
            yield item

    def wait(self) -> QualityReport:
        """Consume every event; return the report."""
        for _ in self:
            pass
        if self.report is None:
            raise RuntimeError("the quality check ended without a report")
        return self.report


def start_quality_check(
    engine, plan: CheckPlan, cancel: CancelToken | None = None
) -> QualityRun:
    """Queue a check of the engine's loaded model; return its event stream.

    Args:
        engine: An `Engine` with a model loaded.
        plan: The cells and probe sizes (`app.core.quality.plan.plan_check`).
        cancel: A token shared with the caller (e.g. a Stop button), or None.
    """
    run = QualityRun(cancel)

    def job() -> None:
        from app.core.engine.quality.quality_check import run_quality_check
        from app.core.quality.probes import build_probes

        try:
            loaded = engine._require_model()
            tokenizer = loaded.tokenizer
            probes = build_probes(
                plan.sizes,
                lambda text: list(tokenizer.encode(text, add_special_tokens=False)),
                lambda ids: tokenizer.decode(ids),
                plan.max_context,
            )
            run_quality_check(
                loaded,
                probes,
                list(plan.cells),
                run.cancel_token,
                run._put,
                plan.kv_bytes_per_token,
            )
        except BaseException as exc:  # travels to the consumer
            run._put(_Failure(exc))
        finally:
            run._put(_DONE)

    engine.submit(job)
    return run
