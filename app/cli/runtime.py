"""What every model-using command needs: the store, the engine and the memory checks.

Opening order matters for the user's data: the store opens (and recovers) first, so a
reply left unfinished by a process that has ended is marked interrupted even if the model
then fails to load.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.core.store import Store

if TYPE_CHECKING:  # imported where used: the engine imports mlx
    from app.core.engine.engine import Engine
    from app.core.engine.events import ModelInfo


@dataclass
class Runtime:
    """An open store and a loaded engine."""

    store: Store
    engine: Engine
    model_info: ModelInfo
    pressure: Callable[[], str] = field(default=lambda: "normal")
    device_limit: Callable[[int, int], int | None] | None = None

    def session_kwargs(self, seed: int | None) -> dict:
        """Keyword arguments for a `ConversationSession`."""
        return {
            "pressure": self.pressure,
            "device_limit": self.device_limit,
            "seed": seed,
        }

    def close(self) -> None:
        """Stop the engine and close the store."""
        self.engine.shutdown()
        self.store.close()


def open_store(say: Callable[[str], None], *, read_only_ok: bool = False) -> Store:
    """Open the store and tell the user about any recovery it did.

    Args:
        say: Prints one line for the user.
        read_only_ok: The command only reads (list, export, search): a home that
            cannot be written (a mounted backup) is opened read-only, said in one
            line, and nothing is written.
    """
    from app.core.files import paths

    if read_only_ok and not paths.home_is_writable():
        say(
            f"The Swapless home {paths.app_home()} is read-only: its conversations "
            "are opened for reading, and nothing is written."
        )
        return Store.open_read_only()
    store = Store.open()
    notice = store.recovery_notice()
    if notice is not None:
        say(notice)
    if getattr(store, "recovered_replies", 0):
        say(
            f"{store.recovered_replies} unfinished reply(s) of a Swapless process that "
            "has ended (it stopped, was killed or could not save) were marked "
            "interrupted; their text so far is kept."
        )
    return store


def open_runtime(
    model: str | None, *, conversation_id: int | None, say: Callable[[str], None]
) -> Runtime:
    """Open the store, pick the model (explicit, the conversation's, or the demo) and load it."""
    from app.core.engine.engine import Engine
    from app.core.modelkit.demo_model import DEMO_NOTICE

    store = open_store(say)
    try:
        if model is None and conversation_id is not None:
            model = store.get_conversation(conversation_id).model
        demo = model is None
        engine = Engine.from_settings()
        if model is None:
            say(DEMO_NOTICE)
            info = engine.load_demo()
        else:
            info = engine.load(model)
        if info.random_weights and not demo:
            say(f"Note: {info.folder} has random weights; its replies are noise.")
    except BaseException:
        store.close()
        raise
    from app.core.memory.probe import MemoryProbe

    probe = MemoryProbe(mlx_stats=engine.mlx_memory, kv_bytes=engine.live_kv_bytes)
    return Runtime(
        store=store,
        engine=engine,
        model_info=info,
        pressure=lambda: probe.sample().pressure.value,
        device_limit=engine.max_safe_context,
    )
