"""The renderer against the published CommonMark 0.31.2 and GFM extension examples.

Data: ``tests/data/commonmark_0.31.2_examples.json`` (all 652 examples of ``spec.txt``
at tag 0.31.2 of commonmark/commonmark-spec) and
``tests/data/gfm_0.29_extension_examples.json`` (the extension sections of
``test/spec.txt`` in github/cmark-gfm), extracted by
``tests/data/commonmark_spec_extract.py``; sources and commits are recorded in the files.

How the comparison is fair. Both the spec's expected HTML and ours go through
`html_outline.outline`, which keeps the text and the nesting of
p, h1–h6, ul, ol (with its start number), li, pre, blockquote, table, tr, th/td (with
alignment), hr, br, em, strong, del, a (with its target) and code. It is strict about
all of those; a heading level, a list start, a link target, a lost paragraph or an
extra emphasis all fail. It forgives only what Qt cannot show or what the app does
differently on purpose, and applies the same rule to both sides:

* Whitespace runs outside ``pre`` count as one space, and spaces next to a block
  boundary are dropped: Qt's rich text collapses them the same way.
* ``b``/``i``/``s`` are the same elements as ``strong``/``em``/``del``; wrappers Qt
  ignores for layout (``thead``, ``tbody``, ``span``, ``div``) are transparent; a code
  block's trailing newlines are not compared (a browser does not draw the last one,
  Qt draws each, so the app leaves the last one out).
* The app's code block (a table with a ``copy-code:`` link around the ``pre``) counts
  as the ``pre`` it contains: the label and the link are chrome, not content. The fence
  language is not compared.
* The app's safety rules, applied to the expected side too: a link whose target is not
  an absolute http/https/mailto URL is inert text (its text is still compared); an image
  is a link labelled with its alt text (its address when the alt text is empty), never
  a loaded picture; a task-list checkbox is the glyph ☑ or ☐.

Left out: the spec's "HTML blocks" and "Raw HTML" sections (64 examples), because
showing HTML as typed is the app's choice, and the GFM "Disallowed Raw HTML" example
for the same reason. Examples elsewhere that contain raw HTML stay in and fail when
escaping changes their result. The GFM autolink examples are run and reported but are
not part of the required set (the issue names tables, strikethrough and task lists).

What still fails, and why: 15 examples outside the raw-HTML sections contain raw HTML
(21, 31, 201, 308, 309, 344, 475–477, 491, 494, 524, 536, 642, 643), and 3 are bare
addresses that CommonMark leaves as text but GFM's autolink extension, which the app
enables, links (608, 611, 612).

The same comparison put the regex renderer this one replaced at 214 of 588 (headings
compared without their level, since it drew every heading as a styled paragraph).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.text.markdown_html import render_markdown
from tests.core.text.html_outline import outline

DATA = Path(__file__).resolve().parents[2] / "data"
EXCLUDED_SECTIONS = {"HTML blocks", "Raw HTML", "Disallowed Raw HTML (extension)"}
REQUIRED_GFM_SECTIONS = {
    "Tables (extension)",
    "Strikethrough (extension)",
    "Task list items (extension)",
}
REQUIRED_SHARE = 0.95


def _examples(name: str) -> list[dict]:
    return json.loads((DATA / name).read_text(encoding="utf-8"))["examples"]


def passes(example: dict) -> bool:
    """Whether our rendering of an example outlines like the spec's HTML."""
    ours = render_markdown(example["markdown"]).html
    return outline(ours) == outline(example["html"])


def _run(examples: list[dict]) -> tuple[int, list[int]]:
    failed = [e["example"] for e in examples if not passes(e)]
    return len(examples) - len(failed), failed


def test_commonmark_spec_examples_pass_at_95_percent(spec_summary):
    examples = [
        e
        for e in _examples("commonmark_0.31.2_examples.json")
        if e["section"] not in EXCLUDED_SECTIONS
    ]
    assert len(examples) == 588
    passed, failed = _run(examples)
    spec_summary.append(
        f"CommonMark 0.31.2: {passed}/{len(examples)} examples pass"
        f" ({passed / len(examples):.1%}); failing: {failed}"
    )
    assert passed >= REQUIRED_SHARE * len(examples), failed


def test_gfm_table_strikethrough_and_task_list_examples_pass(spec_summary):
    examples = _examples("gfm_0.29_extension_examples.json")
    required = [e for e in examples if e["section"] in REQUIRED_GFM_SECTIONS]
    assert len(required) == 12
    passed, failed = _run(required)
    autolinks = [e for e in examples if e["section"] == "Autolinks (extension)"]
    autolinks_passed, autolinks_failed = _run(autolinks)
    spec_summary.append(
        f"GFM 0.29 tables, strikethrough, task lists: {passed}/{len(required)} pass;"
        f" autolinks (not required): {autolinks_passed}/{len(autolinks)}"
    )
    assert passed >= REQUIRED_SHARE * len(required), failed


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        (
            "<p>a  <b>b</b>\n</p>",
            ["<p>", '"a "', "<strong>", '"b"', "</strong>", "</p>"],
        ),
        ('<p><a href="/x">rel</a></p>', ["<p>", '"rel"', "</p>"]),
        ("<p>&lt;em&gt;</p>", ["<p>", '"<em>"', "</p>"]),
        (
            '<p><img src="https://i/x.png" alt="pic" /></p>',
            ["<p>", "<a href=https://i/x.png>", '"pic"', "</a>", "</p>"],
        ),
        ("<pre><code>a\n\n</code></pre>", ["<pre>", '"a"', "</pre>"]),
        (
            '<ol start="3"><li>x</li></ol>',
            ["<ol start=3>", "<li>", '"x"', "</li>", "</ol>"],
        ),
    ],
)
def test_the_outline_keeps_structure_and_applies_the_safety_rules(html, expected):
    assert outline(html) == expected


def test_the_outline_tells_different_structures_apart():
    assert outline("<p><em>a</em></p>") != outline("<p><strong>a</strong></p>")
    assert outline("<h1>a</h1>") != outline("<h2>a</h2>")
    assert outline("<ul><li>a</li></ul>") != outline("<ol><li>a</li></ol>")
    assert outline("<p>a</p><p>b</p>") != outline("<p>a b</p>")
    assert outline('<a href="https://a">x</a>') != outline('<a href="https://b">x</a>')
