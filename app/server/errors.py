"""Errors a request can end with, each carrying the HTTP status and OpenAI error code.

They extend the app's one error tree (`app.core.errors`): a fault of the client's input
or of the machine's state, answered in OpenAI's error shape with a message meant for the
person reading it. Anything else escaping a request is a bug: logged with its
traceback, answered with a 500 that shows none.
"""

from __future__ import annotations

from app.core.errors import BudgetError, InputError, KnownError


class RequestError(InputError):
    """A request the server refuses, in OpenAI's error shape.

    Args:
        message: What is wrong, for the person reading the client's error.
        status: HTTP status code.
        code: OpenAI ``error.code`` (e.g. ``invalid_value``), or None.
        param: The offending request field, or None.
        error_type: OpenAI ``error.type``.
        details: Extra numbers for the ``swapless`` object of the error body.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        code: str | None = "invalid_value",
        param: str | None = None,
        error_type: str = "invalid_request_error",
        details: dict | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.param = param
        self.error_type = error_type
        self.details = details or {}


class ContextLengthExceeded(RequestError, BudgetError):
    """A request over the context limit that was not (or could not be) trimmed."""

    def __init__(self, message: str, details: dict):
        super().__init__(
            message,
            status=400,
            code="context_length_exceeded",
            param="messages",
            details=details,
        )


class ServiceUnavailable(RequestError):
    """The server cannot take the request now (no model, memory pressure, shutdown)."""

    def __init__(self, message: str, code: str, details: dict | None = None):
        super().__init__(
            message,
            status=503,
            code=code,
            error_type="server_error",
            details=details,
        )


def as_request_error(exc: BaseException) -> RequestError | None:
    """The `RequestError` a known failure is answered with (None: a bug).

    A `BudgetError` raised by the engine (a prompt that would grow the caches past
    the memory budget) is a context-length refusal with the engine's numbers.
    """
    if isinstance(exc, RequestError):
        return exc
    if isinstance(exc, BudgetError):
        return ContextLengthExceeded(str(exc), {})
    if isinstance(exc, KnownError):
        return ServiceUnavailable(str(exc), code="unavailable")
    return None
