"""The preset editor's checks speak the form's words and catch what cannot work."""

from __future__ import annotations

from app.core.presets.preset_form import check_form, label
from app.core.presets.presets import get_preset

KEY_NAMES = ("max_tokens", "max_context", "summary_max_tokens", "keep_ratio")


def _values(**changes):
    values = get_preset("chat").to_dict()
    values["name"] = "my-chat"
    values.update(changes)
    return values


def _messages(problems):
    return [p.message for p in problems]


def test_a_valid_form_gives_the_preset_and_no_problem():
    preset, problems = check_form(_values())
    assert preset is not None and preset.name == "my-chat" and problems == []


def test_a_reply_as_long_as_the_context_is_refused_in_form_words():
    preset, problems = check_form(_values(max_context=4096, max_tokens=4096))
    assert preset is None
    (problem,) = problems
    assert problem.field == "max_tokens" and problem.blocking
    assert problem.message == (
        "Reply length must be smaller than the context limit (4,096 tokens)."
    )


def test_a_reply_that_leaves_no_room_for_a_summary_is_refused():
    preset, problems = check_form(_values(max_context=1024, max_tokens=1000))
    assert preset is None
    assert "keep it under 992 tokens" in problems[0].message


def test_long_replies_are_a_warning_not_a_refusal():
    preset, problems = check_form(_values(max_context=2048, max_tokens=1500))
    assert preset is not None
    assert [p.blocking for p in problems] == [False]
    assert "more than half of the context limit" in problems[0].message


def test_field_problems_use_labels_not_keys():
    cases = {
        "max_context": ("12x", "Context limit must be a whole number."),
        "keep_ratio": (1.5, "Share kept when trimming must be between 0.1 and 0.9."),
        "max_tokens": (0, "Reply length must be between 1 and 65,536."),
        "temperature": ("hot", "Temperature must be a number."),
    }
    for field, (value, expected) in cases.items():
        preset, problems = check_form(_values(**{field: value}))
        assert preset is None
        assert _messages(problems) == [expected]
        assert problems[0].field == field
        assert not any(key in expected for key in KEY_NAMES)


def test_a_bad_name_is_explained():
    _, problems = check_form(_values(name="Bad Name"))
    assert _messages(problems) == [
        "Name: use 1 to 40 lowercase letters, digits, '-' or '_'."
    ]


def test_labels_drop_their_units():
    assert label("max_context") == "Context limit"
    assert label("kv_bits") == "KV precision"


def test_a_kept_share_summary_and_reply_that_fill_the_limit_are_warned_about():
    # The case found by hand: a limit of 400 keeping 0.6 with a 256-token summary.
    preset, problems = check_form(
        _values(max_context=400, keep_ratio=0.6, summary_max_tokens=256, max_tokens=64)
    )
    assert preset is not None  # a warning, not a refusal
    (problem,) = problems
    assert problem.field == "keep_ratio" and not problem.blocking
    assert "240 tokens" in problem.message and "nearly every message will trim" in (
        problem.message
    )


def test_segments_longer_than_the_loaded_models_context_are_warned_about():
    values = _values(segment_tokens=8192)
    assert check_form(values)[1] == []  # no model known: nothing to compare with
    preset, problems = check_form(values, trained_context=4096)
    assert preset is not None
    (problem,) = problems
    assert problem.field == "segment_tokens" and not problem.blocking
    assert "(8,192)" in problem.message and "(4,096 tokens)" in problem.message
