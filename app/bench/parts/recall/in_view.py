"""What is in the model's view after a trim: kept, recalled — newest-first vs most-used.

No model generates here: for each question the part asks which of the turns that hold
its answer the model would see word for word, through the product's own code — the
trim planner (`app.core.trim.policy.plan_trim`, with the chat preset at the limit and
the recall reserve the session keeps free), recall from the store (`recall_for`: a
real SQLite store, FTS5, BM25 weighted by importance and by coverage of the question's
words, the pairs that go on with a matching reply, within `recall_budget`) and the reference model's tokenizer for every count.
Modes:

- ``oldest``: today's trim, the newest messages kept, no recall.
- ``importance``: the same kept tokens, spent on the newest pair and then the pairs
  later replies used most (`app.core.recall.keep`), no recall.
- ``recall``: today's trim with recall (the product's default).
- ``recall_importance``: most-used pairs kept (at the recall trim's kept tokens), and
  recall over the rest.

Two sets of questions: LoCoMo's annotated questions (read from ``--locomo PATH`` or
``SWAPLESS_LOCOMO``; skipped, with a row saying so, when absent) at limits of 2K, 4K
and 8K, each asked after its whole conversation; and the `recall` part's seeded
synthetic conversations (limit 512, its preset) for the verdict on keeping the most
used pairs: at equal kept tokens it must keep more facts that were referred to again
and no fewer dormant ones. Intervals are Wilson 95 %.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from app.bench.context import BenchContext
from app.bench.parts.recall import locomo
from app.bench.parts.recall.recall import KINDS, make_case, wilson
from app.bench.results import NotAvailable, PartResult, Row, yes_no

NAME = "recall_view"
TITLE = "Evidence in the model's view after a trim (LoCoMo 2K/4K/8K; synthetic 512)"
ENV = "SWAPLESS_LOCOMO"
LIMITS = (2048, 4096, 8192)
MODES = ("oldest", "importance", "recall", "recall_importance")
MODE_LABELS = {
    "oldest": "oldest-first (newest kept)",
    "importance": "most-used pairs kept",
    "recall": "oldest-first + recall",
    "recall_importance": "most-used pairs kept + recall",
}
SYNTHETIC_LIMIT = 512
FULL_SYNTHETIC = 200
QUICK_SYNTHETIC = 20
TARGET_2K = 0.6


@dataclass(frozen=True)
class Ask:
    """A question asked after ``history``, with the indexes of its evidence turns."""

    text: str
    evidence: frozenset[int]
    group: str


def locomo_path(ctx: BenchContext) -> Path | None:
    """The LoCoMo file or folder this run reads, if one was given."""
    given = ctx.settings.locomo_path or os.environ.get(ENV, "")
    return Path(given).expanduser() if given else None


def available(ctx: BenchContext) -> str | None:
    """Available when the committed reference model (its tokenizer) is installed."""
    from app.bench.parts.fidelity import available as fidelity_available

    return fidelity_available(ctx)


def run(ctx: BenchContext) -> PartResult:
    """Count the evidence in view for LoCoMo (when given) and the synthetic cells."""
    from app.core.store import Store

    tokenizer = _reference_tokenizer()
    folder = Path(ctx.scratch or ctx.out_dir) / "recall_view"
    folder.mkdir(parents=True, exist_ok=True)
    store_path = folder / "view.db"
    store_path.unlink(missing_ok=True)
    store = Store.open(store_path)
    try:
        path = locomo_path(ctx)
        skipped = ""
        locomo_cells: dict = {}
        if path is None:
            skipped = (
                f"LoCoMo skipped: no data given (--locomo PATH or {ENV}=PATH; "
                "data/locomo10.json of github.com/snap-research/locomo, CC BY-NC 4.0, "
                "not shipped)"
            )
        elif not path.exists():
            raise NotAvailable(f"no LoCoMo data at {path}")
        else:
            try:
                conversations = locomo.load(path)
            except locomo.LocomoError as error:
                raise NotAvailable(str(error)) from None
            locomo_cells = _locomo_cells(ctx, store, tokenizer, conversations)
        count = FULL_SYNTHETIC if not ctx.settings.quick else QUICK_SYNTHETIC
        if ctx.settings.recall_cases:
            count = ctx.settings.recall_cases
        synthetic = _synthetic_cells(ctx, store, tokenizer, count)
    finally:
        store.close()
    return _result(locomo_cells, synthetic, skipped, path)


def _reference_tokenizer():
    from mlx_lm.utils import load_tokenizer

    from app.core.engine.prompt_tokenizer import PromptTokenizer
    from app.core.modelkit.reference.install import committed_folder

    return PromptTokenizer(load_tokenizer(committed_folder()))


class _Counts:
    """Token counts as the chat session makes them, with one preset at one limit."""

    def __init__(self, tokenizer, preset) -> None:
        from app.core.reasoning.thinking import reply_room, template_arguments

        self.tokenizer = tokenizer
        self.preset = preset
        settings = preset.thinking_settings()
        fmt = tokenizer.reasoning
        args = template_arguments(fmt, settings) if settings else {}
        probe = "x"
        rendered = len(tokenizer.render([{"role": "user", "content": probe}], False))
        self.overhead = max(rendered - tokenizer.count(probe), 0)
        system = (
            [{"role": "system", "content": preset.system_prompt}]
            if preset.system_prompt
            else []
        )
        self.fixed = (
            len(tokenizer.render(system, True, template_args=args)) if system else 0
        )
        self.reply = reply_room(preset.max_tokens, settings, fmt)

    def count(self, text: str) -> int:
        return self.tokenizer.count(text)

    def message(self, text: str) -> int:
        return self.count(text) + self.overhead


def views(
    store,
    counts: _Counts,
    history: Sequence[tuple[str, str]],
    asks: Sequence[Ask],
    limit: int,
) -> dict[str, list[set[int]]]:
    """For each mode, the history indexes in view for each question.

    Args:
        store: An open store (a conversation is added per mode family).
        counts: The tokenizer's counts with the preset.
        history: ``(role, text)`` of every earlier message, oldest first.
        asks: The questions, each asked right after ``history``.
        limit: The conversation's limit in tokens.
    """
    from app.core.recall.block import recall_budget
    from app.core.recall.keep import keep_most_used, pairs_with_scores
    from app.core.trim.policy import Action, HistoryMessage, TrimRequest, plan_trim

    tokens = [counts.message(text) for _, text in history]
    messages = [
        HistoryMessage(i, role, tokens[i]) for i, (role, _) in enumerate(history)
    ]
    pairs = pairs_with_scores(
        [(i, role, text, tokens[i]) for i, (role, text) in enumerate(history)]
    )
    reserve = recall_budget(limit)
    total = sum(tokens)

    def plan(ask: Ask, reserved: int) -> list[int]:
        new = counts.message(ask.text) + reserved
        request = TrimRequest(
            prompt_tokens=counts.fixed + total + new,
            max_tokens=counts.reply,
            history=messages,
            new_message_tokens=new,
            fixed_tokens=counts.fixed,
            limit=limit,
            keep_ratio=counts.preset.keep_ratio,
            summary_max_tokens=counts.preset.summary_max_tokens,
            reserved_tokens=reserved,
        )
        decided = plan_trim(request)
        if decided.action is Action.PROCEED:
            return list(range(len(history)))
        return list(decided.keep)

    kept_of: dict[str, list[list[int]]] = {"oldest": [], "recall": []}
    for ask in asks:
        kept_of["oldest"].append(plan(ask, 0))
        kept_of["recall"].append(plan(ask, reserve))
    for mode, base in (("importance", "oldest"), ("recall_importance", "recall")):
        kept_of[mode] = [
            keep_most_used(pairs, sum(tokens[i] for i in kept))
            if len(kept) < len(history)
            else kept
            for kept in kept_of[base]
        ]
    result = {mode: [set(k) for k in kept_of[mode]] for mode in MODES}
    for mode in ("recall", "recall_importance"):
        # A conversation of its own per mode: each trims its own span.
        ids = _stored(store, history)
        recalled = _recalled(store, counts, history, asks, kept_of[mode], ids, reserve)
        for seen, more in zip(result[mode], recalled, strict=True):
            seen |= more
    return result


def _stored(store, history: Sequence[tuple[str, str]]) -> tuple[int, list[int]]:
    """Store ``history`` as one conversation; its id and the message ids."""
    conversation = store.create_conversation("view", model="reference", preset="chat")
    with store._writing():  # one transaction: the same rows as 600 commits
        ids = [store.add_message(conversation, r, t) for r, t in history]
    return conversation, ids


def _recalled(
    store,
    counts: _Counts,
    history: Sequence[tuple[str, str]],
    asks: Sequence[Ask],
    kept: list[list[int]],
    stored: tuple[int, list[int]],
    budget: int,
) -> list[set[int]]:
    """For each question, the history indexes recall puts back in full."""
    from app.core.recall.recaller import recall_for

    conversation, ids = stored
    index_of = {message_id: i for i, message_id in enumerate(ids)}
    out: list[set[int]] = []
    covered = -1
    for ask, keep in zip(asks, kept, strict=True):
        keep_set = set(keep)
        # The summary covers what is before the first message after the last gap;
        # kept messages inside that span are in view as pinned ones are.
        tail = len(history)
        while tail > 0 and tail - 1 in keep_set:
            tail -= 1
        if tail == 0:
            out.append(set())
            continue
        if tail - 1 > covered:
            store.add_summary(conversation, ids[0], ids[tail - 1], "s", 1, "extractive")
            covered = tail - 1
        in_view = [ids[i] for i in keep if i < covered + 1]
        in_view += [ids[i] for i in range(tail, covered + 1)]
        found = recall_for(
            store,
            conversation,
            ask.text,
            budget,
            counts.count,
            exclude=in_view,
            newer=[history[i] for i in keep if i >= tail],
        )
        out.append(
            {
                index_of[r.message_id]
                for r in found.recalled
                if not r.cut and r.message_id in index_of
            }
        )
    return out


def _tally() -> dict:
    return {"all": 0, "any": 0, "total": 0}


def _count(cell: dict, evidence: frozenset[int], seen: set[int]) -> None:
    cell["total"] += 1
    cell["all"] += evidence <= seen
    cell["any"] += bool(evidence & seen)


def _locomo_cells(
    ctx: BenchContext, store, tokenizer, conversations: list[locomo.Conversation]
) -> dict:
    """Evidence in view per limit and mode (and per LoCoMo category) over every
    annotated question whose evidence turns exist."""
    from app.core.presets.presets import get_preset

    cells: dict = {"questions": 0, "unresolved": 0, "conversations": 0, "limits": {}}
    prepared = []
    for conversation in conversations:
        position = {t.dialog_id: i for i, t in enumerate(conversation.turns)}
        history = [
            (
                "user" if t.speaker == conversation.speaker_a else "assistant",
                f"{t.speaker}: {t.text}",
            )
            for t in conversation.turns
        ]
        asks = []
        for question in conversation.questions:
            if not all(e in position for e in question.evidence):
                cells["unresolved"] += 1
                continue
            evidence = frozenset(position[e] for e in question.evidence)
            asks.append(Ask(question.text, evidence, str(question.category)))
        cells["questions"] += len(asks)
        cells["conversations"] += 1
        prepared.append((conversation.name, history, asks))
    for limit in LIMITS:
        preset = get_preset("chat").with_changes(max_context=limit)
        counts = _Counts(tokenizer, preset)
        by_mode = {mode: _tally() for mode in MODES}
        by_category: dict = {}
        for name, history, asks in prepared:
            seen = views(store, counts, history, asks, limit)
            for mode in MODES:
                for ask, view in zip(asks, seen[mode], strict=True):
                    _count(by_mode[mode], ask.evidence, view)
                    group = by_category.setdefault(ask.group, {})
                    _count(group.setdefault(mode, _tally()), ask.evidence, view)
            ctx.log(f"  recall_view: LoCoMo {name} at {limit}")
        cells["limits"][str(limit)] = {"modes": by_mode, "categories": by_category}
    return cells


def _synthetic_cells(ctx: BenchContext, store, tokenizer, count: int) -> dict:
    """The `recall` part's seeded conversations: is the fact's turn in view?"""
    from app.bench.parts.recall.recall import _preset, _subject_of
    from app.core.quality.probes import text_filler

    filler = text_filler(
        lambda text: tokenizer.encode(text), lambda ids: tokenizer.decode(ids)
    )
    counts = _Counts(tokenizer, _preset("recall"))
    cells: dict = {}
    for kind in KINDS:
        by_mode = {mode: _tally() for mode in MODES}
        for i in range(count):
            case = make_case(kind, random.Random(f"{kind}-{i}"), filler)
            subject = _subject_of(case)
            evidence = frozenset(
                index
                for index, (_, text) in enumerate(case.history)
                if subject in text and _has_value(text, case.answer)
            )
            ask = Ask(case.question, evidence, kind)
            seen = views(store, counts, list(case.history), [ask], SYNTHETIC_LIMIT)
            for mode in MODES:
                view = seen[mode][0]
                by_mode[mode]["total"] += 1
                by_mode[mode]["any"] += bool(evidence & view)
                by_mode[mode]["all"] += bool(evidence & view)
        cells[kind] = by_mode
        ctx.log(f"  recall_view: synthetic {kind}, {count} conversations")
    return cells


def _has_value(text: str, value: str) -> bool:
    import re

    return re.search(rf"\b{re.escape(value)}\b", text) is not None


def verdict(synthetic: dict) -> dict:
    """Keep the most-used pairs by default only if, at equal kept tokens, they keep
    more facts referred to again and no fewer dormant ones (issue #27, point 3).

    "More" is beyond chance: the 95 % Wilson intervals do not overlap. "No fewer" is
    not fewer beyond chance: its interval does not end below the other's. Checked
    without recall (``importance`` vs ``oldest``) and with it (``recall_importance``
    vs ``recall``, the product's default); on only when both hold in both.
    """
    checks = {}
    for plain, scored in (("oldest", "importance"), ("recall", "recall_importance")):
        referred = synthetic["referred"]
        dormant = synthetic["dormant"]
        beats = (
            wilson(referred[scored]["any"], referred[scored]["total"])[0]
            > wilson(referred[plain]["any"], referred[plain]["total"])[1]
        )
        no_worse = (
            wilson(dormant[scored]["any"], dormant[scored]["total"])[1]
            >= wilson(dormant[plain]["any"], dormant[plain]["total"])[0]
        )
        checks[f"{scored}_vs_{plain}"] = {
            "beats_on_referred": beats,
            "no_worse_on_dormant": no_worse,
        }
    on = all(
        c["beats_on_referred"] and c["no_worse_on_dormant"] for c in checks.values()
    )
    return {"default_on": on, "checks": checks}


def _share(cell: dict, key: str) -> str:
    low, high = wilson(cell[key], cell["total"])
    share = cell[key] / cell["total"] if cell["total"] else 0.0
    return f"{cell[key]}/{cell['total']} = {share:.0%} ({low:.0%}–{high:.0%})"


def _result(locomo_cells: dict, synthetic: dict, skipped: str, path: Path | None):
    result = PartResult()
    for cells in [synthetic] + [
        lim["modes"] for lim in locomo_cells.get("limits", {}).values()
    ]:
        for by_mode in cells.values() if cells is synthetic else [cells]:
            for cell in by_mode.values():
                cell["share_all"] = (
                    cell["all"] / cell["total"] if cell["total"] else 0.0
                )
                cell["wilson_all"] = list(wilson(cell["all"], cell["total"]))
                cell["share_any"] = (
                    cell["any"] / cell["total"] if cell["total"] else 0.0
                )
                cell["wilson_any"] = list(wilson(cell["any"], cell["total"]))
    decided = verdict(synthetic)
    result.figures = {
        "locomo": locomo_cells,
        "locomo_source": str(path) if path else None,
        "synthetic": synthetic,
        "synthetic_limit": SYNTHETIC_LIMIT,
        "verdict": decided,
    }
    if skipped:
        result.rows.append(Row("LoCoMo evidence in view", "skipped", skipped))
    for limit, entry in locomo_cells.get("limits", {}).items():
        for mode in MODES:
            cell = entry["modes"][mode]
            met = cell["share_all"] >= TARGET_2K if limit == "2048" else None
            target = f"≥ {TARGET_2K:.0%}" if limit == "2048" else "—"
            result.rows.append(
                Row(
                    f"LoCoMo at {int(limit) // 1024}K: every evidence turn in view, "
                    f"{MODE_LABELS[mode]}",
                    _share(cell, "all"),
                    f"any evidence turn: {_share(cell, 'any')}",
                    target if mode.startswith("recall") else "—",
                    yes_no(met) if mode.startswith("recall") else "—",
                )
            )
        if limit == "2048":
            share = entry["modes"]["recall"]["share_all"]
            result.ratios["locomo_2k_evidence_in_view_recall"] = share
            result.targets_met["locomo_2k_evidence_in_view_recall"] = share >= TARGET_2K
    for kind in KINDS:
        for mode in MODES:
            result.rows.append(
                Row(
                    f"Synthetic (limit {SYNTHETIC_LIMIT}), fact {kind}: its turn in "
                    f"view, {MODE_LABELS[mode]}",
                    _share(synthetic[kind][mode], "any"),
                )
            )
    result.rows.append(
        Row(
            "Keep the most-used pairs by default (issue #27, point 3)",
            "on" if decided["default_on"] else "off",
            "; ".join(
                f"{name}: referred {'beats' if c['beats_on_referred'] else 'does not beat'}"
                f", dormant {'no worse' if c['no_worse_on_dormant'] else 'worse'}"
                for name, c in decided["checks"].items()
            ),
        )
    )
    result.notes.append(
        "In view: the turn is kept word for word in the prompt or recalled in full "
        "(a recalled message cut to fit is not counted); the summary does not count. "
        "Counts use the reference model's tokenizer and the chat preset at each limit "
        "(LoCoMo) or the recall part's preset (synthetic, limit 512). Each LoCoMo "
        "question is asked after its whole conversation; speaker_a is the user, the "
        "other speaker the replies, each turn prefixed with its speaker's name."
    )
    return result
