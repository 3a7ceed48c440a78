"""A request's prompt as the served model sees it: rendered, counted, bounded.

Tools go through the model's own template when it renders them, else into the system
turn the Qwen3 way (`tool_prompt`); ``tool_choice: "none"`` shows none
(docs/structured-output.md). A history too long to render whole is matched by its head
and counted from bounded per-message counts (`history_trim`).
"""

from __future__ import annotations

from typing import Any

from app.core.tools.turn_tools import TurnTools
from app.server.errors import RequestError
from app.server.openai_chat.client_history import ModelView
from app.server.openai_chat.openai_request import ChatRequest
from app.server.service.history_trim import (
    HistoryCounts,
    TemplateCosts,
    measure_template,
    message_texts,
)
from app.server.service.tool_paths import turn_tools_of
from app.server.service.tool_prompt import engine_takes_tools, fold_history, fold_tools


def offered(request: ChatRequest) -> bool:
    """True when the request's tools are shown to the model: ``tool_choice: "none"``
    renders the prompt without them, so the model cannot call what it was not shown
    (docs/structured-output.md)."""
    return bool(request.tools) and request.tool_choice != "none"


class RequestPrompts:
    """Renders and counts requests' prompts on one engine.

    Args:
        engine: The engine whose model is served.
    """

    def __init__(self, engine: Any):
        self.engine = engine
        self._costs: dict[str, TemplateCosts] = {}

    def templates_tools(self) -> bool:
        """True when the model's own template renders tools (else they are folded
        into the system turn the Qwen3 way, and calls are read that way)."""
        return engine_takes_tools(self.engine) and self.engine.supports_tools()

    def model_messages(self, view: ModelView, request: ChatRequest) -> list[dict]:
        """The messages the engine renders; tools folded into the system turn when
        the model's template cannot take them."""
        messages = view.messages()
        if not self.templates_tools():
            if offered(request):
                return fold_tools(messages, request.tools)
            if request.tools:  # "none": earlier calls and results stay, as text
                return fold_history(messages)
        return messages

    def turn_tools(self, request: ChatRequest) -> TurnTools | None:
        """What the engine enforces and parses for ``request`` (None: plain chat, or
        an engine that takes no tools)."""
        if not engine_takes_tools(self.engine):
            return None
        return turn_tools_of(request, self.engine)

    def tool_kwargs(self, request: ChatRequest) -> dict:
        """The template's ``tools`` argument for ``request`` (none when folded)."""
        if offered(request) and self.templates_tools():
            return {"tools": [tool.template_dict() for tool in request.tools]}
        return {}

    def prompt_ids(self, view: ModelView, request: ChatRequest) -> list[int]:
        """The prompt the engine would prefill for ``view``.

        Raises:
            RequestError: The template cannot render the messages.
        """
        try:
            messages = self.model_messages(view, request)
            return self.engine.render(messages, True, **self.tool_kwargs(request))
        except Exception as exc:  # jinja refuses e.g. roles out of order
            raise RequestError(
                f"The model's chat template cannot render these messages: {exc}",
                param="messages",
            ) from exc

    def head_ids(self, view: ModelView) -> list[int]:
        """Tokens of the view's head alone (system messages, summary): what a
        history too long to render whole is matched against the caches with."""
        try:
            return self.engine.render([m.as_dict() for m in view.head], False)
        except Exception:  # noqa: BLE001 - a template that needs a user turn
            return []

    def bounded_tokens(
        self, view: ModelView, counted: HistoryCounts, costs: TemplateCosts
    ) -> int:
        """A lower bound on the prompt's tokens from the head, the bounded counts
        and the newest message (already bounded by `refusals.refuse_unreadably_long`)."""
        new = view.body[-1]
        return (
            len(self.head_ids(view))
            + sum(counted.counts)
            + sum(self.engine.count_tokens(text) for text in message_texts(new))
            + costs.message_overhead
        )

    def template_costs(self, info) -> TemplateCosts:
        """What the loaded model's template adds per message (measured once)."""
        costs = self._costs.get(info.identity)
        if costs is None:
            costs = measure_template(self.engine)
            self._costs = {info.identity: costs}
        return costs
