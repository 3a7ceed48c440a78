"""The built-in probes: shipped texts, a fixed seed, sizes that fit the model."""

from __future__ import annotations

from app.core.quality import probes


def encode(text: str) -> list[int]:
    return [ord(c) for c in text]


def decode(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids)


def test_the_shipped_texts_are_a_few_thousand_tokens_plus_a_repeat():
    texts = dict(probes.probe_texts())
    assert set(texts) == {"prose", "code", "dialogue", "repeated"}
    assert 8000 < sum(len(texts[n]) for n in ("prose", "code", "dialogue")) < 40000
    opening = "\n\n".join(texts["prose"].split("\n\n")[:2])
    assert texts["repeated"] == f"{opening}\n\n{opening}"


def test_probe_sets_are_the_same_every_time():
    a = probes.build_probes(probes.QUICK, encode, decode)
    b = probes.build_probes(probes.QUICK, encode, decode)
    assert a == b
    assert len(a.pass_keys) == 4 and len(a.trim_cases) == 2
    assert a.settings_key == f"probes-v{probes.PROBE_VERSION}:quick"


def test_pass_keys_longer_than_the_model_context_are_left_out():
    full = probes.build_probes(probes.FULL, encode, decode, max_context=1100)
    assert {task.distance for task in full.pass_keys} == {64, 256, 512}


def test_trim_cases_put_one_fact_on_each_side_of_the_cut():
    case = probes.build_probes(probes.QUICK, encode, decode).trim_cases[0]
    assert case.dropped_answer in case.dropped[0][1]
    assert case.kept_answer in case.kept[0][1]
    assert case.kept_answer not in " ".join(text for _, text in case.dropped[:2])
    assert case.kept_question[-1]["content"].endswith(f"{case.kept_answer}.")
    assert case.dropped_question[-1]["content"].endswith(f"{case.dropped_answer}.")
