"""Full-text search over message text and conversation titles (SQLite FTS5).

The FTS indexes are kept in sync by triggers (see migration 1), so there is nothing
to update here. What this module adds is turning whatever the user types into a safe
FTS5 query: every word is quoted, so quotes, ``-``, ``*``, ``:`` or ``AND`` are plain
text and never a syntax error.
"""

from __future__ import annotations

import re

from app.core.store.base import StoreBase
from app.core.store.database import Database
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
# Recall's words this long or longer match as prefixes (`terms_match`); shorter ones
# would match too much ("go" finds "good", "gone", "got").
PREFIX_FROM = 4
# Endings a prefix drops first (`prefix_stem`), so "camping" also finds "camped".
_ENDINGS = ("ing", "ed", "es", "s", "ly")
# A prefix is never shorter than this ("run" from "running"; "is" stays "is").
MIN_STEM = 3


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

    def informative_terms(self, terms: list[str], conversation_id: int) -> list[str]:
        """``terms`` without the ones too common in the conversation (for recall's OR query).

        FTS5's BM25 clamps the weight of a term found in half or more of the indexed
        messages to nearly zero (its IDF, log((N - n + 0.5) / (n + 0.5)), is <= 0);
        leaving such a term in an OR query changes no ranking, yet makes FTS5 score
        every row that has it — on a 5,000-message conversation, most of the recall
        step's time. Counted over this conversation's messages, not the whole store:
        other conversations must neither keep a word this one is full of (the store's
        own counts did: in a store twice the conversation's size a word in every
        message of it is in under half of all) nor drop one it rarely uses. Checked
        only once the conversation is large enough for that to matter; a term the
        index has not seen (or spells differently) is kept.

        Args:
            terms: Lowercased words (`app.core.recall.query.recall_terms`).
            conversation_id: The conversation recall searches.
        """
        if not terms:
            return terms
        with self._reading() as db:
            low, high, total = _id_range(db, conversation_id)
            if total < PRUNE_FROM_MESSAGES:
                return terms
            # Messages of other conversations among this one's ids (none unless
            # conversations were written in turns): 0 when the ids have no gap.
            others = 0
            if high - low + 1 != total:
                others = (
                    db.execute(
                        "SELECT count(*) FROM messages WHERE id BETWEEN ? AND ?",
                        [low, high],
                    ).fetchone()[0]
                    - total
                )
            kept = [
                term
                for term in terms
                if not _too_common(
                    db, conversation_id, term, (low, high, total), others
                )
            ]
        return kept

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
            low, high, _ = _id_range(db, conversation_id)
            # FTS5 scores (BM25) every row it matches before the join can filter
            # them: the rowid range keeps the rows of conversations outside this
            # one's ids from being scored at all (same hits, same order).
            hits = db.execute(
                "SELECT m.id, -bm25(messages_fts) FROM messages_fts JOIN messages m"
                " ON m.id = messages_fts.rowid"
                " WHERE messages_fts MATCH ? AND messages_fts.rowid BETWEEN ? AND ?"
                " AND m.conversation_id = ?"
                " AND m.summary_id IS NOT NULL AND m.role IN ('user', 'assistant')"
                " AND m.state IN ('complete', 'interrupted')"
                " ORDER BY rank LIMIT ?",
                [query, low, high, conversation_id, limit * 2],
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

    def trimmed_pair_after(
        self, conversation_id: int, message_id: int
    ) -> tuple[Message, ...] | None:
        """The trimmed user+reply pair that starts right after ``message_id``.

        For recall's follow-ups (`app.core.recall.follow_ups`): the user message
        that answers a reply, with its own reply. None when the next message is not
        a trimmed, finished user message.

        Args:
            conversation_id: The conversation.
            message_id: A message of it (a reply, in practice).
        """
        with self._reading() as db:
            row = db.execute(
                "SELECT id, role, summary_id, state FROM messages"
                " WHERE conversation_id = ? AND id > ? ORDER BY id LIMIT 1",
                [conversation_id, message_id],
            ).fetchone()
            if row is None:
                return None
            next_id, role, summary_id, state = row
            if role != "user" or summary_id is None:
                return None
            if state not in ("complete", "interrupted"):
                return None
            return _pair_of(db, conversation_id, next_id)


def _too_common(
    db: Database,
    conversation_id: int,
    term: str,
    span: tuple[int, int, int],
    others: int,
) -> bool:
    """Whether ``term`` is in half or more of a conversation's messages.

    FTS5 counts the rows in the conversation's id range from its own index, without
    reading a message; that count is exact when no other conversation has ids in the
    range (``others`` is 0) and too high by at most ``others`` otherwise; only a
    count that close to half is made exactly, message by message.

    Args:
        db: The open database.
        conversation_id: The conversation.
        term: A lowercased word.
        span: The conversation's lowest and highest message id and its message count.
        others: Messages of other conversations with ids in that range.
    """
    low, high, total = span
    match = terms_match(term)
    within = db.execute(
        "SELECT count(*) FROM messages_fts"
        " WHERE messages_fts MATCH ? AND rowid BETWEEN ? AND ?",
        [match, low, high],
    ).fetchone()[0]
    if 2 * within < total:
        return False
    if 2 * (within - others) >= total:
        return True
    # CROSS JOIN: FTS5 first (only the term's rows), then each row's message; the
    # other order runs one FTS5 query per message of the conversation.
    exact = db.execute(
        "SELECT count(*) FROM messages_fts CROSS JOIN messages m"
        " ON m.id = messages_fts.rowid WHERE messages_fts MATCH ?"
        " AND messages_fts.rowid BETWEEN ? AND ? AND m.conversation_id = ?",
        [match, low, high, conversation_id],
    ).fetchone()[0]
    return 2 * exact >= total


def terms_match(term: str) -> str:
    """The FTS5 query of one lowercased word, quoted, as recall's OR query has it.

    A word of `PREFIX_FROM` characters or more is a prefix of its stem
    (`prefix_stem`: "camping" matches "camp", "camped", "camping"): the tokenizer
    does not stem. Counted as the query matches, so a prefix whose longer words
    fill the conversation ("rive": "river") is left out like a common word, not
    scored in every row.
    """
    stem = prefix_stem(term)
    quoted = '"' + (stem or term).replace('"', '""') + '"'
    return quoted + "*" if stem else quoted


def prefix_stem(term: str) -> str:
    """The prefix recall matches a lowercased word by, or "" to match it exactly.

    A word under `PREFIX_FROM` characters is exact. A longer word of letters loses
    one common ending ("-ing", "-ed", "-es", "-s", "-ly"; not "-ss"), a doubled last
    consonant that ending left ("running": "run"), then a final "e" ("write":
    "writ", so "writing" matches too), never below `MIN_STEM` letters (a final "e"
    only from a stem over `PREFIX_FROM` letters: "hike" stays). A light stand-in for
    stemming: on LoCoMo it put every evidence turn in view for 1,123 questions of
    1,980 at 2K (0.3 share) against 1,109 with the whole word as prefix
    (docs/measured.md).
    """
    if len(term) < PREFIX_FROM:
        return ""
    if not term.isalpha():
        return term
    stem = term
    for ending in _ENDINGS:
        if stem.endswith(ending) and len(stem) - len(ending) >= MIN_STEM:
            if ending != "s" or not stem.endswith("ss"):
                stem = stem[: -len(ending)]
            break
    if stem != term and stem[-1] == stem[-2] and stem[-1] not in "aeiouls":
        stem = stem[:-1]
    if stem.endswith("e") and len(stem) > PREFIX_FROM:
        stem = stem[:-1]
    return stem


def _id_range(db: Database, conversation_id: int) -> tuple[int, int, int]:
    """The lowest and highest message id of a conversation and its message count.

    Cheap: all three come from the ``(conversation_id, id)`` index.
    """
    low, high, total = db.execute(
        "SELECT coalesce(min(id), 0), coalesce(max(id), -1), count(*)"
        " FROM messages WHERE conversation_id = ?",
        [conversation_id],
    ).fetchone()
    return int(low), int(high), int(total)


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
