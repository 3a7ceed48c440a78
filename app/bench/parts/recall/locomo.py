"""Read LoCoMo (long conversations with question annotations naming their evidence turns).

LoCoMo (Maharana et al., ACL 2024, github.com/snap-research/locomo) is ten very long
two-person conversations (about 19 sessions, 600 turns each) with about 2,000
questions, each annotated with the dialog ids of the turns that hold its answer
("D1:3": session 1, turn 3). It is licensed for non-commercial use (CC BY-NC 4.0), so
Swapless does not ship it: the bench reads it from a path.

Accepted shapes: the release's ``data/locomo10.json`` (a list of samples, each with a
``conversation`` and a ``qa`` list), one conversation as an object (its sessions and
``qa`` at the top level, as in the zip of the first release), or a folder of such
files.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SESSION = re.compile(r"^session_(\d+)$")
_DIALOG_ID = re.compile(r"D(\d+):(\d+)")


class LocomoError(ValueError):
    """The file is not LoCoMo-shaped (one line says what is missing)."""


@dataclass(frozen=True)
class Turn:
    """One turn of a conversation.

    Attributes:
        dialog_id: LoCoMo's id, normalised ("D3:14").
        speaker: Who said it.
        text: What they said, with a shared photo's caption after it.
    """

    dialog_id: str
    speaker: str
    text: str


@dataclass(frozen=True)
class Question:
    """An annotated question.

    Attributes:
        text: The question.
        evidence: Dialog ids of the turns that hold its answer (normalised).
        category: LoCoMo's category number (0 when absent).
    """

    text: str
    evidence: tuple[str, ...]
    category: int


@dataclass(frozen=True)
class Conversation:
    """One conversation: its turns in order and its questions.

    Attributes:
        name: The sample id (or the file name).
        speaker_a: The first speaker (Swapless's ``user``; the other is the reply).
        turns: Every turn, sessions in order.
        questions: The annotated questions.
    """

    name: str
    speaker_a: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


def load(path: Path) -> list[Conversation]:
    """Read every conversation at ``path`` (a file or a folder of files).

    Raises:
        LocomoError: Nothing LoCoMo-shaped is there.
    """
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise LocomoError(f"{path} holds no .json file")
    else:
        files = [path]
    conversations: list[Conversation] = []
    for file in files:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise LocomoError(f"{file} is not readable JSON: {error}") from None
        samples = data if isinstance(data, list) else [data]
        for index, sample in enumerate(samples):
            name = f"{file.stem}#{index}" if len(samples) > 1 else file.stem
            conversations.append(_conversation(sample, name))
    return conversations


def dialog_ids(text: str) -> list[str]:
    """The dialog ids in an evidence entry, normalised ("D1:3"; some entries hold two)."""
    return [f"D{int(s)}:{int(t)}" for s, t in _DIALOG_ID.findall(text)]


def _conversation(sample: Any, name: str) -> Conversation:
    if not isinstance(sample, dict):
        raise LocomoError(f"{name}: a sample must be an object")
    body = sample.get("conversation", sample)
    if not isinstance(body, dict) or "speaker_a" not in body:
        raise LocomoError(f"{name}: no conversation with speaker_a")
    sessions = sorted(
        (int(match.group(1)), value)
        for key, value in body.items()
        if (match := _SESSION.match(key)) and isinstance(value, list)
    )
    turns = []
    for _, session in sessions:
        for turn in session:
            ids = dialog_ids(str(turn.get("dia_id", "")))
            text = str(turn.get("text", "")).strip()
            caption = turn.get("blip_caption")
            if caption:
                text = f"{text} [shares a photo: {caption}]".strip()
            if ids and text:
                turns.append(Turn(ids[0], str(turn.get("speaker", "")), text))
    if not turns:
        raise LocomoError(f"{name}: no session turns")
    questions = []
    for item in sample.get("qa", []):
        evidence = tuple(
            i for entry in item.get("evidence", []) for i in dialog_ids(entry)
        )
        if item.get("question") and evidence:
            category = item.get("category")
            questions.append(
                Question(
                    str(item["question"]),
                    evidence,
                    category if isinstance(category, int) else 0,
                )
            )
    return Conversation(
        str(sample.get("sample_id", name)),
        str(body["speaker_a"]),
        tuple(turns),
        tuple(questions),
    )
