"""Attach a document: long-document mode in the window, whole or in parts, stop, errors."""

from __future__ import annotations

from app.core.presets import get_preset

PARAGRAPH = (
    "Swapless keeps the KV cache inside a memory budget. Section {i} explains how the "
    "cache for paragraph {i} is sized, quantized to eight bits and trimmed when the "
    "conversation grows past its limit, so the machine never swaps.\n\n"
)


def _document(tmp_path, paragraphs: int):
    path = tmp_path / "notes.md"
    path.write_text(
        "# Notes\n\n" + "".join(PARAGRAPH.format(i=i) for i in range(paragraphs))
    )
    return path


def _long_document_preset(**changes):
    values = {"temperature": 0.0, "max_tokens": 16, "summary_max_tokens": 16, **changes}
    return get_preset("long-document").with_changes(**values)


def test_a_short_document_is_read_whole_and_answered(qtbot, window, store, tmp_path):
    window.current.set_preset(_long_document_preset())
    window.composer.set_text("What is this about?")
    path = _document(tmp_path, 3)
    chunks = []
    window.turns.live_text_changed.connect(lambda _cid, text: chunks.append(text))
    with qtbot.waitSignal(
        window.documents.document_finished, timeout=60_000
    ) as blocker:
        assert window.documents.attach(str(path))
    conversation_id, finished = blocker.args
    assert not finished.cancelled and finished.mode == "whole"
    assert window.composer.text() == ""  # the typed text became the question
    messages = store.messages(conversation_id)
    assert messages[0].content == "Document: notes.md\n\nWhat is this about?"
    assert messages[-1].role == "assistant" and messages[-1].content == finished.answer
    assert chunks[-1] == finished.answer
    (document,) = store.documents(conversation_id)
    assert document.name == "notes.md" and document.status == "complete"
    assert window.chat_view.message_views()[0].text.startswith("Document: notes.md")
    assert not window.turns.busy and window.composer.attach_button.isEnabled()


def test_a_long_document_is_read_in_parts_and_can_be_stopped(
    qtbot, window, store, tmp_path
):
    window.current.set_preset(
        _long_document_preset(max_context=1024, segment_tokens=256)
    )
    path = _document(tmp_path, 40)
    with qtbot.waitSignal(window.documents.document_progressed, timeout=60_000):
        window.documents.attach(str(path))
    assert window.turns.busy
    assert "part" in window.chat_view.live_reply.footer_label.text()
    started = window.notices.notice("document")
    assert started.text.startswith("notes.md is long (")
    assert "safe limit" not in started.text
    with qtbot.waitSignal(
        window.documents.document_finished, timeout=60_000
    ) as blocker:
        window.turns.stop()
    conversation_id, finished = blocker.args
    assert finished.cancelled and finished.mode == "segments"
    assert finished.next_segment < finished.segments
    assert "Attach the same file" in window.notices.notice("document").text
    (document,) = store.documents(conversation_id)
    assert document.status == "interrupted"
    # Attaching it again resumes where it stopped and finishes.
    with qtbot.waitSignal(
        window.documents.document_finished, timeout=120_000
    ) as blocker:
        window.documents.attach(str(path))
    _, resumed = blocker.args
    assert not resumed.cancelled and resumed.resumed_from == finished.next_segment
    assert store.documents(conversation_id)[0].status == "complete"


def test_a_binary_file_is_refused_in_words(qtbot, window, tmp_path):
    path = tmp_path / "image.png"
    path.write_bytes(b"\x89PNG\x00\x00\x00binary")
    window.composer.set_text("Describe it")
    with qtbot.waitSignal(window.turns.reply_failed, timeout=30_000) as blocker:
        window.documents.attach(str(path))
    error = blocker.args[1]
    assert error.known and "binary" in error.message
    assert window.notices.notice("refused") is not None
    assert window.composer.text() == "Describe it"
