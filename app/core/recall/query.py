"""Turn a new message into an FTS5 query for recall: any word may match.

The search box's query (`app.core.store.search.fts_query`) is for people: every word
must be present. Recall asks the opposite question — which earlier messages share the
new message's rarer words — so the words are OR-ed and BM25 ranks the rows; stopwords
are left out because they match everything. Every term is quoted, so FTS5 operators,
quotes and column filters in the message are plain text, never a syntax error. A term
of four letters or more is a prefix query ("group" also finds "groups", "support"
"supportive"; `app.core.store.search.terms_match`): the store's tokenizer does not
stem, and on LoCoMo this
put every evidence turn in view for 44 % of the questions at 2K against 43 % with
exact words (docs/measured.md).
"""

from __future__ import annotations

import re

from app.core.store.search import terms_match

# FTS5's unicode61 tokenizer indexes runs of letters and digits.
_TERM = re.compile(r"[^\W_]+")
MAX_TERMS = 32
_STOPWORD_TEXT = """
a about above after again against all am an and any are as at be because been
before being below between both but by can could did do does doing down during
each few for from further had has have having he her here hers herself him himself
his how i if in into is it its itself just me more most my myself no nor not now
of off on once only or other our ours ourselves out over own same she should so
some such than that the their theirs them themselves then there these they this
those through to too under until up very was we were what when where which while
who whom why will with would you your yours yourself yourselves tell please know
remember said say also get got let like ok okay yes thanks thank s t d ll re ve m
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def recall_terms(text: str) -> list[str]:
    """Return the distinct searchable words of ``text``, lowercased, in order."""
    terms: list[str] = []
    seen: set[str] = set()
    for match in _TERM.finditer(text[:20_000]):
        word = match.group().lower()
        if word in STOPWORDS or word in seen:
            continue
        seen.add(word)
        terms.append(word)
        if len(terms) >= MAX_TERMS:
            break
    return terms


def recall_query(text: str) -> str:
    """Return an FTS5 query matching rows with any content word of ``text``.

    Returns:
        The query, or an empty string when ``text`` has no word worth searching
        (then nothing is recalled, and that is not an error).
    """
    return terms_query(recall_terms(text))


def terms_query(terms: list[str]) -> str:
    """The FTS5 OR query of ``terms``, each quoted (empty for no terms).

    A term of four characters or more matches as a prefix (``"group"*``).
    """
    return " OR ".join(terms_match(term) for term in terms)
