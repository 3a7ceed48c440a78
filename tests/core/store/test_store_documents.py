"""Documents are read segment by segment and can resume where they stopped."""

from __future__ import annotations

import pytest

from app.core.store import DocumentSegment, NotFoundError

DIGEST = "ab" * 32


def test_segments_are_saved_in_order_and_complete_the_document(
    store, conversation_id, clock
):
    document_id = store.add_document(conversation_id, "notes.md", 5000, DIGEST, 512, 2)
    document = store.get_document(document_id)
    assert (document.name, document.status, document.segments_total) == (
        "notes.md",
        "reading",
        2,
    )
    assert store.next_segment_index(document_id) == 0

    store.save_segment(
        document_id,
        0,
        512,
        "first part",
        tokens_per_s=80.0,
        peak_memory_bytes=9,
        kv_bytes=7,
    )
    saved_at = clock.now
    assert store.next_segment_index(document_id) == 1
    assert store.get_document(document_id).status == "reading"

    store.save_segment(document_id, 1, 300, "second part")
    assert store.get_document(document_id).status == "complete"
    segments = store.document_segments(document_id)
    assert [s.notes for s in segments] == ["first part", "second part"]
    assert segments[0] == DocumentSegment(
        id=segments[0].id,
        document_id=document_id,
        segment_index=0,
        token_count=512,
        notes="first part",
        tokens_per_s=80.0,
        peak_memory_bytes=9,
        kv_bytes=7,
        created_at=saved_at,
    )


def test_out_of_order_or_extra_segments_are_rejected(store, conversation_id):
    document_id = store.add_document(conversation_id, "a.txt", 10, DIGEST, 512, 1)
    with pytest.raises(ValueError, match="expects segment 0 next, not 1"):
        store.save_segment(document_id, 1, 10, "skipped one")
    store.save_segment(document_id, 0, 10, "only")
    with pytest.raises(ValueError, match="expects segment 1 next, not 0"):
        store.save_segment(document_id, 0, 10, "again")
    with pytest.raises(ValueError, match="past the end"):
        store.save_segment(document_id, 1, 10, "too many")
    assert len(store.document_segments(document_id)) == 1


def test_resume_after_interruption(store, conversation_id):
    document_id = store.add_document(conversation_id, "big.txt", 10**6, DIGEST, 1024, 3)
    store.save_segment(document_id, 0, 1024, "one")
    store.set_document_status(document_id, "interrupted")
    found = store.find_document(conversation_id, DIGEST)
    assert found is not None and found.id == document_id
    assert store.find_document(conversation_id, "cd" * 32) is None
    start = store.next_segment_index(found.id)
    assert start == 1
    store.save_segment(document_id, start, 1024, "two")
    assert store.get_document(document_id).status == "reading"


def test_status_errors_and_validation(store, conversation_id):
    document_id = store.add_document(conversation_id, "x.txt", 1, DIGEST, 64)
    store.set_document_status(document_id, "error", "Not a text file")
    document = store.get_document(document_id)
    assert (document.status, document.error, document.segments_total) == (
        "error",
        "Not a text file",
        None,
    )
    with pytest.raises(ValueError, match="status must be one of"):
        store.set_document_status(document_id, "done")
    with pytest.raises(ValueError, match="segment_tokens must be positive"):
        store.add_document(conversation_id, "x.txt", 1, DIGEST, 0)
    with pytest.raises(NotFoundError):
        store.next_segment_index(999)
    assert [d.id for d in store.documents(conversation_id)] == [document_id]
