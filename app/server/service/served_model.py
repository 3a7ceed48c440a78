"""Which model the server serves, and the names a request may ask for it by."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.core.engine.events import ModelInfo
from app.server.errors import RequestError, ServiceUnavailable

# Accepted as the model name whatever is loaded, for clients configured once while
# the app's model changes.
MODEL_ALIAS = "swapless"


def served_model_id(info) -> str:
    """The id `GET /v1/models` lists for a loaded model: its folder's name."""
    return Path(info.folder).name or MODEL_ALIAS


def check_served_model(engine: Any, asked: str) -> ModelInfo:
    """Return the served model's info; refuse when none is loaded or another is asked.

    Raises:
        ServiceUnavailable: No model is loaded.
        RequestError: ``asked`` is neither the served model's id nor the alias.
    """
    info = engine.model_info
    if info is None:
        raise ServiceUnavailable(
            "No model is loaded; load one in Swapless first.", "model_not_loaded"
        )
    served = served_model_id(info)
    if asked not in (served, MODEL_ALIAS):
        raise RequestError(
            f"The model {asked!r} is not served here; this server serves "
            f"{served!r} (also reachable as {MODEL_ALIAS!r}).",
            code="model_not_found",
            param="model",
        )
    return info
