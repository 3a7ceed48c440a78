"""Bare addresses in text become links by GFM's rules, in linear time."""

from __future__ import annotations

import gc
import time

import pytest

from app.core.text.autolinks import find_links


def _linked(text: str, at_line_start: bool = True) -> list[tuple[str, str]]:
    return [(text[s:e], href) for s, e, href in find_links(text, at_line_start)]


@pytest.mark.parametrize(
    ("text", "links"),
    [
        (
            "see https://example.com/docs.",
            [("https://example.com/docs", "https://example.com/docs")],
        ),
        (
            "www.example.com/a?b=1",
            [("www.example.com/a?b=1", "http://www.example.com/a?b=1")],
        ),
        (
            "(https://w.org/Mercury_(planet))",
            [("https://w.org/Mercury_(planet)", "https://w.org/Mercury_(planet)")],
        ),
        ("https://w.org/a))", [("https://w.org/a", "https://w.org/a")]),
        ("www.a.com/x&amp;", [("www.a.com/x", "http://www.a.com/x")]),
        ("www.a.com/x&y=1", [("www.a.com/x&y=1", "http://www.a.com/x&y=1")]),
        ("https://a.b/c<d", [("https://a.b/c", "https://a.b/c")]),
        ("write to me@example.com!", [("me@example.com", "mailto:me@example.com")]),
        ("a.b+c@d.e-f.org.", [("a.b+c@d.e-f.org", "mailto:a.b+c@d.e-f.org")]),
        ("*www.a.com*", [("www.a.com", "http://www.a.com")]),
    ],
)
def test_addresses_are_found(text, links):
    assert _linked(text) == links


@pytest.mark.parametrize(
    "text",
    [
        "xwww.example.com",
        "https://localhost/x",
        "www.a_b.c_d",
        "https://",
        "me@localhost",
        "me@example.com-",
        "me@example.com_",
        "hello@mail+xyz.example",
        "@example.com",
    ],
)
def test_non_addresses_are_left_alone(text):
    assert _linked(text) == []


def test_a_link_at_the_start_of_a_text_run_needs_a_line_start_or_delimiter():
    assert _linked("www.example.com", at_line_start=False) == []
    assert _linked("me@example.com", at_line_start=False) == [
        ("me@example.com", "mailto:me@example.com")
    ]


@pytest.mark.parametrize(
    "unit", ["www.", "(www.a.b", "@", "a@", "a@b.", "http://a.b/(", ")", "&a;"]
)
def test_long_runs_cost_linear_time(unit):
    small = min(_cpu_seconds(unit * (20_000 // len(unit))) for _ in range(3))
    large = min(_cpu_seconds(unit * (200_000 // len(unit))) for _ in range(3))
    assert large < 1.0
    assert large < 25 * max(small, 0.005), (unit, small, large)


def _cpu_seconds(text: str) -> float:
    # This thread's CPU time with the cyclic collector paused: a full collection costs
    # time in proportion to the test process's whole heap, not to the text.
    gc.collect()
    gc.disable()
    try:
        started = time.thread_time()
        find_links(text)
        return time.thread_time() - started
    finally:
        gc.enable()
