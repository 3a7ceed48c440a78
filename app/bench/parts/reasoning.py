"""Reasoning in the KV cache: cut after each answer vs today's re-prefill vs kept.

The reference model thinks (`<think>` … `</think>`, docs/reference-model.md), so this
part runs on it, on an engine of its own, whatever ``--model`` the run measures. One
seeded conversation — five facts told and acknowledged (stored, not generated), then
``reasoning_turns`` questions about them with thinking on — runs three times through
the product's own `ConversationSession` (a real store, 16-bit KV, greedy):

* **cut**: today's product: after each answer the reasoning is spliced out of the
  cache, so the cache is what the template renders for the history;
* **re-prefill**: the path before the cut (`align_cache` skipped): the reasoning stays
  in the cache, the template drops it from the next prompt, and the next turn
  re-prefills from where they part (the previous answer);
* **kept**: the template keeps every old thought (``preserve_thinking``, as Qwen3.8's
  does; the preset's ``keep_past_reasoning``): nothing is cut, the prompt stays a
  prefix of the cache, every thought stays in the KV.

The model folder is a scratch copy of the reference model whose template gains a
``preserve_thinking`` switch (one condition widened by ``or preserve_thinking is
true``; the cut and re-prefill modes pass it false, so they render as the committed
template does). Per turn: prompt tokens
prefilled, the history tokens reused (the prompt's part before the new user message),
TTFT, KV bytes and tokens after the turn (after the cut), the cut's time. "Answers
alone" is the cut conversation's history without any reasoning, prefilled on a fresh
cache: the KV the conversation would hold had the model never thought.
"""

from __future__ import annotations

import contextlib
import json
import random
import statistics
from collections.abc import Iterator
from pathlib import Path

from app.bench.context import BenchContext
from app.bench.results import NotAvailable, PartResult, Row, yes_no
from app.bench.settings import TARGETS

NAME = "reasoning"
TITLE = "Reasoning in the KV cache: cut vs re-prefill vs kept (reference model)"
MODES = ("cut", "reprefill", "kept")
MODE_LABELS = {
    "cut": "reasoning cut from the cache",
    "reprefill": "re-prefill (before the cut)",
    "kept": "reasoning kept (preserve_thinking)",
}
REUSE_KEY = "reasoning_history_reused"
KV_KEY = "reasoning_kv_vs_answers_alone"
FACTS = 5
SYSTEM_PROMPT = "You are a helpful assistant."
# The committed template shows reasoning only after the last user question; the
# variant adds a switch that keeps it everywhere (Qwen3.8's ``preserve_thinking``).
_SHOWN = (
    "{%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}"
)
_SHOWN_OR_KEPT = (
    "{%- if (loop.index0 > ns.last_query_index or preserve_thinking is true)"
    " and (loop.last or reasoning_content) %}"
)


def available(ctx: BenchContext) -> str | None:
    """Available when the committed reference model is in this installation."""
    from app.bench.parts.fidelity import available as fidelity_available

    return fidelity_available(ctx)


def run(ctx: BenchContext) -> PartResult:
    """Run the conversation in each mode, then measure its answers alone."""
    from app.bench.context import make_engine
    from app.core.store import Store

    if ctx.scratch is None and ctx.out_dir is None:
        raise NotAvailable("no scratch folder for the reference model")
    scratch = Path(ctx.scratch or ctx.out_dir) / "reasoning"
    folder = _model_with_switch(scratch / "reference-model")
    engine = make_engine(scratch)
    engine.load(folder)
    try:
        if not engine.tokenizer.reasoning.has_reasoning:
            raise NotAvailable("the reference model in this build does not reason")
        modes, alone = {}, {}
        for mode in MODES:
            store = Store.open(scratch / f"{mode}.db")
            try:
                modes[mode], alone[mode] = _conversation(ctx, engine, store, mode)
            finally:
                store.close()
            ctx.log(
                f"  reasoning: {mode} {len(modes[mode])} turns, "
                f"{modes[mode][-1]['kv_tokens']} tokens in the KV"
            )
    finally:
        engine.shutdown()
    return _result(ctx, modes, alone)


def _model_with_switch(folder: Path) -> Path:
    """A scratch copy of the reference model whose template has ``preserve_thinking``."""
    from app.core.modelkit.reference.install import install_reference_model

    if not folder.exists():
        install_reference_model(folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    template = config["chat_template"]
    if "preserve_thinking" not in template:
        if _SHOWN not in template:
            raise NotAvailable(
                "the reference model's template changed: its reasoning condition "
                "was not found, so the kept mode cannot be built"
            )
        config["chat_template"] = template.replace(_SHOWN, _SHOWN_OR_KEPT)
        config_path.write_text(json.dumps(config, indent=2))
    return folder


def _questions(count: int) -> tuple[list[dict], list[str]]:
    """The stored opening (five facts, acknowledged) and ``count`` questions."""
    from app.core.quality import recall_tasks as tasks

    rng = random.Random("reasoning-bench")
    facts: list[tuple[str, str, str]] = []
    for _ in range(FACTS):
        subject, question, value = tasks.fact(rng, exclude=tuple(f[0] for f in facts))
        facts.append((subject, question, value))
    opening = [m for s, _, v in facts for m in tasks.fact_turns(s, v)]
    return opening, [facts[i % FACTS][1] for i in range(count)]


def _preset(ctx: BenchContext, mode: str):
    from app.core.presets.presets import get_preset

    s = ctx.settings
    return get_preset("chat").with_changes(
        system_prompt=SYSTEM_PROMPT,
        max_context=4096,
        max_tokens=s.reasoning_max_tokens,
        temperature=0.0,
        kv_bits=16,
        thinking=True,
        thinking_budget=s.reasoning_budget,
        keep_past_reasoning=mode == "kept",
    )


def _conversation(ctx, engine, store, mode: str) -> tuple[list[dict], dict]:
    """Run the questions in ``mode``: one row per turn, and its answers alone."""
    from app.core.chat.conversation_session import ConversationSession
    from app.core.reasoning.history import NEXT_TURN_PLACEHOLDER

    preset = _preset(ctx, mode)
    thinking = preset.thinking_settings()
    session = ConversationSession.start(engine, store, preset, model="reference")
    opening, questions = _questions(ctx.settings.reasoning_turns)
    for message in opening:
        store.add_message(session.conversation_id, message["role"], message["content"])
    engine.drop_cache(session.cache_key)
    turns = []
    for question in questions:
        history = engine.render(
            session.model_messages(session.context(), NEXT_TURN_PLACEHOLDER),
            False,
            thinking=thinking,
        )
        prompt = engine.render(
            session.model_messages(session.context(), question), thinking=thinking
        )
        with _cut_skipped(mode == "reprefill"):
            report = session.send(question).wait()
        state = engine.cache_state(session.cache_key)
        history_tokens = _common(history, prompt)
        turns.append(
            {
                "prompt_tokens": report.prompt_tokens,
                "history_tokens": history_tokens,
                "reused_tokens": report.reused_tokens,
                "prefill_tokens": report.new_tokens,
                "reused_of_history": (
                    min(report.reused_tokens, history_tokens) / history_tokens
                    if history_tokens
                    else 0.0
                ),
                "ttft_s": report.ttft_s,
                "generated_tokens": report.generated_tokens,
                "reasoning_tokens": report.reasoning_tokens,
                "reasoning_forced_end": report.reasoning_forced_end,
                "finish_reason": report.finish_reason,
                "cut_method": report.reasoning_cut_method,
                "cut_tokens": report.reasoning_cut_tokens,
                "cut_ms": report.reasoning_cut_ms,
                "kv_tokens": state.tokens,
                "kv_bytes": state.kv_bytes,
            }
        )
    # The same history, every reply without its reasoning: what the KV would hold had
    # the model never thought (the template's own rendering up to the next user
    # message's text, prefilled on a fresh key).
    answers = [
        {k: v for k, v in m.items() if k != "reasoning_content"}
        for m in session.model_messages(session.context(), NEXT_TURN_PLACEHOLDER)
    ]
    plain = engine.render(answers, False, thinking=thinking)
    other = [*answers[:-1], {"role": "user", "content": "?"}]
    ids = plain[: _common(plain, engine.render(other, False, thinking=thinking))]
    alone_key = f"bench-reasoning-alone-{mode}"
    engine.drop_cache(alone_key)
    engine.prefill(alone_key, ids, preset.kv_settings())
    alone_state = engine.cache_state(alone_key)
    alone = {"tokens": alone_state.tokens, "kv_bytes": alone_state.kv_bytes}
    engine.drop_cache(alone_key)
    engine.drop_cache(session.cache_key)
    return turns, alone


@contextlib.contextmanager
def _cut_skipped(skip: bool) -> Iterator[None]:
    """While ``skip``, the session leaves the reasoning in the cache (before the cut)."""
    # The turn's tool loop (`tool_loop`) is where a finished reply's cache is aligned.
    from app.core.chat import tool_loop

    if not skip:
        yield
        return
    saved = tool_loop.align_cache

    def uncut(engine, key, messages, report, thinking):
        return report

    tool_loop.align_cache = uncut
    try:
        yield
    finally:
        tool_loop.align_cache = saved


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _result(ctx: BenchContext, modes: dict, alone: dict) -> PartResult:
    result = PartResult()
    later = {mode: turns[1:] for mode, turns in modes.items()}
    summary = {}
    for mode, turns in modes.items():
        rest = later[mode]
        summary[mode] = {
            "prefill_tokens_total": sum(t["prefill_tokens"] for t in turns),
            "prefill_tokens_from_turn_2": sum(t["prefill_tokens"] for t in rest),
            "reused_of_history_min_from_turn_2": min(
                (t["reused_of_history"] for t in rest), default=0.0
            ),
            "ttft_s_median_from_turn_2": _median([t["ttft_s"] for t in rest]),
            "kv_bytes_last": turns[-1]["kv_bytes"],
            "kv_tokens_last": turns[-1]["kv_tokens"],
            # Tokens, not the bytes `cache_state` reports: a cache that grew holds
            # whole 256-token steps, a spliced one exactly what it keeps; at one
            # precision the bytes per token are the same.
            "kv_vs_answers_alone": turns[-1]["kv_tokens"] / alone[mode]["tokens"],
            # What this conversation's cache would hold had nothing been cut.
            "kv_tokens_uncut": turns[-1]["kv_tokens"]
            + sum(t["cut_tokens"] for t in turns),
            "cut_ms_median": _median([t["cut_ms"] for t in turns]),
            "reasoning_tokens_total": sum(t["reasoning_tokens"] for t in turns),
            "turns_with_reasoning": sum(t["reasoning_tokens"] > 2 for t in turns),
        }
    cut = summary["cut"]
    reuse = cut["reused_of_history_min_from_turn_2"]
    kv_ratio = cut["kv_vs_answers_alone"]
    result.figures = {
        "turns": ctx.settings.reasoning_turns,
        "max_tokens": ctx.settings.reasoning_max_tokens,
        "thinking_budget": ctx.settings.reasoning_budget,
        "modes": modes,
        "answers_alone": alone,
        "summary": summary,
    }
    result.ratios[REUSE_KEY] = reuse
    result.ratios[KV_KEY] = kv_ratio
    result.ratios["reasoning_prefill_reprefill_vs_cut"] = summary["reprefill"][
        "prefill_tokens_from_turn_2"
    ] / max(cut["prefill_tokens_from_turn_2"], 1)
    result.ratios["reasoning_kv_kept_vs_cut"] = (
        summary["kept"]["kv_tokens_last"] / cut["kv_tokens_last"]
    )
    result.ratios["reasoning_kv_uncut_vs_cut"] = (
        cut["kv_tokens_uncut"] / cut["kv_tokens_last"]
    )
    result.targets_met[REUSE_KEY] = TARGETS[REUSE_KEY].holds(reuse)
    result.targets_met[KV_KEY] = TARGETS[KV_KEY].holds(kv_ratio)
    turns = ctx.settings.reasoning_turns
    result.rows = [
        Row(
            "history reused from turn 2 on (least of the turns), reasoning cut",
            f"{reuse:.3f}",
            target=TARGETS[REUSE_KEY].text(),
            held=yes_no(result.targets_met[REUSE_KEY]),
        ),
        Row(
            f"KV tokens after {turns} turns ÷ answers alone, reasoning cut",
            f"{kv_ratio:.3f}",
            target=TARGETS[KV_KEY].text(),
            held=yes_no(result.targets_met[KV_KEY]),
        ),
    ]
    for mode in MODES:
        row = summary[mode]
        result.rows.append(
            Row(
                f"{MODE_LABELS[mode]}: prefill tokens turns 2-{turns} / history "
                f"reused (least) / median TTFT / KV tokens after {turns} turns "
                f"(÷ answers alone; MiB held) / median cut / reasoning tokens",
                f"{row['prefill_tokens_from_turn_2']} / "
                f"{row['reused_of_history_min_from_turn_2']:.3f} / "
                f"{row['ttft_s_median_from_turn_2'] * 1000:.0f} ms / "
                f"{row['kv_tokens_last']} ({row['kv_vs_answers_alone']:.2f}×; "
                f"{row['kv_bytes_last'] / 2**20:.2f} MiB) / "
                f"{row['cut_ms_median']:.2f} ms / {row['reasoning_tokens_total']}",
            )
        )
    result.rows.append(
        Row(
            f"the cut conversation's KV tokens had nothing been cut ÷ cut, "
            f"{turns} turns",
            f"{result.ratios['reasoning_kv_uncut_vs_cut']:.2f}",
        )
    )
    result.notes.append(
        "On the reference model (3.7M parameters; its reasoning is formulaic), 16-bit "
        "KV, greedy; per-turn rows are in results.json under `reasoning.figures.modes`. "
        "Each mode is its own greedy conversation: a model that sees its old thoughts "
        "(kept) may think differently, so compare the reasoning tokens column too; "
        "'had nothing been cut' adds the cut's spans back to the cut conversation."
    )
    return result
