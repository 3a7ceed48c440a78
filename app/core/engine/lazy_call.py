"""Well-formed calls under ``tool_choice: "auto"``: a grammar that waits for its trigger.

Under ``auto`` the model decides whether to call a tool, so its text stays free. But
once it has written its format's start marker (``<tool_call>``, or harmony's
``to=functions.``) it has decided, and what follows can only be a call: from there the
rest of the call — a name among the offered tools, arguments valid against that
tool's schema, the end marker — is constrained by llguidance (`grammar.lazy_call_grammar`),
the way llama.cpp's lazy grammars are triggered by a model's own call opening. A small
model's calls then always parse; text before the marker and after the call is free.

`LazyCallProcessor` is an mlx-lm logits processor with three states:

- ``free``: nothing is masked; each new answer token's bytes are appended to a short
  tail that is searched for the start marker (so a marker written as one special token
  or as several pieces of text both trigger, as the call splitter reads both);
- ``call``: the matcher's mask applies; when it accepts (the end marker), the call is
  done and the state goes back to ``free`` — or to ``spent`` when the reply may hold no
  more calls (``parallel_tool_calls: false``);
- ``spent``: a start marker that is one token is banned (a further call would only be
  dropped); otherwise free.

Reasoning is never constrained: for ``<think>``-style models a `ReasoningSplitter`
says whether a token is reasoning. A prompt that already ends with the start marker
(an assistant turn prefilled with it) starts in ``call``. A thinking budget that ends
the reasoning restarts mlx-lm's token list; the processor then stops looking for
reasoning (what follows the forced end marker is the answer).
"""

from __future__ import annotations

from collections.abc import Sequence

import llguidance
import mlx.core as mx
import numpy as np

from app.core.engine.reasoning_stream import ReasoningSplitter
from app.core.reasoning.markers import ReasoningFormat
from app.core.tools.grammar import Marker
from app.core.turn.parts import REASONING

FREE, CALL, SPENT = "free", "call", "spent"
# Bytes of answer text kept beyond the marker's length while looking for it.
TAIL_SLACK = 64


class LazyCallProcessor:
    """Free decoding until the start marker; then the call is constrained.

    Args:
        lltok: The loaded model's llguidance tokenizer.
        grammar: The grammar of what follows the start marker.
        start: The start marker.
        vocab_size: The tokenizer's vocabulary (logits rows beyond it are forbidden
            while constrained).
        reasoning: The model's reasoning format (``think`` style is followed).
        prompt_ids: The turn's prompt (its end may open reasoning or a call).
        max_calls: Calls the reply may hold (None: any number; 0: none at all).

    Attributes:
        state: ``free``, ``call`` or ``spent``.
        calls: Calls completed under the grammar.
        abandoned: Calls whose text left the grammar (e.g. tokens written by the
            engine itself); they are left to the call splitter.
    """

    def __init__(
        self,
        lltok: llguidance.LLTokenizer,
        grammar: str,
        start: Marker,
        *,
        vocab_size: int,
        reasoning: ReasoningFormat,
        prompt_ids: Sequence[int] = (),
        max_calls: int | None = None,
    ):
        self._lltok = lltok
        self._matcher = llguidance.LLMatcher(lltok, grammar)
        if self._matcher.is_error():
            raise ValueError(f"the call grammar failed: {self._matcher.get_error()}")
        self._vocab = vocab_size
        self._words = np.zeros((vocab_size + 31) // 32, dtype=np.int32)
        self._start = start
        self._marker = start.text.encode("utf-8")
        self._splitter: ReasoningSplitter | None = (
            ReasoningSplitter(reasoning, prompt_ids)
            if reasoning.style == "think"
            else None
        )
        self._max_calls = max_calls
        self._tail = b""
        self._seen: int | None = None
        self._ban: mx.array | None = None
        self.calls = 0
        self.abandoned = 0
        self.state = SPENT if max_calls == 0 else FREE
        if self.state == FREE and self._ends_with_marker(prompt_ids):
            self.state = CALL

    def _ends_with_marker(self, prompt_ids: Sequence[int]) -> bool:
        if not prompt_ids:
            return False
        if self._start.token_id is not None:
            return prompt_ids[-1] == self._start.token_id
        tail = self._lltok.decode_bytes(list(prompt_ids[-len(self._marker) :]))
        return tail.endswith(self._marker)

    # -- the state machine (no MLX) ---------------------------------------------------

    def feed(self, token: int) -> None:
        """Take one generated token."""
        if self.state == CALL:
            self._feed_call(token)
            return
        if self._splitter is not None:
            self._splitter.feed(token)
            if self._splitter.state == REASONING:
                self._tail = b""
                return
        self._tail = (self._tail + self._lltok.decode_bytes([token]))[
            -(len(self._marker) + TAIL_SLACK) :
        ]
        at = self._tail.find(self._marker)
        if at < 0 or self.state != FREE:
            return
        rest = self._tail[at + len(self._marker) :]
        self._tail = b""
        self.state = CALL
        # The token that completed the marker may hold the call's first bytes.
        for piece in self._lltok.tokenize_bytes(rest) if rest else []:
            self._feed_call(piece)
            if self.state != CALL:
                break

    def _feed_call(self, token: int) -> None:
        if not self._matcher.consume_token(token) or self._matcher.is_error():
            # Outside the grammar (not sampled under its mask): give the call up and
            # let the call splitter judge the text.
            self.abandoned += 1
            self._end_call()
            return
        if self._matcher.is_accepting():
            self.calls += 1
            self._end_call()

    def _end_call(self) -> None:
        self._matcher.reset()
        self._tail = b""
        done = self._max_calls is not None and self.calls >= self._max_calls
        self.state = SPENT if done else FREE

    def fill_mask(self) -> np.ndarray:
        """The allowed tokens while in ``call`` (a bool per vocabulary entry)."""
        self._matcher.unsafe_compute_mask_ptr(
            self._words.ctypes.data, self._words.nbytes
        )
        bits = np.unpackbits(self._words.view(np.uint8), bitorder="little")
        return bits[: self._vocab].astype(bool)

    # -- the logits processor ---------------------------------------------------------

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self._seen is None or tokens.size <= self._seen:
            # The first call (its one prompt token), or a restart after a thinking
            # budget wrote the reasoning's end: from there on it is the answer.
            if self._seen is not None:
                self._splitter = None
            self._seen = tokens.size
        else:
            new = np.asarray(tokens[self._seen :], dtype=np.int64).tolist()
            self._seen = tokens.size
            for token in new:
                self.feed(token)
        if self.state == CALL:
            width = logits.shape[-1]
            allowed = np.zeros(width, dtype=bool)
            count = min(width, self._vocab)
            allowed[:count] = self.fill_mask()[:count]
            return mx.where(mx.array(allowed), logits, mx.array(-np.inf, logits.dtype))
        if self.state == SPENT and self._start.token_id is not None:
            if self._ban is None:
                ban = np.zeros(logits.shape[-1], dtype=np.float32)
                ban[self._start.token_id] = -np.inf
                self._ban = mx.array(ban)
            return logits + self._ban.astype(logits.dtype)
        return logits


class MarkerBan:
    """An mlx-lm logits processor that forbids one token: a call's start marker under
    ``tool_choice: "none"`` (no call may come back).

    Args:
        token_id: The marker's token.
    """

    def __init__(self, token_id: int):
        self.token_id = token_id
        self._ban: mx.array | None = None

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self._ban is None or self._ban.shape[-1] != logits.shape[-1]:
            ban = np.zeros(logits.shape[-1], dtype=np.float32)
            ban[self.token_id] = -np.inf
            self._ban = mx.array(ban)
        return logits + self._ban.astype(logits.dtype)
