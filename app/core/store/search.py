"""Full-text search over message text and conversation titles (SQLite FTS5).

The FTS indexes are kept in sync by triggers (see migration 1), so there is nothing
to update here. What this module adds is turning whatever the user types into a safe
FTS5 query: every word is quoted, so quotes, ``-``, ``*``, ``:`` or ``AND`` are plain
text and never a syntax error.
"""

from __future__ import annotations

import re

from app.core.store.base import StoreBase
from app.core.store.records import Message, SearchHit

HIT_START = "["
HIT_END = "]"
_ELLIPSIS = "…"
_SNIPPET_TOKENS = 12
# FTS5's unicode61 tokenizer indexes letters and digits only; a word without any
# (like "-" or "::") could never match and is dropped.
_HAS_TOKEN = re.compile(r"[^\W_]")
# Below this many messages every recall query is fast; terms are not pruned.
PRUNE_FROM_MESSAGES = 500


def fts_query(text: str) -> str:
    """Return an FTS5 query matching rows that contain every word of ``text``.

    Each word is quoted (inner quotes doubled) and matched as a prefix, so
    ``"summ"`` also finds "summary".

    Returns:
        The query, or an empty string if ``text`` has no searchable word.
    """
    words = [word for word in text.split() if _HAS_TOKEN.search(word)]
    return " ".join('"' + word.replace('"', '""') + '"*' for word in words)


class SearchMixin(StoreBase):
    """Search method of `Store`."""

    def search(self, text: str, limit: int = 20) -> list[SearchHit]:
        """Find conversations whose title or messages contain every word of ``text``.

        Title hits come first, then message hits, each best match first.

        Args:
            text: What the user typed; any characters are allowed.
            limit: Return at most this many hits.

        Returns:
            The hits; matches in ``snippet`` are wrapped in ``[`` and ``]``.
        """
        query = fts_query(text)
        if not query or limit <= 0:
            return []
        markers = [HIT_START, HIT_END, _ELLIPSIS, _SNIPPET_TOKENS]
        with self._reading() as db:
            title_rows = db.execute(
                "SELECT c.id, c.title,"
                " snippet(conversations_fts, 0, ?, ?, ?, ?)"
                " FROM conversations_fts JOIN conversations c"
                " ON c.id = conversations_fts.rowid"
                " WHERE conversations_fts MATCH ? ORDER BY rank LIMIT ?",
                [*markers, query, limit],
            ).fetchall()
            message_rows = db.execute(
                "SELECT m.conversation_id, c.title, m.id, m.role,"
                " snippet(messages_fts, 0, ?, ?, ?, ?)"
                " FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
                " JOIN conversations c ON c.id = m.conversation_id"
                " WHERE messages_fts MATCH ? ORDER BY rank LIMIT ?",
                [*markers, query, limit - len(title_rows)],
            ).fetchall()
        hits = [
            SearchHit(cid, title, None, None, snippet)
            for cid, title, snippet in title_rows
        ]
        hits += [SearchHit(*row) for row in message_rows]
        return hits

    def informative_terms(self, terms: list[str]) -> list[str]:
        """``terms`` without the ones BM25 gives no weight (for recall's OR query).

        FTS5's BM25 clamps the weight of a term found in half or more of all indexed
        messages to nearly zero (its IDF, log((N - n + 0.5) / (n + 0.5)), is <= 0);
        leaving such a term in an OR query changes no ranking, yet makes FTS5 score
        every row that has it — on a 5,000-message conversation, most of the recall
        step's time. Checked only once the index is large enough for that to matter;
        a term the index has not seen (or spells differently) is kept.

        Args:
            terms: Lowercased words (`app.core.recall.query.recall_terms`).
        """
        if not terms:
            return terms
        with self._reading() as db:
            total = db.execute("SELECT count(*) FROM messages").fetchone()[0]
            if total < PRUNE_FROM_MESSAGES:
                return terms
            if not getattr(self, "_vocabulary_ready", False):
                # Per connection, in its temporary schema: no migration, no file.
                db.execute(
                    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.messages_vocabulary"
                    " USING fts5vocab(main, messages_fts, 'row')"
                )
                self._vocabulary_ready = True
            counts = {
                term: db.execute(
                    "SELECT doc FROM temp.messages_vocabulary WHERE term = ?", [term]
                ).fetchone()
                for term in terms
            }
        return [t for t in terms if counts[t] is None or 2 * counts[t][0] < total]

    def search_trimmed(
        self, conversation_id: int, query: str, limit: int = 16
    ) -> list[tuple[tuple[Message, ...], float]]:
        """Find the trimmed user+reply pairs of one conversation that best match ``query``.

        For recall: only messages a summary covers are searched (what the model sees
        anyway is not), ranked by FTS5's BM25; each hit comes with its partner (a
        question with its reply, a reply with its question), best pair first.

        Args:
            conversation_id: The conversation.
            query: An FTS5 query (built by `app.core.recall.query`, never raw text).
            limit: At most this many pairs.
        """
        if not query or limit <= 0:
            return []
        with self._reading() as db:
            hits = db.execute(
                "SELECT m.id, -bm25(messages_fts) FROM messages_fts JOIN messages m"
                " ON m.id = messages_fts.rowid"
                " WHERE messages_fts MATCH ? AND m.conversation_id = ?"
                " AND m.summary_id IS NOT NULL AND m.role IN ('user', 'assistant')"
                " AND m.state IN ('complete', 'interrupted')"
                " ORDER BY rank LIMIT ?",
                [query, conversation_id, limit * 2],
            ).fetchall()
            pairs: list[tuple[tuple[Message, ...], float]] = []
            seen: set[int] = set()
            for message_id, relevance in hits:
                if message_id in seen:
                    continue
                pair = _pair_of(db, conversation_id, message_id)
                seen.update(m.id for m in pair)
                pairs.append((pair, float(relevance)))
                if len(pairs) >= limit:
                    break
            return pairs


def _pair_of(db, conversation_id: int, message_id: int) -> tuple[Message, ...]:
    """The user message and the reply that answered it, around ``message_id``."""
    row = db.execute("SELECT * FROM messages WHERE id = ?", [message_id])
    columns = [c[0] for c in row.description]
    message = Message.from_row(dict(zip(columns, row.fetchone(), strict=True)))
    if message.role == "user":
        sql = (
            "SELECT * FROM messages WHERE conversation_id = ? AND id > ?"
            " ORDER BY id LIMIT 1"
        )
    else:
        sql = (
            "SELECT * FROM messages WHERE conversation_id = ? AND id < ?"
            " ORDER BY id DESC LIMIT 1"
        )
    cursor = db.execute(sql, [conversation_id, message_id])
    found = cursor.fetchone()
    if found is None:
        return (message,)
    other = Message.from_row(
        dict(zip([c[0] for c in cursor.description], found, strict=True))
    )
    usable = (
        other.summary_id is not None
        and other.state in ("complete", "interrupted")
        and other.role != message.role
    )
    if not usable:
        return (message,)
    return (message, other) if message.role == "user" else (other, message)
