"""``POST /v1/completions``: parse, run on the engine without a chat template, answer.

The prompt is tokenized as written (or, with a ``suffix``, framed by the model's
fill-in-the-middle tokens) and continued on one engine cache kept for completions, so
an editor's next keystroke reuses the KV of everything before it. A prompt that does
not fit is refused with the numbers before anything is allocated: there is no history
to trim.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from app.core.cancel import CancelToken
from app.core.engine.events import GenerationEvent
from app.core.presets.generation_settings import SamplingSettings
from app.server.errors import ContextLengthExceeded, RequestError
from app.server.events import Accepted, Finished, TextDelta
from app.server.openai_chat.openai_request import (
    MAX_TOKENS_LIMIT,
    parse_json_body,
)
from app.server.openai_chat.openai_response import DONE, sse
from app.server.service.stop_sequences import StopScanner

# OpenAI's default for this endpoint.
DEFAULT_MAX_TOKENS = 16
CACHE_KEY = "server-completions"
# Fill-in-the-middle token triples (prefix, suffix, middle) of the model families
# that have them: Qwen2.5-Coder / StarCoder2 / DeepSeek-style, then StarCoder 1.
FIM_TOKENS = (
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
)


@dataclass(frozen=True)
class CompletionRequest:
    """A validated completion request."""

    model: str
    prompt: str
    suffix: str | None
    stream: bool
    max_tokens: int
    temperature: float | None
    top_p: float | None
    stop: tuple[str, ...]
    seed: int | None


def _fail(message: str, param: str) -> RequestError:
    return RequestError(message, param=param)


def parse_completion_request(body: bytes) -> CompletionRequest:
    """Parse and check a ``POST /v1/completions`` body.

    Raises:
        RequestError: Naming the field and what is allowed.
    """
    data = parse_json_body(body)
    for name in ("logprobs", "echo", "best_of", "logit_bias"):
        if data.get(name) not in (None, False, 0, 1 if name == "best_of" else 0, {}):
            raise _fail(f"'{name}' is not supported; leave it out.", name)
    if data.get("n") not in (None, 1):
        raise _fail("'n' must be 1: Swapless returns one choice per request.", "n")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise _fail("'model' is required: the id of the served model.", "model")
    prompt = data.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise _fail(
            "'prompt' must be a string (one prompt per request; token ids are not "
            "supported).",
            "prompt",
        )
    suffix = data.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise _fail("'suffix' must be a string.", "suffix")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise _fail("'stream' must be true or false.", "stream")
    max_tokens = data.get("max_tokens", DEFAULT_MAX_TOKENS)
    if (
        isinstance(max_tokens, bool)
        or not isinstance(max_tokens, int)
        or not 1 <= max_tokens <= MAX_TOKENS_LIMIT
    ):
        raise _fail(
            f"'max_tokens' must be a whole number from 1 to {MAX_TOKENS_LIMIT}.",
            "max_tokens",
        )
    stop = data.get("stop")
    stops = [stop] if isinstance(stop, str) else stop or []
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise _fail("'stop' must be a string or a list of strings.", "stop")
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _fail("'seed' must be a whole number.", "seed")
    return CompletionRequest(
        model=model,
        prompt=prompt,
        suffix=suffix or None,
        stream=stream,
        max_tokens=max_tokens,
        temperature=_number(data.get("temperature"), "temperature", 2.0),
        top_p=_number(data.get("top_p"), "top_p", 1.0),
        stop=tuple(stops[:4]),
        seed=seed,
    )


def _number(value: Any, name: str, high: float) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= high
    ):
        raise _fail(f"'{name}' must be a number from 0 to {high:g}.", name)
    return float(value)


def fim_tokens(encode: Callable[[str], list[int]]) -> tuple[int, int, int] | None:
    """The model's (prefix, suffix, middle) FIM token ids, or None when it has none."""
    for triple in FIM_TOKENS:
        ids = [encode(token) for token in triple]
        if all(len(i) == 1 for i in ids):
            return ids[0][0], ids[1][0], ids[2][0]
    return None


def prompt_ids(tokenizer: Any, request: CompletionRequest) -> list[int]:
    """The token ids the model continues.

    Raises:
        RequestError: A ``suffix`` for a model without fill-in-the-middle tokens.
    """
    if request.suffix is None:
        return tokenizer.encode(request.prompt)
    fim = fim_tokens(tokenizer.encode)
    if fim is None:
        raise _fail(
            "'suffix' (fill-in-the-middle) is not available: the served model's "
            "tokenizer has no FIM tokens (such as <|fim_prefix|>). Use a code model "
            "that has them, or leave out 'suffix'.",
            "suffix",
        )
    prefix, suffix, middle = fim
    return [
        prefix,
        *tokenizer.encode(request.prompt),
        suffix,
        *tokenizer.encode(request.suffix),
        middle,
    ]


def runner(
    service: Any, request: CompletionRequest
) -> Callable[[CancelToken], Iterator]:
    """Check ``request`` against the served model now; return what runs it.

    Raises:
        RequestError: No model, another model asked for, no FIM tokens, too long.
    """
    from app.server.service.served_model import check_served_model

    engine = service.engine
    check_served_model(engine, request.model)
    ids = prompt_ids(engine.tokenizer, request)
    limit = service.effective_limit()
    if len(ids) + request.max_tokens > limit:
        raise ContextLengthExceeded(
            f"This model's maximum context length is {limit} tokens; the prompt is "
            f"{len(ids)} tokens and max_tokens {request.max_tokens}.",
            {
                "prompt_tokens": len(ids),
                "max_tokens": request.max_tokens,
                "effective_limit": limit,
            },
        )
    preset = service.preset
    sampling = SamplingSettings(
        temperature=preset.temperature
        if request.temperature is None
        else request.temperature,
        top_p=preset.top_p if request.top_p is None else request.top_p,
        max_tokens=request.max_tokens,
        seed=request.seed,
    )

    def run(cancel: CancelToken) -> Iterator:
        handle = engine.generate(
            CACHE_KEY,
            ids,
            preset.kv_settings(),
            sampling,
            max_context=limit,
            cancel=cancel,
        )
        scanner = StopScanner(request.stop)
        parts: list[str] = []
        accepted = False
        try:
            for event in handle:
                if not accepted:
                    accepted = True
                    yield Accepted(len(ids))
                if not isinstance(event, GenerationEvent) or not event.text:
                    continue
                text = scanner.feed(event.text)
                if text:
                    parts.append(text)
                    yield TextDelta(text)
                if scanner.stopped and not handle.cancelled:
                    handle.cancel()
        except BaseException:
            handle.cancel()
            raise
        tail = scanner.flush()
        if tail:
            parts.append(tail)
            yield TextDelta(tail)
        final = handle.final
        yield Finished(
            text="".join(parts),
            finish_reason="stop" if scanner.stopped else final.finish_reason,
            prompt_tokens=final.prompt_tokens,
            completion_tokens=final.generated_tokens,
            cached_tokens=final.reused_tokens,
            key=CACHE_KEY,
        )

    return run


class CompletionWriter:
    """Builds the ``text_completion`` object or its streamed chunks.

    Args:
        model: The model id.
    """

    def __init__(self, model: str):
        self.model = model
        self.ident = f"cmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())

    def _body(self, choice: dict, **extra: Any) -> dict:
        return {
            "id": self.ident,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "logprobs": None, **choice}],
            **extra,
        }

    def text(self, text: str) -> bytes:
        """A chunk of text."""
        return sse(self._body({"text": text, "finish_reason": None}))

    def finish(self, event: Finished) -> bytes:
        """The last chunk and ``[DONE]``."""
        return (
            sse(
                self._body(
                    {"text": "", "finish_reason": _reason(event)}, usage=_usage(event)
                )
            )
            + DONE
        )

    def whole(self, event: Finished) -> dict:
        """The non-streamed object."""
        return self._body(
            {"text": event.text, "finish_reason": _reason(event)}, usage=_usage(event)
        )


def _reason(event: Finished) -> str:
    return "length" if event.finish_reason == "length" else "stop"


def _usage(event: Finished) -> dict:
    return {
        "prompt_tokens": event.prompt_tokens,
        "completion_tokens": event.completion_tokens,
        "total_tokens": event.prompt_tokens + event.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": event.cached_tokens},
    }
