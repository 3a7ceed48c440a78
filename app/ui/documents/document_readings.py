"""What the document card says about a reading, and the record of each reading.

The `DocumentController` keeps one `Reading` per conversation (the plan shown, the
progress, the notes, a stopped state); what each worker event changes in it, and what
the card shows for each phase, are here, so the controller stays about signals and
the words can be read in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from app.core.longdoc.plan.plan_words import duration, progress_line
from app.ui.documents.document_card_view import DocumentCardView
from app.ui.documents.document_worker import DocumentRequest, PlanOffer

NEW_CHAT = "new"  # the key of a reading attached to the new chat on screen


@dataclass
class Reading:
    """A reading the window follows (one per conversation).

    Attributes:
        key: The conversation id, or `NEW_CHAT` until a new chat is stored.
        name: The file's name.
        request: What was asked.
        phase: ``planning``, ``planned``, ``running`` or ``stopped``.
        offer: The plan shown (planned and later).
        line: The card's current line.
        fraction: Share read.
        notes_title: Title of the notes shown.
        notes: The notes of the last finished segment, or the answer so far.
        answer: The answer so far.
        start_when_planned: Resume and "continue in segments" start at once.
        resume_mode: The mode a Resume plans (``segments``).
        left: The user left the new chat this reading was attached to.
    """

    key: object
    name: str
    request: DocumentRequest
    phase: str = "planning"
    offer: PlanOffer | None = None
    line: str = ""
    fraction: float = 0.0
    notes_title: str = ""
    notes: str = ""
    answer: str = ""
    start_when_planned: bool = False
    resume_mode: str = "segments"
    left: bool = False


def plan_texts(offer: PlanOffer) -> tuple[str, str, str, str]:
    """The plan's line and tooltip, and the switch's text and tooltip ("" for none).

    The switch is offered only when the other way fits; its tooltip is the other
    way's own line (or, for a long document whose whole read is only counted when
    chosen, what choosing it does).
    """
    plan = offer.plan
    line = plan.line
    if offer.resumes_at:
        line = (
            f"Resumes at segment {offer.resumes_at + 1} of {len(plan.segments)} "
            f"(notes of {offer.resumes_at} kept) · {line}"
        )
    tooltip = plan.choice.reason
    if plan.speed is not None:
        tooltip += "\nSpeed: " + plan.speed.describe(plan.choice.context_tokens)
    other = offer.other
    if isinstance(other, str):  # the other way does not fit: say nothing more
        return line, tooltip + "\n" + other, "", ""
    switch = "Read whole" if plan.mode == "segments" else "Read in segments"
    if other is None:
        return line, tooltip, switch, "Count the whole document and plan a whole read"
    return line, tooltip, switch, other.line


def mark_stopped(reading: Reading, event) -> None:
    """A reading was stopped (``event``: its cancelled `RunFinished`)."""
    reading.phase = "stopped"
    if reading.answer:  # stopped while answering: the notes were kept, not shown
        reading.notes_title, reading.notes = "", ""
    reading.answer = ""
    if event.stopped_whole:
        reading.request = replace(reading.request, mode="whole")
        reading.line = (
            "Stopped: a whole read keeps nothing when stopped. Read it in segments "
            "to keep notes as it goes."
        )
    else:
        reading.request = replace(reading.request, mode="segments")
        reading.line = (
            f"Stopped after {event.next_segment} of {event.segments} segments; "
            "their notes are kept."
        )


def reading_from_store(found, preset) -> Reading:
    """The card's record of a reading stopped in an earlier run (`StoppedReading`)."""
    request = DocumentRequest(
        found.conversation_id,
        str(found.path or found.name),
        found.question,
        preset,
        "whole" if found.whole else "segments",
    )
    reading = Reading(found.conversation_id, found.name, request, phase="stopped")
    if found.whole:
        reading.line = "A whole read of this document was stopped; nothing was kept."
    else:
        reading.line = (
            f"Stopped after {found.saved} of {found.segments} segments; their notes "
            "are kept."
        )
    if found.path is None or not found.path.is_file():
        reading.line += f" Attach {found.name} again to continue."
    return reading


def note_started(reading: Reading, event) -> None:
    """The run started (``event``: its `RunStarted`): the plan's line, or where a
    resumed run goes on."""
    reading.line = event.plan_line
    if event.resumed_from:
        reading.line = (
            f"Resuming at segment {event.resumed_from + 1} of {event.segments} · "
            + event.plan_line
        )


def note_progress(reading: Reading, event) -> None:
    """A `ReadingProgress` (share read, speed, time left) or a `SegmentStarted`."""
    if hasattr(event, "phase"):  # ReadingProgress
        reading.fraction = event.fraction
        reading.line = progress_line(event)
    else:  # SegmentStarted
        reading.line = (
            f"Segment {event.index + 1} of {event.segments} ({event.tokens:,} tokens)…"
        )


def note_segment(reading: Reading, event) -> None:
    """A segment was read (``event``: its `SegmentFinished`): its notes are shown."""
    reading.notes_title = (
        f"Notes after segment {event.index + 1} of {event.segments} "
        f"({event.tokens_per_s:.1f} tok/s, {duration(event.seconds)})"
    )
    reading.notes = event.notes


def show_reading(card: DocumentCardView, reading: Reading | None) -> None:
    """Show ``reading`` on the card in its phase (hide the card for none)."""
    if reading is None:
        card.hide()
        return
    if reading.phase == "planning":
        card.show_planning(reading.name, reading.line)
        card.set_question(reading.request.question)
    elif reading.phase == "planned":
        assert reading.offer is not None, "a plan is shown once it is offered"
        card.show_plan(reading.name, *plan_texts(reading.offer))
        card.set_question(reading.request.question)
    elif reading.phase == "running":
        if card.isHidden() or not card.stop_button.isVisible():
            card.show_running(reading.name, reading.line)
        card.stop_button.setText("Stop")
        card.set_progress(reading.fraction, reading.line)
        card.set_notes(reading.notes_title, reading.notes)
    else:
        whole = reading.request.mode == "whole"
        resume = "Continue in segments" if whole else "Resume"
        if not Path(reading.request.path).is_file():
            resume = ""
        card.show_stopped(reading.name, reading.line, resume)
        if reading.notes_title.startswith("Notes"):  # what was kept, to read
            card.set_notes(reading.notes_title, reading.notes)
