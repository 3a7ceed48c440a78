"""Recall for a server client's trimmed history: the same step as a chat's, no store.

A server client resends its whole history with every request; once the server has
trimmed it, the messages its summary stands for are still in each request, only not in
the model's view. So recall needs no database: the trimmed part of the request's own
history is indexed for that request (`app.core.recall.in_memory`, the same OR query and
BM25 as the app's store) and the originals the new message needs go, within the recall
budget, in the same marked block before it. Which block went before which message is
remembered by the message's prefix hash (as summaries are, `TrimRecords`), so the
client's next requests, which resend that message without the block, render the same
tokens and the cache is reused. A server restart forgets blocks and summaries alike;
the next request is trimmed (and recalls) afresh.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import replace

from app.core.recall.block import recall_budget, with_recall
from app.core.recall.in_memory import MessageIndex, Original
from app.core.recall.recaller import RecallResult, recall_among
from app.core.store.records import RecalledMessage
from app.server.openai_chat.client_history import ClientHistory, ModelView

# Blocks remembered (a few KB each); the oldest unused ones go first.
MAX_RECALL_RECORDS = 2048
# Indexes of trimmed histories kept (one per recently trimmed conversation).
MAX_INDEXES = 8
# Tokens left unused where the block joins the message (the block's own count is exact).
JOIN_MARGIN = 4


class RecallRecords:
    """Recall blocks sent before client messages; thread-safe, bounded LRU.

    A block is keyed by the prefix hash of the message it went before, so it is applied
    only to that message in that same history.
    """

    def __init__(self, capacity: int = MAX_RECALL_RECORDS):
        self.capacity = capacity
        self._blocks: OrderedDict[str, tuple[RecalledMessage, ...]] = OrderedDict()
        self._indexes: OrderedDict[str, MessageIndex] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._blocks)

    def remember(self, key: str, recalled: tuple[RecalledMessage, ...]) -> None:
        """Remember that ``recalled`` went before the message whose prefix hash is ``key``."""
        with self._lock:
            self._blocks[key] = recalled
            self._blocks.move_to_end(key)
            while len(self._blocks) > self.capacity:
                self._blocks.popitem(last=False)

    def blocks(self, history: ClientHistory) -> dict[int, tuple[RecalledMessage, ...]]:
        """The remembered blocks of ``history``'s messages, by message index."""
        with self._lock:
            found = {}
            for index, key in enumerate(history.hashes):
                block = self._blocks.get(key)
                if block is not None:
                    self._blocks.move_to_end(key)
                    found[index] = block
            return found

    def index_of(self, history: ClientHistory, view: ModelView) -> MessageIndex:
        """The index of ``history``'s trimmed messages, built once per trim.

        It is keyed by the prefix hash of the last trimmed message: the same trimmed
        part (every later request of the conversation until its next trim) finds it.
        """
        key = history.hashes[view.first_body_index - 1]
        with self._lock:
            index = self._indexes.get(key)
            if index is not None:
                self._indexes.move_to_end(key)
                return index
        trimmed = [
            Original(i, message.role, message.content)
            for i, message in enumerate(history.messages)
            if history.system_count <= i < view.first_body_index
        ]
        index = MessageIndex(trimmed)
        with self._lock:
            self._indexes[key] = index
            while len(self._indexes) > MAX_INDEXES:
                self._indexes.popitem(last=False)
        return index

    def clear(self) -> None:
        """Forget every block and index."""
        with self._lock:
            self._blocks.clear()
            self._indexes.clear()


def with_blocks(
    view: ModelView, blocks: dict[int, tuple[RecalledMessage, ...]]
) -> ModelView:
    """``view`` with each remembered block put back before its message."""
    if not blocks:
        return view
    body = tuple(
        replace(m, content=with_recall(m.content, blocks[i]))
        if (i := view.first_body_index + offset) in blocks
        else m
        for offset, m in enumerate(view.body)
    )
    return replace(view, body=body)


def recall_room(limit: int, max_tokens: int, prompt_tokens: int) -> int:
    """Tokens a block may take: the recall budget, or what is left under the limit."""
    left = limit - max_tokens - prompt_tokens - JOIN_MARGIN
    return max(min(recall_budget(limit), left), 0)


def recall_request(
    records: RecallRecords,
    history: ClientHistory,
    view: ModelView,
    blocks: dict[int, tuple[RecalledMessage, ...]],
    budget: int,
    count_tokens,
) -> RecallResult:
    """Recall the trimmed originals the request's newest message needs.

    Args:
        records: Where the index of the trimmed part is kept between requests.
        history: The client's messages.
        view: What the model sees (the summary covers the messages before its body).
        blocks: Remembered blocks of the history's messages (`RecallRecords.blocks`):
            what a kept message already recalled is in view and not recalled twice.
        budget: Tokens the block may take.
        count_tokens: The model's tokenizer count.
    """
    if (
        view.first_body_index <= history.system_count
        or history.messages[-1].role != "user"
    ):
        return RecallResult((), "", 0, 0.0)
    in_view = [
        r.message_id
        for index, block in blocks.items()
        if index >= view.first_body_index
        for r in block
    ]
    # As the client sent them: a block before a kept message is not its text.
    newer = [(m.role, m.content) for m in history.messages[view.first_body_index : -1]]
    started = time.perf_counter()
    index = records.index_of(history, view)
    result = recall_among(
        index, history.messages[-1].content, budget, count_tokens, in_view, newer
    )
    # The time includes building the index (on the first request after a trim).
    return replace(result, ms=(time.perf_counter() - started) * 1000)


def recalled_json(result: RecallResult) -> list[dict]:
    """The ``swapless`` object's ``recalled``: which client messages were put back."""
    return [
        {
            "message_index": r.message_id,
            "role": r.role,
            "text": r.text,
            "cut": r.cut,
        }
        for r in result.recalled
    ]
