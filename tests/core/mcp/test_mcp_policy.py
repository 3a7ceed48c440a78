"""Pure MCP-host policy: results cut in the open, consent, unique tool names."""

from __future__ import annotations

import pytest

from app.core.mcp.catalog import ToolCatalog
from app.core.mcp.consent import ConsentPolicy, Decision
from app.core.mcp.host import ServerTool
from app.core.mcp.result_fit import fit_result
from app.core.turn.parts import ToolSpec


def words(text: str) -> int:
    """A whitespace tokenizer: counts grow with the prefix, like a real one's."""
    return len(text.split())


def test_a_result_that_fits_is_untouched():
    fitted = fit_result("one two three", 10, words)
    assert (fitted.text, fitted.cut, fitted.original_tokens) == (
        "one two three",
        False,
        3,
    )


def test_a_large_result_is_cut_at_a_line_with_a_note_and_fits():
    lines = [f"Line {n}: the quick brown fox jumps." for n in range(5000)]
    text = "\n".join(lines)
    fitted = fit_result(text, 300, words)
    assert fitted.cut
    assert fitted.kept_tokens <= 300
    assert fitted.original_tokens == words(text)
    body, note = fitted.text.rsplit("\n\n", 1)
    assert body.endswith("jumps.")  # ends at a whole line
    assert body.split("\n")[-1] in lines
    assert "cut this tool result" in note and f"{words(text):,}" in note


def test_no_room_at_all_still_says_why():
    fitted = fit_result("a " * 1000, 0, words)
    assert fitted.cut and "cut this tool result" in fitted.text
    with pytest.raises(ValueError):
        fit_result("x", -1, words)


def test_consent_once_always_deny_and_trusted():
    policy = ConsentPolicy.from_settings(["files/read"])
    assert not policy.needs_asking("files", "read")
    assert policy.needs_asking("web", "fetch")
    assert policy.record("web", "fetch", Decision.ALLOW_ONCE)
    assert policy.needs_asking("web", "fetch")  # once is once
    assert policy.record("web", "fetch", Decision.ALLOW_ALWAYS)
    assert not policy.needs_asking("web", "fetch")
    assert not policy.record("web", "delete", Decision.DENY)
    assert policy.needs_asking("web", "delete")


def test_clashing_tool_names_are_told_apart():
    catalog = ToolCatalog(
        [
            ServerTool("a", ToolSpec("search")),
            ServerTool("b", ToolSpec("search")),
            ServerTool("b", ToolSpec("fetch")),
        ]
    )
    assert [s.name for s in catalog.specs()] == ["a__search", "b__search", "fetch"]
    offered = catalog.find("b__search")
    assert offered is not None and (offered.server, offered.tool) == ("b", "search")
    assert catalog.find("search") is None
