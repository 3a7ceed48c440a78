"""Notices about trims, summaries and documents in plain words."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.core.notice_words import (
    document_started_notice,
    document_stopped_notice,
    summary_origin,
    trim_card_title,
    trim_notice,
)


def test_summary_origin_says_why_the_model_did_not_write_it():
    assert summary_origin("model", "model", False) == "written by the model"
    assert summary_origin("extractive", "extractive", False).endswith(
        "this conversation's preset asks for that"
    )
    assert summary_origin("extractive", "model", True).endswith(
        "the demo model's own summary would be noise"
    )
    assert "the model's summary failed, came back empty, or was unusable" in (
        summary_origin("extractive", "model", False)
    )


def test_trim_notice_counts_messages_without_cache_jargon():
    text = trim_notice(1, "extractive")
    assert text.startswith(
        "1 earlier message went into the summary at the top of the chat"
    )
    assert "(written by Swapless)" in text
    assert "(written by the model)" in trim_notice(3, "model")
    assert "splice" not in text and "ms" not in text.split()


def test_document_notices():
    event = SimpleNamespace(
        mode="segments",
        document_tokens=45_000,
        segments=6,
        resumed_from=0,
        kv_bytes_limit=30 * 1024 * 1024,
    )
    text = document_started_notice("notes.md", event)
    assert text.startswith("notes.md is long (45,000 tokens)")
    assert "6 segments" in text and "30.0 MiB" in text and "safe limit" not in text
    whole = SimpleNamespace(**{**vars(event), "mode": "whole", "segments": 1})
    assert document_started_notice("a.txt", whole) == (
        "Reading a.txt whole (45,000 tokens): it fits in the context."
    )
    stopped = SimpleNamespace(next_segment=2, segments=6, stopped_whole=False)
    text = document_stopped_notice(stopped)
    assert text.startswith("Stopped after 2 of 6 segments; their notes are kept.")
    assert "Resume" in text
    whole = SimpleNamespace(next_segment=0, segments=1, stopped_whole=True)
    assert "in segments" in document_stopped_notice(whole)


@pytest.mark.parametrize(
    ("cause", "limit", "trim_at", "words"),
    [
        (
            "limit",
            4096,
            4096,
            "6 earlier messages summarised to stay within the limit of 4,096 tokens",
        ),
        (
            "pressure",
            4096,
            3072,
            "6 earlier messages summarised early, at 3,072 of "
            "4,096 tokens, because memory was under pressure",
        ),
        (
            "critical",
            4096,
            4096,
            "6 earlier messages summarised to free memory: memory "
            "pressure was critical",
        ),
        # Summaries written before the cause was stored keep the plain words.
        (
            None,
            None,
            None,
            "6 earlier messages summarised to keep the context within its limit",
        ),
    ],
)
def test_a_trim_card_says_what_made_the_trim_happen(cause, limit, trim_at, words):
    assert trim_card_title(6, cause, limit, trim_at) == words
