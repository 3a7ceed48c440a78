"""The recall_view part: LoCoMo-shaped evidence in view, on a file built here.

LoCoMo itself is not shipped (CC BY-NC 4.0) and the tests never fetch it: the
conversation below has LoCoMo's shape (sessions of turns with dialog ids, questions
naming their evidence turns) and is long enough that a 2K limit trims its start.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from app.bench.context import BenchContext
from app.bench.parts.recall import in_view, locomo
from app.bench.results import NotAvailable
from app.bench.settings import SMOKE

WORDS = [
    "harbor",
    "lantern",
    "meadow",
    "orchard",
    "canyon",
    "pebble",
    "violin",
    "ledger",
    "marble",
    "thistle",
    "copper",
    "willow",
    "saffron",
    "glacier",
    "kettle",
    "ribbon",
    "compass",
    "quarry",
    "falcon",
    "tundra",
]


def _filler(rng: random.Random, speaker: str) -> str:
    picked = [rng.choice(WORDS) for _ in range(12)]
    return (
        f"Yesterday {speaker.lower()} walked past the {picked[0]} and the {picked[1]}, "
        f"then talked about {picked[2]}, {picked[3]} and {picked[4]} for a while, "
        f"before the {picked[5]} and {picked[6]} near the {picked[7]}."
    )


def _locomo_file(folder: Path) -> Path:
    rng = random.Random(7)
    sessions: dict = {"speaker_a": "Ana", "speaker_b": "Ben"}
    session_1 = [
        {
            "speaker": "Ana",
            "dia_id": "D1:1",
            "text": "I adopted a greyhound named Quillon.",
        },
        {
            "speaker": "Ben",
            "dia_id": "D1:2",
            "text": "Quillon is a lovely name!",
            "blip_caption": "a photo of a grey dog on a sofa",
        },
    ]
    sessions["session_1"] = session_1
    sessions["session_1_date_time"] = "1:00 pm on 8 May, 2023"
    for number in range(2, 7):
        turns = []
        for index in range(1, 13):
            speaker = "Ana" if index % 2 else "Ben"
            turns.append(
                {
                    "speaker": speaker,
                    "dia_id": f"D{number}:{index}",
                    "text": _filler(rng, speaker),
                }
            )
        sessions[f"session_{number}"] = turns
    sessions["session_9"] = [
        {"speaker": "Ana", "dia_id": "D9:1", "text": "I just repainted my kayak teal."},
        {"speaker": "Ben", "dia_id": "D9:2", "text": "Teal suits a kayak."},
    ]
    sample = {
        "sample_id": "shape-1",
        "conversation": sessions,
        "qa": [
            {
                "question": "What is the name of the greyhound Ana adopted?",
                "answer": "Quillon",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "What colour did Ana paint her kayak?",
                "answer": "teal",
                "evidence": ["D9:1"],
                "category": 4,
            },
            # Two ids in one entry, as some of LoCoMo's annotations have.
            {
                "question": "Which greyhound, Quillon, was on the sofa photo?",
                "answer": "Quillon",
                "evidence": ["D1:1; D1:2"],
                "category": 1,
            },
            {
                "question": "What did they say in session 99?",
                "answer": "x",
                "evidence": ["D99:1"],
                "category": 2,
            },
            {"question": "No evidence at all?", "answer": "x", "evidence": []},
        ],
    }
    path = folder / "locomo_shaped.json"
    path.write_text(json.dumps([sample]))
    return path


def _ctx(tmp_path: Path, locomo_path: str) -> BenchContext:
    settings = SMOKE.with_changes(locomo_path=locomo_path, recall_cases=2)
    return BenchContext(
        engine=None,  # type: ignore[arg-type]  # the part loads only a tokenizer
        model_dir=tmp_path,
        settings=settings,
        out_dir=tmp_path,
        log=lambda line: None,
        scratch=tmp_path,
    )


def test_the_loader_reads_both_shapes_and_normalises_evidence(tmp_path):
    path = _locomo_file(tmp_path)
    [conversation] = locomo.load(path)
    assert conversation.name == "shape-1" and conversation.speaker_a == "Ana"
    assert len(conversation.turns) == 2 + 5 * 12 + 2
    assert conversation.turns[1].text.endswith(
        "[shares a photo: a photo of a grey dog on a sofa]"
    )
    # The question without evidence is left out; two ids in one entry are two.
    assert [q.evidence for q in conversation.questions][2] == ("D1:1", "D1:2")
    assert len(conversation.questions) == 4
    # One conversation as an object, in a folder (the first release's zip).
    body = json.loads(path.read_text())[0]
    folder = tmp_path / "v2"
    folder.mkdir()
    (folder / "26.json").write_text(
        json.dumps({**body["conversation"], "qa": body["qa"]})
    )
    [same] = locomo.load(folder)
    assert same.turns == conversation.turns and same.name == "26"
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(locomo.LocomoError, match="not readable JSON"):
        locomo.load(tmp_path / "bad.json")
    (tmp_path / "shapeless.json").write_text("[{}]")
    with pytest.raises(locomo.LocomoError, match="speaker_a"):
        locomo.load(tmp_path / "shapeless.json")


def test_the_part_counts_evidence_in_view_on_a_locomo_shaped_file(tmp_path):
    path = _locomo_file(tmp_path)
    result = in_view.run(_ctx(tmp_path, str(path)))
    cells = result.figures["locomo"]
    assert cells["questions"] == 3 and cells["unresolved"] == 1
    at_2k = cells["limits"]["2048"]["modes"]
    # The greyhound turns are trimmed at 2K: the newest-first keep does not see
    # them; recall, asked with the question, brings the named turn back.
    assert at_2k["oldest"]["any"] == 1  # only the kayak question
    assert at_2k["recall"]["all"] >= 2
    # At 8K the whole conversation fits: every question's evidence is in view.
    assert cells["limits"]["8192"]["modes"]["oldest"]["all"] == 3
    for mode in in_view.MODES:
        cell = cells["limits"]["2048"]["modes"][mode]
        low, high = cell["wilson_all"]
        assert 0 <= low <= cell["share_all"] <= high <= 1
    assert set(result.figures["synthetic"]) == {
        "dormant",
        "referred",
        "distractors",
        "updated",
    }
    assert result.figures["synthetic"]["dormant"]["oldest"]["total"] == 2
    assert "default_on" in result.figures["verdict"]
    assert any(row.measurement.startswith("LoCoMo at 2K") for row in result.rows)


def test_without_locomo_data_the_part_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv(in_view.ENV, raising=False)
    ctx = _ctx(tmp_path, "")
    assert in_view.locomo_path(ctx) is None
    monkeypatch.setenv(in_view.ENV, str(tmp_path / "nowhere.json"))
    assert in_view.locomo_path(ctx) == tmp_path / "nowhere.json"
    with pytest.raises(NotAvailable, match="no LoCoMo data at"):
        in_view.run(ctx)


def _cells(referred: tuple[int, int], dormant: tuple[int, int]) -> dict:
    """Synthetic cells: (newest-first hits, most-used hits) of 200, with recall the same."""

    def by_mode(pair: tuple[int, int]) -> dict:
        plain, scored = ({"any": hits, "total": 200} for hits in pair)
        return {
            "oldest": plain,
            "importance": scored,
            "recall": plain,
            "recall_importance": scored,
        }

    return {"referred": by_mode(referred), "dormant": by_mode(dormant)}


def test_the_verdict_needs_a_gain_beyond_chance_and_no_loss_beyond_it():
    # 40/200 against 0/200: the intervals are apart, a real gain.
    assert in_view.verdict(_cells((0, 40), (0, 8)))["default_on"] is True
    # 139/200 against 133/200 (this run's cells with recall): within chance.
    assert in_view.verdict(_cells((133, 139), (200, 200)))["default_on"] is False
    # A gain on referred facts that loses dormant ones beyond chance is off.
    assert in_view.verdict(_cells((0, 40), (200, 150)))["default_on"] is False


def test_the_command_line_takes_a_locomo_path_and_refuses_a_missing_one(
    tmp_path, capsys
):
    import argparse

    from app.cli import bench_command

    parser = argparse.ArgumentParser()
    bench_command.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "--only", "recall_view", "--locomo", "x.json"])
    assert bench_command._command_args(args)[-2:] == ["--locomo", "x.json"]
    missing = str(tmp_path / "nowhere.json")
    code = bench_command.run(
        parser.parse_args(["bench", "--only", "recall_view", "--locomo", missing])
    )
    assert code == 2
    assert (
        capsys.readouterr().err.strip()
        == f"swapless bench: no LoCoMo data at {missing}"
    )
