"""Run a quality check on the loaded model: every cell against its reference.

KV cells are compared with a full-precision cache on the probe texts (top-1, KL,
perplexity) and asked the pass keys; trim cells replay the trim conversations three
ways (spliced, rebuilt, untrimmed) and compare the reply to a question about a kept
fact with the exact rebuild's. One job on the engine thread; events go out through
``emit`` as they happen and the stop token is polled between forward passes, so a stop
ends the current cell as far as it got and keeps every cell before it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx

from app.core.chat.model_messages import build_messages, summary_style
from app.core.engine.cache.conversation_cache import SpliceUnsupported
from app.core.engine.loader import LoadedModel
from app.core.engine.quality import quality_scoring as scoring
from app.core.errors import KnownError
from app.core.presets.generation_settings import KVSettings
from app.core.quality import conversation_layout as layout
from app.core.quality.cells import KV, Cell
from app.core.quality.events import (
    CancelToken,
    CellMeasured,
    QualityFinished,
    QualityProgress,
    QualityReport,
)
from app.core.quality.metrics import CellResult, perplexity_ratio
from app.core.quality.probes import ProbeSet, TrimCase
from app.core.store.records import format_time, utc_now
from app.core.trim.extractive import extractive_summary

SUMMARY_MAX_TOKENS = 256


@dataclass
class _TrimCaseIds:
    layout: layout.TrimLayout
    question: scoring.Question


class _Stopped(Exception):
    """The stop token was set."""


class _Check:
    """State of one running check (engine thread only)."""

    def __init__(self, loaded, probes, cells, cancel, emit, kv_bytes_per_token):
        self.loaded = loaded
        self.model = loaded.model
        self.probes = probes
        self.cells = cells
        self.cancel = cancel
        self.emit = emit
        self.kv_bytes_per_token = kv_bytes_per_token
        self.chunk = scoring.chunk_size(int(loaded.config.get("vocab_size") or 0))
        self.started = time.perf_counter()
        self.done = 0
        self.current = ("reference", "full-precision reference")
        self.reference_nll: tuple[float, int] | None = None
        self.chat = scoring.ChatRenderer(loaded.tokenizer)
        self._prepare()
        self.total = self._count_units()

    # -- preparation ------------------------------------------------------------------

    def _prepare(self) -> None:
        limit = self.probes.sizes.text_tokens
        self.texts = []
        for _, text in self.probes.texts:
            ids = self.chat.encode(text)
            self.texts.append(ids[: limit + 1] if limit else ids)
        self.pass_keys = [
            scoring.task_question(self.chat, task) for task in self.probes.pass_keys
        ]
        self._trim_cases: list[_TrimCaseIds] | None = None
        self.rebuilt: dict[int, tuple[mx.array, bool]] = {}

    @property
    def trim_cases(self) -> list[_TrimCaseIds]:
        """The trim conversations as ids, laid out on first use.

        Raises:
            NotAdditive: The chat template cannot be spliced (the trim cells report it).
        """
        if self._trim_cases is None:
            self.style = summary_style(self.chat.render)
            self._trim_cases = [self._trim_ids(c) for c in self.probes.trim_cases]
        return self._trim_cases

    def _trim_ids(self, case: TrimCase) -> _TrimCaseIds:
        summary = extractive_summary(
            list(case.dropped), SUMMARY_MAX_TOKENS, lambda t: len(self.chat.encode(t))
        )
        trim = layout.trim_layout(
            self.chat.render,
            case.system_prompt,
            case.dropped,
            case.kept,
            summary,
            self.style,
        )
        trimmed = build_messages(
            case.system_prompt, [summary], list(case.kept), style=self.style
        )
        question = self.chat.question(trimmed, case.kept_question, case.kept_answer)
        asked = question.prompt_ids[len(trim.trimmed_ids) :]
        return _TrimCaseIds(
            trim, scoring.Question(asked, question.reply_ids, question.answer)
        )

    def _count_units(self) -> int:
        units = len(self.pass_keys)  # the reference's own answers
        for cell in self.cells:
            if cell.kind == KV:
                chunk = self.text_chunk(cell)
                units += len(self.pass_keys) + sum(
                    len(range(0, max(len(ids) - 1, 0), chunk)) for ids in self.texts
                )
            else:
                units += len(self.probes.trim_cases)
        return units

    def text_chunk(self, cell: Cell) -> int:
        """Text positions per forward pass of a KV cell: an aged cache's tiers age
        between passes, so its passes are at most one aging block (a longer pass would
        read more of its own tokens exact than the preset keeps)."""
        aging = cell.kv_settings.aging if cell.aging else None
        if aging is not None:
            return min(self.chunk, aging.block_tokens)
        return self.chunk

    # -- progress ---------------------------------------------------------------------

    def step(self, units: int = 1) -> None:
        self.done += units
        self.emit_progress()
        if self.cancel.cancelled:
            raise _Stopped

    def emit_progress(self) -> None:
        self.emit(
            QualityProgress(
                done=min(self.done, self.total),
                total=self.total,
                cell_key=self.current[0],
                label=self.current[1],
                elapsed_s=time.perf_counter() - self.started,
            )
        )

    def stopped(self) -> bool:
        return self.cancel.cancelled

    # -- measuring --------------------------------------------------------------------

    def answer_right(self, kv: KVSettings, question: scoring.Question) -> bool | None:
        cache = scoring.new_cache(self.model, kv)
        return scoring.answer_correct(
            self.model,
            cache,
            question.lead_ids,
            question.answer_ids,
            self.chunk,
            self.stopped,
        )

    def reference_answers(self) -> list[bool]:
        answers = []
        for question in self.pass_keys:
            verdict = self.answer_right(scoring.FULL_PRECISION, question)
            if verdict is None:
                raise _Stopped
            answers.append(verdict)
            self.step()
        return answers

    def kv_cell(self, cell: Cell, reference: list[bool], partial: dict) -> None:
        kv = cell.kv_settings
        scoring.new_cache(self.model, kv)  # raises now for an unusable setting
        chunk = self.text_chunk(cell)
        total = partial["comparison"] = scoring.Comparison()
        for ids in self.texts:
            full = scoring.new_cache(self.model, scoring.FULL_PRECISION)
            compressed = scoring.new_cache(self.model, kv)
            for start in range(0, len(ids) - 1, chunk):
                total.add(
                    scoring.compare_chunk(
                        self.model, full, compressed, ids, start, chunk
                    )
                )
                self.step()
        if self.reference_nll is None and total.positions:
            self.reference_nll = (total.reference_nll, total.positions)
        partial.update(hits=0, ref_hits=0, asked=0)
        for question, ref_right in zip(self.pass_keys, reference, strict=True):
            verdict = self.answer_right(kv, question)
            if verdict is None:
                raise _Stopped
            partial["asked"] += 1
            partial["hits"] += bool(verdict)
            partial["ref_hits"] += bool(ref_right)
            self.step()

    def trim_cell(self, cell: Cell, partial: dict) -> None:
        total = partial["comparison"] = scoring.Comparison()
        partial.update(hits=0, ref_hits=0, asked=0)
        for index, case in enumerate(self.trim_cases):
            reference, ref_right = self._rebuilt(index, case)
            if cell.trim == "rebuild":
                log_probs, right = reference, ref_right
            else:
                log_probs, right = self._replayed(cell.trim, case)
            total.add(scoring.compare_log_probs(reference, log_probs))
            partial["asked"] += 1
            partial["hits"] += bool(right)
            partial["ref_hits"] += bool(ref_right)
            self.step()

    def _rebuilt(self, index: int, case: _TrimCaseIds):
        if index not in self.rebuilt:
            cache = scoring.new_cache(self.model, scoring.FULL_PRECISION)
            self._fill(cache, case.layout.trimmed_ids)
            self.rebuilt[index] = self._reply(cache, case.question)
        return self.rebuilt[index]

    def _replayed(self, method: str, case: _TrimCaseIds):
        cache = scoring.new_cache(self.model, scoring.FULL_PRECISION)
        self._fill(cache, case.layout.untrimmed_ids)
        if method == "splice":
            cache.splice(
                case.layout.keep, case.layout.drop_until, case.layout.insert_ids
            )
        return self._reply(cache, case.question)

    def _fill(self, cache, ids) -> None:
        if scoring.feed(self.model, cache, ids, self.chunk, self.stopped) is None:
            raise _Stopped

    def _reply(self, cache, question: scoring.Question) -> tuple[mx.array, bool]:
        log_probs = scoring.reply_log_probs(
            self.model, cache, question.prompt_ids, question.reply_ids
        )
        start, end = question.answer
        predicted = mx.argmax(log_probs[start:end], axis=-1).tolist()
        return log_probs, predicted == question.reply_ids[start:end]

    # -- results ----------------------------------------------------------------------

    def result(self, cell: Cell, partial: dict, seconds: float, complete: bool):
        c = partial.get("comparison") or scoring.Comparison()
        return CellResult(
            cell=cell,
            positions=c.positions,
            top1_agreement=c.agreed / c.positions if c.positions else None,
            mean_kl=c.kl_sum / c.positions if c.positions else None,
            # Trims are compared on a short reply, not on text: no perplexity.
            perplexity_ratio=perplexity_ratio(
                c.reference_nll, c.compressed_nll, c.positions
            )
            if cell.kind == KV
            else None,
            recall_hits=partial.get("hits", 0),
            recall_total=partial.get("asked", 0),
            reference_hits=partial.get("ref_hits", 0),
            seconds=seconds,
            complete=complete,
            kv_bytes_per_token=self.kv_bytes_per_token(cell)
            if cell.kind == KV
            else None,
        )


def run_quality_check(
    loaded: LoadedModel,
    probes: ProbeSet,
    cells: list[Cell],
    cancel: CancelToken,
    emit: Callable[[object], None],
    kv_bytes_per_token: Callable[[Cell], float | None] = lambda _: None,
) -> QualityReport:
    """Measure every cell on the loaded model; emit events; return the report.

    Args:
        loaded: The model (engine thread only).
        probes: The probe set, built for this model's tokenizer.
        cells: What to measure, in order.
        cancel: Polled between forward passes.
        emit: Receives `QualityProgress`, `CellMeasured` and `QualityFinished`.
        kv_bytes_per_token: The cache bytes per token of a KV cell (recorded with it).

    Returns:
        The report that `QualityFinished` carried.
    """
    check = _Check(loaded, probes, cells, cancel, emit, kv_bytes_per_token)
    results: list[CellResult] = []
    reference: list[bool] = []
    cancelled = False
    try:
        reference = check.reference_answers()
        for cell in cells:
            check.current = (cell.key, cell.label)
            partial: dict = {}
            began = time.perf_counter()
            try:
                if cell.kind == KV:
                    check.kv_cell(cell, reference, partial)
                else:
                    check.trim_cell(cell, partial)
            except _Stopped:
                if partial:
                    result = check.result(
                        cell, partial, time.perf_counter() - began, False
                    )
                    results.append(result)
                    emit(CellMeasured(result))
                raise
            except (
                KnownError,
                ValueError,
                SpliceUnsupported,
                layout.NotAdditive,
            ) as exc:
                result = CellResult(cell=cell, error=str(exc))
            else:
                result = check.result(cell, partial, time.perf_counter() - began, True)
            finally:
                mx.clear_cache()
            results.append(result)
            emit(CellMeasured(result))
        # A cell that could not run (e.g. a trim this template cannot splice) skips
        # its units: the bar still ends full.
        if check.done < check.total:
            check.done = check.total
            check.emit_progress()
    except _Stopped:
        cancelled = True
    ppl = None
    if check.reference_nll is not None:
        nll, positions = check.reference_nll
        ppl = math.exp(nll / positions)
    report = QualityReport(
        model_identity=loaded.info.identity,
        model_folder=loaded.info.folder,
        settings_key=probes.settings_key,
        quick=probes.sizes.name == "quick",
        results=tuple(results),
        cancelled=cancelled,
        seconds=time.perf_counter() - check.started,
        reference_perplexity=ppl,
        reference_recall=(sum(reference), len(reference)) if reference else (0, 0),
        measured_at=format_time(utc_now()),
    )
    emit(QualityFinished(report))
    return report
