"""Stop sequences across streamed pieces: never sent, not even in part."""

from __future__ import annotations

import pytest

from app.server.service.stop_sequences import StopScanner


def stream(pieces, stops):
    scanner = StopScanner(stops)
    sent = [scanner.feed(piece) for piece in pieces]
    return "".join(sent) + scanner.flush(), scanner.stopped, sent


def test_text_without_stops_passes_straight_through():
    assert stream(["ab", "cd"], ()) == ("abcd", False, ["ab", "cd"])


@pytest.mark.parametrize(
    ("pieces", "stops", "expected"),
    [
        (["hello ", "wor", "ld END more"], ("END",), "hello world "),
        (["abc<", "|im", "_end|>", "tail"], ("<|im_end|>",), "abc"),
        (["xx", "STO", "P"], ("STOP", "xxS"), ""),  # the earliest match wins
        (["a", "b", "c"], ("bc", "abc"), ""),
    ],
)
def test_the_reply_ends_before_the_first_stop(pieces, stops, expected):
    text, stopped, _ = stream(pieces, stops)
    assert stopped and text == expected


def test_a_partial_match_is_held_back_then_released():
    scanner = StopScanner(("END",))
    assert scanner.feed("one E") == "one "
    assert scanner.feed("N") == ""
    assert scanner.feed("x") == "ENx"  # it was no stop after all
    assert scanner.feed("final E") == "final "
    assert scanner.flush() == "E"
    assert not scanner.stopped


def test_nothing_is_sent_after_a_stop():
    scanner = StopScanner(("!",))
    assert scanner.feed("hi! there") == "hi"
    assert scanner.feed("more") == "" and scanner.flush() == ""
