"""Streaming renders: equal to a whole render at every step, parsing only the reply's end."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from app.core.text.incremental_markdown import IncrementalMarkdown
from app.core.text.markdown_html import DARK_THEME, render_markdown

DATA = Path(__file__).resolve().parents[2] / "data"
REPLY_PARTS = [
    "## Setting up\n\nFirst install the **package** with `pip` and check the"
    " [docs](https://example.com/docs_(v2)).\n",
    "1. Create a virtual environment\n2. Install it:\n   ```bash\n   pip install mlx\n"
    "   ```\n3. Run `swapless`\n",
    "| Preset | KV bits |\n|:--|--:|\n| chat | 8 |\n| precise | 16 |\n",
    "> A quote that goes on\nlazily over two lines.\n",
    "```python\ndef fit(tokens):\n    return tokens[-4096:]\n```\n",
    "Some *emphasis* across\na line break, a ~~strike~~ and a task list:\n\n"
    "- [x] done\n- [ ] open\n",
    "Text\n===\n\nwith a setext heading, a rule\n\n---\n\nand a paragraph.\n",
]


def _reply(parts: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "\n".join(rng.choice(REPLY_PARTS) for _ in range(parts))


def _stream(text: str, rng: random.Random, low: int = 1, high: int = 12):
    """Yield growing prefixes of ``text``, cut at random places (mid-line too)."""
    position = 0
    while position < len(text):
        position = min(len(text), position + rng.randint(low, high))
        yield text[:position]


def _same(a, b) -> bool:
    return a.blocks == b.blocks and a.code_blocks == b.code_blocks


def test_every_step_of_a_streamed_reply_equals_a_whole_render():
    text = _reply(30)
    renderer = IncrementalMarkdown()
    steps = 0
    for prefix in _stream(text, random.Random(1)):
        steps += 1
        assert _same(renderer.render(prefix), render_markdown(prefix)), prefix[-80:]
    assert steps > 300


def test_every_spec_example_streams_to_the_whole_render():
    examples = json.loads(
        (DATA / "commonmark_0.31.2_examples.json").read_text(encoding="utf-8")
    )["examples"]
    rng = random.Random(2)
    for example in examples:
        renderer = IncrementalMarkdown()
        for prefix in _stream(example["markdown"], rng, 1, 5):
            assert _same(renderer.render(prefix), render_markdown(prefix)), (
                example["example"],
                prefix,
            )


def test_settled_blocks_are_kept_and_only_the_end_is_parsed():
    text = _reply(900, seed=3)
    assert len(text) > 60_000
    renderer = IncrementalMarkdown()
    parsed = []
    for prefix in _stream(text, random.Random(4), 50, 150):
        result = renderer.render(prefix)
        parsed.append(renderer.parsed_chars)
    assert result.settled > len(result.blocks) - 3
    # Each update parses about the last block or two, not the reply: in total a
    # few times the reply, where whole renders would parse it hundreds of times.
    assert max(parsed) < 2_000
    assert sum(parsed) < 5 * len(text)
    assert _same(result, render_markdown(text))


def test_settled_blocks_keep_their_html_and_code_block_numbers():
    renderer = IncrementalMarkdown()
    first = renderer.render("```py\na = 1\n```\n\nText\n\nMore")
    # "More" is a half-written line: until it ends, "Text" is not settled either.
    assert first.settled == 1
    second = renderer.render("```py\na = 1\n```\n\nText\n\nMore\n\n```py\nb = 2\n```\n")
    assert second.settled == 3
    assert second.blocks[:3] == first.blocks
    assert second.blocks[0] is first.blocks[0]  # cached, not rendered again
    assert second.code_blocks == ("a = 1", "b = 2")
    assert 'href="copy-code:1"' in second.blocks[-1]


def test_a_partial_last_line_keeps_the_block_above_open():
    renderer = IncrementalMarkdown()
    assert renderer.render("para\n#").settled == 0  # "#" is a heading for now
    assert renderer.render("para\n#a").blocks == ("<p>para\n#a</p>",)


def test_a_late_link_definition_changes_earlier_blocks():
    renderer = IncrementalMarkdown()
    text = "See [the docs] first.\n\nThen more.\n\nAnd more.\n\n"
    renderer.render(text)
    final = text + "[the docs]: https://example.com\n"
    result = renderer.render(final)
    assert '<a href="https://example.com">the docs</a>' in result.blocks[0]
    assert _same(result, render_markdown(final))


def test_footnotes_stream_to_the_whole_render():
    text = "A claim.[^1]\n\nMore text.\n\nAnother.[^2]\n\n[^1]: First.\n[^2]: Second.\n"
    renderer = IncrementalMarkdown()
    for prefix in _stream(text, random.Random(5)):
        assert _same(renderer.render(prefix), render_markdown(prefix))


@pytest.mark.parametrize("edited", ["Different text", "", "```\nnew"])
def test_text_that_does_not_extend_the_last_one_renders_from_scratch(edited):
    renderer = IncrementalMarkdown()
    renderer.render(_reply(10))
    assert _same(renderer.render(edited), render_markdown(edited))


def test_carriage_returns_split_across_updates():
    renderer = IncrementalMarkdown()
    renderer.render("line one\r")
    assert _same(
        renderer.render("line one\r\nline two"), render_markdown("line one\nline two")
    )


def test_the_theme_is_the_renderers():
    result = IncrementalMarkdown(DARK_THEME).render("```\ncode\n```")
    assert DARK_THEME.code_background in result.html


def test_work_estimates_the_characters_to_parse():
    renderer = IncrementalMarkdown()
    text = "First paragraph.\n\nSecond paragraph.\n\nThird"
    assert renderer.work(text) == len(text)
    renderer.render(text)
    assert renderer.work(text + " more") == len("Second paragraph.\n\nThird more")
    assert renderer.work("unrelated") == len("unrelated")
