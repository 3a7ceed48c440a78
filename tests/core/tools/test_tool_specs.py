"""Tool definitions, tool choice and grammars: refused in words, bounded in size."""

from __future__ import annotations

import pytest

from app.core.tools.grammar import (
    Marker,
    check_grammar,
    json_schema_grammar,
    tool_call_grammar,
)
from app.core.tools.tool_specs import (
    MAX_SCHEMA_DEPTH,
    MAX_TOOLS,
    ToolChoice,
    ToolInputError,
    parse_tool_choice,
    parse_tools,
)


def tool(name="get_weather", description="d", parameters=None):
    function = {"name": name, "description": description}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def refused(call, *args, **kwargs) -> ToolInputError:
    with pytest.raises(ToolInputError) as info:
        call(*args, **kwargs)
    return info.value


def test_a_tool_without_parameters_takes_no_arguments():
    specs = parse_tools([tool(), tool("b", parameters={"type": "object"})])
    assert [s.name for s in specs] == ["get_weather", "b"]
    # OpenAI: omitting parameters defines a function with an empty parameter list.
    assert specs[0].parameters == {}
    assert specs[0].arguments_schema()["additionalProperties"] is False
    rendered = specs[0].template_dict()["function"]["parameters"]
    assert rendered == {"type": "object", "properties": {}}
    # A schema given is kept as given: {"type": "object"} takes any arguments.
    assert specs[1].arguments_schema() == {"type": "object"}


@pytest.mark.parametrize(
    ("tools", "field", "words"),
    [
        (
            [tool(parameters={"type": "object", "properties": 3})],
            "parameters",
            "not a valid JSON schema",
        ),
        (
            [tool(parameters={"type": "string"})],
            "parameters",
            "must describe an object",
        ),
        ([tool(name="has space")], "function.name", "1 to 64"),
        ([tool(), tool()], "tools[1].function.name", "defined twice"),
        ([tool(description="x" * 1_000_000)], "description", "at most"),
        ([tool(f"t{i}") for i in range(500)], "tools", f"at most {MAX_TOOLS}"),
    ],
)
def test_bad_tools_are_refused_naming_the_field(tools, field, words):
    error = refused(parse_tools, tools)
    assert field in error.field
    assert words in str(error)


def test_deeply_nested_schemas_are_refused_before_any_work():
    schema: dict = {"type": "object"}
    for _ in range(200):
        schema = {"type": "object", "properties": {"a": schema}}
    error = refused(parse_tools, [tool(parameters=schema)])
    assert f"at most {MAX_SCHEMA_DEPTH}" in str(error)


def test_tool_choice_modes_and_names():
    specs = parse_tools([tool()])
    assert parse_tool_choice(None, specs) == ToolChoice("auto")
    assert parse_tool_choice(None, ()) == ToolChoice("none")
    assert parse_tool_choice("required", specs).forces_call
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert parse_tool_choice(named, specs) == ToolChoice("named", "get_weather")
    unknown = {"type": "function", "function": {"name": "nope"}}
    error = refused(parse_tool_choice, unknown, specs)
    assert error.field == "tool_choice.function.name"
    assert "not among the offered tools" in str(error)


def test_a_schema_the_library_cannot_enforce_is_refused_in_its_words():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "pattern": "(?<=x)y"}},
    }
    error = refused(check_grammar, json_schema_grammar(schema), "response_format")
    assert "look-around" in str(error)
    check_grammar(json_schema_grammar({"type": "object"}), "response_format")


def test_a_forced_call_grammar_compiles_with_markers_as_tokens_or_text():
    specs = parse_tools([tool(), tool("b")])
    for start, end in ((Marker("<tool_call>"), Marker("</tool_call>")),):
        grammar = tool_call_grammar(
            specs, ToolChoice("required"), start=start, end=end, parallel=True
        )
        check_grammar(grammar, "tools")
