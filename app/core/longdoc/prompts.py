"""The words of long-document mode: what the model is asked for each segment and at the end.

Every prompt starts with the same system prompt and the question, so those tokens form
a prefix that stays in the KV cache from one segment to the next while everything
after them (notes, segment, generated notes) is dropped. The user-visible record of a
run (`request_text`) is here too, because resuming a run compares it.
"""

from __future__ import annotations

from app.core.chat.model_messages import build_messages

DEFAULT_QUESTION = "Summarize the document: its purpose, main points and conclusions."
NO_NOTES = "(none yet)"


def _question(question: str) -> str:
    return f"Question: {question.strip()}\n\n"


def segment_messages(
    system_prompt: str, question: str, notes: str, segment: str, index: int, total: int
) -> list[dict]:
    """Return the chat that turns (notes so far, one segment) into updated notes.

    Args:
        system_prompt: The preset's system prompt (may be empty).
        question: What the user wants to know about the document.
        notes: The notes written after the previous segment ("" before the first).
        segment: The segment's text.
        index: 0-based index of the segment.
        total: Number of segments.
    """
    body = (
        _question(question)
        + "I am reading a long document one part at a time and keep notes for the "
        "question.\n\n"
        + f"Notes so far:\n{notes.strip() or NO_NOTES}\n\n"
        + f"Part {index + 1} of {total}:\n<<<\n{segment}\n>>>\n\n"
        + "Rewrite the notes so they cover every part read so far: keep what matters "
        "for the question, add what this part says (facts, names, numbers, "
        f"conclusions), and end each point with the part it comes from, e.g. "
        f"[part {index + 1}]. Reply with the notes only."
    )
    return build_messages(system_prompt, [], [], body)


def answer_messages(
    system_prompt: str, question: str, notes: str, segments: int
) -> list[dict]:
    """Return the chat that answers the question from the notes on every segment."""
    body = (
        _question(question)
        + f"Notes taken while reading the whole document ({segments} parts):\n"
        + f"{notes.strip() or NO_NOTES}\n\n"
        + "Answer the question from these notes, one point per line, each ending "
        "with the parts it comes from in brackets, e.g. [part 2]."
    )
    return build_messages(system_prompt, [], [], body)


def whole_messages(system_prompt: str, question: str, document: str) -> list[dict]:
    """Return the chat that answers the question from the whole document at once."""
    body = (
        _question(question)
        + f"The document:\n<<<\n{document}\n>>>\n\n"
        + "Answer the question from the document."
    )
    return build_messages(system_prompt, [], [], body)


def request_text(document_name: str, question: str) -> str:
    """Return the user message that records a run in the conversation."""
    return f"Document: {document_name}\n\n{question.strip()}"
