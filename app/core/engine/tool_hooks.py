"""The engine's side of tool calls and structured output: two small hooks on a turn.

`TurnHooks.build` reads from the loaded tokenizer (mlx-lm's ``TokenizerWrapper``)
how the model writes calls — its parser and markers, which mlx-lm infers from the
chat template and vocabulary — and returns:

- ``logits_processors``: an llguidance matcher applied as an mlx-lm logits processor,
  so every sampled token keeps the reply inside the grammar (a JSON schema, any JSON
  object, or a forced call);
- ``wrap(emit)``: a filter on the turn's events that takes calls out of the answer
  text (`app.core.tools.call_stream`) and emits them as tool-call events.

`app.core.engine.generation` only passes the processors to the decode loop
(`decode_steps`); everything else about tools stays here and in `app.core.tools`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import llguidance
import mlx.core as mx
import numpy as np

from app.core.engine.events import GenerationEvent
from app.core.engine.lazy_call import LazyCallProcessor, MarkerBan
from app.core.reasoning.markers import (
    NO_REASONING,
    ReasoningFormat,
    prompt_opens_reasoning,
)
from app.core.tools.call_stream import CONSTRAINED_FORMATS, CallStream
from app.core.tools.grammar import (
    HarmonyMarkers,
    harmony_call_grammar,
    harmony_forced_grammar,
    json_object_grammar,
    json_schema_grammar,
)
from app.core.tools.markup_grammars import forced_call_grammar, lazy_markup_grammar
from app.core.tools.model_format import call_format_or_generic, marker
from app.core.tools.tool_specs import ToolInputError
from app.core.tools.turn_tools import TurnTools
from app.core.turn.parts import REASONING

_LOCK = threading.Lock()
# (tokenizer object id, its llguidance tokenizer): building one takes ~1 s at a 150K
# vocabulary, so it is kept for the loaded model.
_LL_TOKENIZER: list[tuple[Any, llguidance.LLTokenizer]] = []


def ll_tokenizer(tokenizer: Any) -> llguidance.LLTokenizer:
    """The llguidance tokenizer of a loaded model's tokenizer (built once)."""
    with _LOCK:
        for owner, built in _LL_TOKENIZER:
            if owner is tokenizer:
                return built
        backend = tokenizer.backend_tokenizer
        copy = type(backend).from_str(backend.to_str())
        copy.no_padding()
        copy.no_truncation()
        built = llguidance.LLTokenizer(
            copy.to_str(), eos_token=sorted(tokenizer.eos_token_ids)
        )
        _LL_TOKENIZER[:] = [(tokenizer, built)]
        return built


class GrammarProcessor:
    """An mlx-lm logits processor that masks every token the grammar forbids.

    The decode loop (`decode_steps`, as mlx-lm's ``generate_step``) calls it with
    every token of the reply so far (after the one prompt token it was given) and the
    next logits; it feeds the new tokens to the matcher and sets the forbidden logits
    to -inf.

    Args:
        matcher: A fresh llguidance matcher.
        vocab_size: The tokenizer's vocabulary; logits rows beyond it are forbidden.
    """

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int):
        self._matcher = matcher
        self._vocab = vocab_size
        self._words = np.zeros((vocab_size + 31) // 32, dtype=np.int32)
        self._seen: int | None = None

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self._seen is None:
            self._seen = tokens.size
        elif tokens.size > self._seen:
            new = np.asarray(tokens[self._seen :], dtype=np.int64).tolist()
            self._seen = tokens.size
            for token in new:
                self._matcher.consume_token(token)
        if self._matcher.is_error():
            raise RuntimeError(f"grammar matcher failed: {self._matcher.get_error()}")
        self._matcher.unsafe_compute_mask_ptr(
            self._words.ctypes.data, self._words.nbytes
        )
        bits = np.unpackbits(self._words.view(np.uint8), bitorder="little")
        width = logits.shape[-1]
        allowed = np.zeros(width, dtype=bool)
        count = min(width, self._vocab)
        allowed[:count] = bits[:count]
        return mx.where(mx.array(allowed), logits, mx.array(-np.inf, logits.dtype))


def grammar_for(tokenizer: Any, turn: TurnTools) -> str | None:
    """The grammar a turn is constrained by, or None.

    Raises:
        ToolInputError: A forced call on a model whose call format no grammar here
            constrains.
    """
    if turn.parses_calls and turn.choice.forces_call:
        fmt = call_format_or_generic(tokenizer)
        if fmt.name == "harmony":
            allowed = turn.choice.allowed(turn.tools)
            return harmony_forced_grammar(allowed, _harmony_markers(tokenizer))
        grammar = forced_call_grammar(
            fmt.name,
            turn.tools,
            turn.choice,
            start=marker(tokenizer, fmt.start),
            end=marker(tokenizer, fmt.end),
            parallel=turn.parallel,
            mark=lambda text: marker(tokenizer, text),
            template=str(getattr(tokenizer, "chat_template", "") or ""),
        )
        if grammar is None:
            raise ToolInputError(
                f"'tool_choice' {turn.choice.mode!r} is enforced only for models that "
                f"write calls in one of the formats {', '.join(CONSTRAINED_FORMATS)}; "
                f"this model's format is {fmt.name!r}. Use 'auto'.",
                "tool_choice",
            )
        return grammar
    if turn.response_schema is not None:
        return json_schema_grammar(turn.response_schema)
    if turn.json_object:
        return json_object_grammar()
    return None


def lazy_grammar_for(tokenizer: Any, turn: TurnTools) -> str | None:
    """The grammar of a call after its start marker under ``auto``, or None when the
    model's call format has none here (formats other than `CONSTRAINED_FORMATS` stay
    free; the call splitter still reads them)."""
    fmt = call_format_or_generic(tokenizer)
    if fmt.name == "harmony":
        return harmony_call_grammar(turn.tools, _harmony_markers(tokenizer))
    if fmt.constrained:
        return lazy_markup_grammar(
            fmt.name,
            turn.tools,
            end=marker(tokenizer, fmt.end),
            mark=lambda text: marker(tokenizer, text),
        )
    return None


def _harmony_markers(tokenizer: Any) -> HarmonyMarkers:
    constrain = marker(tokenizer, "<|constrain|>")
    return HarmonyMarkers(
        channel=marker(tokenizer, "<|channel|>"),
        message=marker(tokenizer, "<|message|>"),
        call=marker(tokenizer, "<|call|>"),
        constrain=constrain if constrain.token_id is not None else None,
    )


def call_processor(
    tokenizer: Any,
    turn: TurnTools,
    reasoning: ReasoningFormat = NO_REASONING,
    prompt_ids: list[int] | tuple[int, ...] = (),
) -> LazyCallProcessor | MarkerBan | None:
    """What keeps an unforced turn's calls in shape: under ``auto`` the lazy call
    grammar; under ``none`` a ban on a one-token start marker (the tools were not
    shown, and no call may come back); else None."""
    if not turn.tools or turn.constrained:
        return None  # a forced call or a whole-reply schema is constrained already
    fmt = call_format_or_generic(tokenizer)
    start = marker(tokenizer, fmt.start)
    if not turn.offers_tools:
        return MarkerBan(start.token_id) if start.token_id is not None else None
    grammar = lazy_grammar_for(tokenizer, turn)
    if grammar is None:
        return None
    lltok = ll_tokenizer(tokenizer)
    return LazyCallProcessor(
        lltok,
        grammar,
        start,
        vocab_size=lltok.vocab_size,
        reasoning=reasoning,
        prompt_ids=prompt_ids,
        max_calls=None if turn.parallel else 1,
    )


@dataclass
class TurnHooks:
    """The processors and the event filter of one turn.

    Attributes:
        logits_processors: For the decode loop (None when unconstrained).
        stream: The call splitter, or None when calls are not parsed.
        closes_reasoning: The reply must close a reasoning block its prompt opened
            before the grammar starts: a forced call or a JSON answer written inside
            reasoning (a template such as QwQ's, DeepSeek-R1-Distill's or Qwen3-2507
            Thinking's opens ``<think>`` in the generation prompt) would be taken as
            reasoning and never reach the answer. A constrained reply has no
            reasoning, as everywhere else.
    """

    logits_processors: list[Callable[[mx.array, mx.array], mx.array]] | None
    stream: CallStream | None
    closes_reasoning: bool = False

    @classmethod
    def build(
        cls,
        tokenizer: Any,
        turn: TurnTools,
        *,
        reasoning: ReasoningFormat = NO_REASONING,
        prompt_ids: list[int] | tuple[int, ...] = (),
    ) -> TurnHooks:
        """Make the hooks for ``turn`` on the loaded ``tokenizer``.

        Args:
            tokenizer: The loaded model's tokenizer wrapper.
            turn: What the turn asks.
            reasoning: The model's reasoning format (reasoning is never constrained).
            prompt_ids: The turn's prompt.

        Raises:
            ToolInputError: The model cannot do what the turn asks.
        """
        processors: list[Callable[[mx.array, mx.array], mx.array]] | None = None
        lazy = call_processor(tokenizer, turn, reasoning, prompt_ids)
        if lazy is not None:
            processors = [lazy]
        grammar = grammar_for(tokenizer, turn)
        if grammar is not None:
            lltok = ll_tokenizer(tokenizer)
            matcher = llguidance.LLMatcher(lltok, grammar)
            if matcher.is_error():
                raise ToolInputError(
                    f"The output constraint cannot be compiled: {matcher.get_error()}",
                    "response_format",
                )
            processors = [GrammarProcessor(matcher, lltok.vocab_size)]
            closes = prompt_opens_reasoning(reasoning, prompt_ids)
            return cls(processors, _call_stream(tokenizer, turn), closes)
        return cls(processors, _call_stream(tokenizer, turn))

    def wrap(self, emit: Callable[[object], None]) -> Callable[[object], None]:
        """An ``emit`` that sends calls as tool-call events, not as answer text."""
        stream = self.stream
        if stream is None:
            return emit

        def send(event: object) -> None:
            if not isinstance(event, GenerationEvent) or (
                getattr(event, "channel", None) == REASONING
            ):
                emit(event)
                return
            items = stream.feed(event.text)
            if event.finish_reason is not None:
                items += stream.close(cut=event.finish_reason == "length")
            texts_sent = False
            for item in items:
                if isinstance(item, str):
                    emit(replace(event, text=item, finish_reason=None))
                    texts_sent = True
                else:  # tool-call events and `MalformedCall` notes
                    emit(item)
            if event.finish_reason is not None or not texts_sent:
                emit(replace(event, text=""))

        return send


def _call_stream(tokenizer: Any, turn: TurnTools) -> CallStream | None:
    """The call splitter of a turn whose calls are parsed, else None."""
    if not turn.parses_calls:
        return None
    return CallStream(
        call_format_or_generic(tokenizer),
        turn.tools,
        max_calls=None if turn.parallel else 1,
    )
