"""Recall: put back, verbatim, the trimmed messages a new question needs.

When a conversation is trimmed the model sees the dropped turns only through one
summary, yet every trimmed message is still in the store. Before each turn the new
message becomes an FTS5 OR query without stopwords (`query`), the store ranks this
conversation's trimmed messages by BM25 and returns user+reply pairs, and `block`
chooses what fits the recall budget and writes the marked block sent before the new
message (stored with it, so later turns render the same tokens). `keep` scores older
pairs by how much later replies used them (issue #27's measured alternative to keeping
the newest; not used by the trim). Pure Python; it may
import `app.core.store` (records and the search method) and nothing from the engine.
"""
