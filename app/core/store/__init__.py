"""The Qt-free conversation store: one SQLite file with every conversation.

Use `Store.open()`; it migrates the schema, refuses files from a newer Swapless,
moves corrupt files aside and marks replies cut short by a crash as interrupted.
Rows come back as the frozen dataclasses re-exported here.
"""

from app.core.store.base import NotFoundError
from app.core.store.conversations import UNCHANGED, make_title
from app.core.store.exchange.export import FORMAT, FORMAT_VERSION
from app.core.store.migrations import SCHEMA_VERSION
from app.core.store.records import (
    Conversation,
    Document,
    DocumentSegment,
    Message,
    ModelContext,
    ReplyStats,
    SearchHit,
    Summary,
)
from app.core.store.reply_saver import ReplySaver
from app.core.store.store import Store

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "SCHEMA_VERSION",
    "UNCHANGED",
    "Conversation",
    "Document",
    "DocumentSegment",
    "Message",
    "ModelContext",
    "NotFoundError",
    "ReplySaver",
    "ReplyStats",
    "SearchHit",
    "Store",
    "Summary",
    "make_title",
]
