"""Structured output and tools: what constraining costs, and what tools cost in KV.

Three figures (issue #25, point 6):

- **Decode speed with a JSON schema ÷ free decoding**, same prompt, same number of
  tokens, sampling at temperature 1 (random weights would otherwise stop at once).
  The schema is one unbounded string property, so both sides decode the full count.
  Pairs run A B, B A, …; the ratio is the median over pairs (target ≥ 0.9).
- **Grammar compile time for a 20-tool set** the size of a coding agent's (each tool
  with a few KB of description and 4–8 typed parameters), as a forced call compiles
  it: the llguidance matcher built on the loaded model's tokenizer.
- **Decode speed inside a call the model opened itself ÷ free decoding** (the lazy
  grammar under ``tool_choice: "auto"``): the same prompt — tools rendered, the call's
  start marker at its end, as if the model had just written it — decoded free and
  with the lazy call grammar, which is then constrained from the first token (one
  tool with an unbounded string argument, so the call lasts the full count).
- **First-token latency with those 20 tools**: cold (nothing cached: a fresh nonce in
  the system turn) vs warm (another conversation with the same definitions, reused
  from the prefix cache). The definitions go in as the generic rendering (JSON in the
  system turn) when the bench model's template has no tool support.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from app.bench.context import SYSTEM_PROMPT, BenchContext
from app.bench.results import PartResult, Row, yes_no
from app.bench.settings import TARGETS
from app.bench.stats import pair_ratios, spread_text, summarize
from app.core.engine.events import GenerationEvent
from app.core.presets.generation_settings import KVSettings, SamplingSettings
from app.core.tools.grammar import Marker, tool_call_grammar
from app.core.tools.tool_specs import ToolChoice, parse_tools
from app.core.tools.turn_tools import TurnTools

NAME = "structured"
TITLE = "Structured output and tools: decode cost, compile time, tool-prefix reuse"
RATIO_KEY = "structured_vs_free"
LAZY_KEY = "lazy_call_vs_free"
# The lazy measurement's one tool: its argument never ends, so neither does the call.
NOTE_TOOL = {
    "type": "function",
    "function": {
        "name": "write_note",
        "description": "Write a note.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
}
TOOL_COUNT = 20
# Sentences of description per tool: ~700 characters, about what a coding agent sends.
DESCRIPTION_REPEATS = 20
SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
}


def available(ctx: BenchContext) -> str | None:
    """Always available (the constraint needs no tool template)."""
    return None


def agent_tools(count: int = TOOL_COUNT) -> list[dict]:
    """A coding agent's tool set: long descriptions, several typed parameters."""
    tools = []
    for i in range(count):
        properties: dict = {
            "path": {"type": "string", "description": "Absolute path of the file."},
            "mode": {"enum": ["read", "write", "append", "list"]},
            "limit": {"type": "integer", "minimum": 1, "maximum": 10_000},
            "pattern": {"type": "string", "description": "A glob or regex."},
        }
        for extra in range(i % 5):
            properties[f"option_{extra}"] = {
                "type": "array",
                "items": {"type": "string"},
                "maxItems": 16,
            }
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": f"tool_{i:02d}",
                    "description": (
                        f"Tool number {i}. "
                        + "Use it carefully and read the notes. " * DESCRIPTION_REPEATS
                    ),
                    "parameters": {
                        "type": "object",
                        "properties": properties,
                        "required": ["path", "mode"],
                        "additionalProperties": False,
                    },
                },
            }
        )
    return tools


def _decode(ctx: BenchContext, messages, tokens: int, tools) -> float:
    engine: Any = ctx.engine  # BenchContext types it loosely
    engine.drop_cache("bench-structured")
    sampling = SamplingSettings(temperature=1.0, top_p=1.0, max_tokens=tokens, seed=0)
    handle = engine.chat(
        "bench-structured", messages, KVSettings(), sampling, tools=tools
    )
    rate = _tokens_per_s(handle)
    engine.drop_cache("bench-structured")
    return rate


def _decode_ids(ctx: BenchContext, prompt_ids: list[int], tokens: int, tools) -> float:
    """Decode tok/s of ``tokens`` tokens after ``prompt_ids`` (tools: the turn's)."""
    engine: Any = ctx.engine  # BenchContext types it loosely
    engine.drop_cache("bench-lazy")
    sampling = SamplingSettings(temperature=1.0, top_p=1.0, max_tokens=tokens, seed=0)
    handle = engine.generate(
        "bench-lazy", prompt_ids, KVSettings(), sampling, tools=tools
    )
    rate = _tokens_per_s(handle)
    engine.drop_cache("bench-lazy")
    return rate


def _tokens_per_s(handle) -> float:
    """Tokens a second between the first and the last token ``handle`` streams."""
    times = []
    for event in handle:
        if isinstance(event, GenerationEvent) and not event.finished:
            times.append(time.perf_counter())
    if len(times) < 2 or times[-1] <= times[0]:
        return 0.0
    return (len(times) - 1) / (times[-1] - times[0])


def _opened_call_prompt(ctx: BenchContext, messages, native: bool) -> list[int]:
    """The prompt with the note tool offered and its call's start marker at the end."""
    from app.server.service.tool_prompt import fold_tools

    engine: Any = ctx.engine  # BenchContext types it loosely
    specs = parse_tools([NOTE_TOOL])
    if native:
        ids = engine.render(messages, True, [spec.template_dict() for spec in specs])
    else:
        ids = engine.render(fold_tools(messages, specs), True)
    start = engine.tool_call_format().start
    tokenizer = ctx.loaded_model().tokenizer
    return list(ids) + list(tokenizer.encode(start, add_special_tokens=False))


def _lazy_ratio(ctx: BenchContext, messages, tokens: int, native: bool):
    """(lazy tok/s runs, free tok/s runs) on the same opened-call prompt, paired."""
    s = ctx.settings
    prompt_ids = _opened_call_prompt(ctx, messages, native)
    turn = TurnTools(parse_tools([NOTE_TOOL]), ToolChoice("auto"))
    _decode_ids(ctx, prompt_ids, tokens, turn)  # untimed: compiles and warms
    lazy_tps: list[float] = []
    free_tps: list[float] = []
    for pair in range(s.overhead_pairs):
        order = [(lazy_tps, turn), (free_tps, None)]
        for runs, tools in order if pair % 2 == 0 else reversed(order):
            runs.append(_decode_ids(ctx, prompt_ids, tokens, tools))
    return lazy_tps, free_tps


def _compile_seconds(ctx: BenchContext, specs) -> tuple[float, float]:
    """(seconds to build the llguidance tokenizer once, seconds to compile)."""
    import llguidance

    from app.core.engine.tool_hooks import ll_tokenizer

    tokenizer = ctx.loaded_model().tokenizer
    started = time.perf_counter()
    lltok = ll_tokenizer(tokenizer)
    tokenizer_s = time.perf_counter() - started
    started = time.perf_counter()
    grammar = tool_call_grammar(
        specs,
        ToolChoice("required"),
        start=Marker("<tool_call>"),
        end=Marker("</tool_call>"),
        parallel=True,
    )
    matcher = llguidance.LLMatcher(lltok, grammar)
    mask = matcher.compute_bitmask()  # the first mask finishes the lazy compile
    compile_s = time.perf_counter() - started
    if matcher.is_error() or not mask:
        raise RuntimeError(
            f"the {len(specs)}-tool grammar failed: {matcher.get_error()}"
        )
    return tokenizer_s, compile_s


def _ttft(ctx: BenchContext, system: str, user: str, tools) -> tuple[float, int, int]:
    engine: Any = ctx.engine  # BenchContext types it loosely
    key = f"bench-tools-{uuid.uuid4().hex[:8]}"
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]
    sampling = SamplingSettings(temperature=0.0, top_p=1.0, max_tokens=1, seed=0)
    final = engine.chat(key, messages, KVSettings(), sampling, tools=tools).wait()
    engine.drop_cache(key)
    return final.ttft_s, final.prompt_tokens, final.reused_tokens


def run(ctx: BenchContext) -> PartResult:
    """Measure the schema/free decode ratio, the compile time and tool-prefix reuse."""
    s = ctx.settings
    engine: Any = ctx.engine  # BenchContext types it loosely
    tokens = max(s.overhead_decode_tokens, 16)
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": ctx.filler(min(s.overhead_prompt_tokens, 512))},
    ]
    # First, while the model's llguidance tokenizer is not built yet: its build is
    # timed here once.
    raw_tools = agent_tools(s.structured_tools)
    specs = parse_tools(raw_tools)
    tokenizer_s, compile_s = _compile_seconds(ctx, specs)
    constrained = TurnTools(response_schema=SCHEMA)
    _decode(ctx, messages, tokens, constrained)  # untimed: compiles and warms
    _decode(ctx, messages, tokens, None)
    schema_tps: list[float] = []
    free_tps: list[float] = []
    for pair in range(s.overhead_pairs):
        order = [(schema_tps, constrained), (free_tps, None)]
        for runs, tools in order if pair % 2 == 0 else reversed(order):
            runs.append(_decode(ctx, messages, tokens, tools))
    ratios = summarize(pair_ratios(schema_tps, free_tps))
    met = TARGETS[RATIO_KEY].holds(ratios["median"])

    native = engine.supports_tools()
    lazy_tps, lazy_free_tps = _lazy_ratio(ctx, messages, tokens, native)
    lazy = summarize(pair_ratios(lazy_tps, lazy_free_tps))
    lazy_met = TARGETS[LAZY_KEY].holds(lazy["median"])
    turn = TurnTools(specs, ToolChoice("auto")) if native else None
    definitions = (
        "" if native else "\n\n# Tools\n" + "\n".join(json.dumps(t) for t in raw_tools)
    )
    nonce = uuid.uuid4().hex
    system = f"{SYSTEM_PROMPT} [{nonce}]{definitions}"
    cold_s, prompt_tokens, _ = _ttft(ctx, system, "List the files.", turn)
    warm_s, _, warm_reused = _ttft(ctx, system, "Read the README, please.", turn)

    result = PartResult()
    result.figures = {
        "decode_tokens": tokens,
        "schema_decode_tps": summarize(schema_tps),
        "free_decode_tps": summarize(free_tps),
        "ratio": ratios,
        "lazy_call_decode_tps": summarize(lazy_tps),
        "lazy_free_decode_tps": summarize(lazy_free_tps),
        "lazy_ratio": lazy,
        "tools": len(raw_tools),
        "tools_json_bytes": len(json.dumps(raw_tools)),
        "ll_tokenizer_s": tokenizer_s,
        "tool_grammar_compile_s": compile_s,
        "tools_rendering": "template" if native else "generic (JSON in system turn)",
        "tools_prompt_tokens": prompt_tokens,
        "tools_ttft_cold_s": cold_s,
        "tools_ttft_warm_s": warm_s,
        "tools_warm_reused_tokens": warm_reused,
    }
    result.ratios[RATIO_KEY] = ratios["median"]
    result.ratio_stats[RATIO_KEY] = ratios
    result.targets_met[RATIO_KEY] = met
    result.ratios[LAZY_KEY] = lazy["median"]
    result.ratio_stats[LAZY_KEY] = lazy
    result.targets_met[LAZY_KEY] = lazy_met
    result.rows = [
        Row(
            f"Decode tok/s with a JSON schema ÷ free ({tokens} tokens)",
            f"{ratios['median']:.3f}",
            spread_text(ratios, 3),
            TARGETS[RATIO_KEY].text(),
            yes_no(met),
        ),
        Row(
            f"Decode tok/s inside a call the model opened (lazy grammar, auto) ÷ "
            f"free ({tokens} tokens)",
            f"{lazy['median']:.3f}",
            spread_text(lazy, 3),
            TARGETS[LAZY_KEY].text(),
            yes_no(lazy_met),
        ),
        Row(
            f"Grammar compile, {len(raw_tools)} tools ({len(json.dumps(raw_tools)):,} "
            "bytes), forced call",
            f"{compile_s * 1000:.1f} ms",
        ),
        Row(
            "llguidance tokenizer build (once per model)",
            f"{tokenizer_s:.2f} s",
        ),
        Row(
            f"First token with {len(raw_tools)} tools ({prompt_tokens} prompt tokens, "
            f"{warm_reused} reused): "
            "warm ÷ cold",
            f"{warm_s / cold_s:.3f}" if cold_s > 0 else "—",
            f"{warm_s:.2f} s / {cold_s:.2f} s",
        ),
    ]
    if not native:
        result.notes.append(
            "The bench model's template has no tool support: the 20 definitions were "
            "put in the system turn as JSON, which costs the same KV."
        )
    return result
