"""The grammars of calls written as markup (`markup_grammars`), checked token by token
with llguidance itself on the tiny model's tokenizer (call markers as special tokens,
as in the real vocabularies)."""

from __future__ import annotations

import llguidance

from app.core.tools.grammar import Marker
from app.core.tools.markup_grammars import forced_call_grammar, lazy_markup_grammar
from app.core.tools.tool_specs import ToolChoice, parse_tools

TOOLS = parse_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "book",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "minLength": 2, "maxLength": 9},
                        "room": {"enum": ["single", "double"]},
                        "nights": {"type": "integer", "minimum": 1},
                        "late": {"type": "boolean"},
                        "extras": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["city", "nights"],
                },
            },
        },
        {"type": "function", "function": {"name": "ping"}},
    ]
)
REQUIRED = ToolChoice("required")


def accepts(lltok, grammar: str, text: str) -> bool:
    matcher = llguidance.LLMatcher(lltok, grammar)
    assert not matcher.is_error(), matcher.get_error()
    return matcher.consume_tokens(lltok.tokenize_str(text)) and matcher.is_accepting()


def xml(*args: tuple[str, str], name: str = "book") -> str:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args)
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def test_xml_calls_take_the_schema_and_nothing_else(lltok, markers):
    start, end = markers
    grammar = forced_call_grammar(
        "qwen3_coder", TOOLS, REQUIRED, start=start, end=end, parallel=True
    )
    assert grammar is not None
    good = xml(("city", "São\nPaulo"), ("room", "double"), ("nights", "3"))
    assert accepts(lltok, grammar, good)
    assert accepts(lltok, grammar, good + "\n" + xml(name="ping"))
    assert accepts(
        lltok, grammar, xml(("city", "Rome"), ("nights", "1"), ("late", "true"))
    )
    refused = [
        xml(("city", "Rome")),  # a required argument missing
        xml(("city", "Rome"), ("nights", "0")),  # below the minimum
        xml(("city", "R"), ("nights", "2")),  # shorter than minLength
        xml(("city", "Rome"), ("room", "suite"), ("nights", "2")),  # not in the enum
        xml(("city", "a</parameter>b"), ("nights", "2")),  # the closing tag inside
        xml(("nights", "2"), ("city", "Rome")),  # out of the schema's order
        xml(("city", "Rome"), ("nights", "2"), ("pets", "1")),  # not in the schema
        xml(name="pong"),  # not an offered tool
    ]
    for text in refused:
        assert not accepts(lltok, grammar, text), text


def test_a_named_xml_call_and_the_lazy_grammar_after_the_marker(lltok, markers):
    start, end = markers
    named = forced_call_grammar(
        "qwen3_coder",
        TOOLS,
        ToolChoice("named", "ping"),
        start=start,
        end=end,
        parallel=False,
    )
    assert accepts(lltok, named, xml(name="ping"))
    assert not accepts(lltok, named, xml(("city", "Rome"), ("nights", "2")))
    lazy = lazy_markup_grammar("qwen3_coder", TOOLS, end=end)
    assert lazy is not None
    assert accepts(lltok, lazy, xml(name="ping").removeprefix("<tool_call>"))


def glm(*args: tuple[str, str], name: str = "book") -> str:
    """A call as GLM-4.6's template writes one (tests/data/templates/glm-4.6.jinja)."""
    params = "".join(
        f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in args
    )
    return f"<tool_call>{name}\n{params}</tool_call>"


def test_glm_calls_take_the_schema_and_no_whitespace_the_parser_would_strip(
    lltok, markers
):
    start, end = markers
    grammar = forced_call_grammar(
        "glm47", TOOLS, REQUIRED, start=start, end=end, parallel=True
    )
    assert grammar is not None
    good = glm(("city", "São Paulo"), ("room", "double"), ("nights", "3"))
    assert accepts(lltok, grammar, good)
    assert accepts(lltok, grammar, good + "\n" + glm(name="ping"))
    assert accepts(
        lltok, grammar, glm(("city", "Rome"), ("nights", "1"), ("late", "true"))
    )
    assert accepts(lltok, grammar, glm(("city", "a\nb"), ("nights", "2")))
    refused = [
        glm(("city", "Rome")),  # a required argument missing
        glm(("city", "Rome"), ("nights", "0")),  # below the minimum
        glm(("city", " Rome"), ("nights", "2")),  # read back as "Rome"
        glm(("city", "Ro "), ("nights", "2")),  # read back as "Ro"... too
        glm(("city", "  R"), ("nights", "2")),  # ... and "R" is below minLength
        glm(("city", "a</arg_value>b"), ("nights", "2")),  # the closing tag inside
        glm(("nights", "2"), ("city", "Rome")),  # out of the schema's order
        glm(name="pong"),  # not an offered tool
    ]
    for text in refused:
        assert not accepts(lltok, grammar, text), text
    lazy = lazy_markup_grammar("glm47", TOOLS, end=end)
    assert lazy is not None
    assert accepts(lltok, lazy, glm(name="ping").removeprefix("<tool_call>"))
    call = glm(("city", "Rome"), ("nights", "2")).removeprefix("<tool_call>")
    assert accepts(lltok, lazy, call)


GLM_TAGS = ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")


def test_glm_tags_held_as_tokens_are_written_as_those_tokens(tmp_path):
    from tests.core.tools.tool_model import make_tool_model

    folder = make_tool_model(
        tmp_path / "glm", markers=("<tool_call>", "</tool_call>", *GLM_TAGS)
    )
    lltok = llguidance.LLTokenizer((folder / "tokenizer.json").read_text("utf-8"))
    ids = {t: lltok.tokenize_str(t) for t in ("<tool_call>", "</tool_call>", *GLM_TAGS)}
    assert all(len(v) == 1 for v in ids.values())

    def mark(text: str) -> Marker:
        return Marker(text, ids[text][0]) if text in ids else Marker(text)

    start, end = mark("<tool_call>"), mark("</tool_call>")
    forced = forced_call_grammar(
        "glm47", TOOLS, REQUIRED, start=start, end=end, parallel=False, mark=mark
    )
    lazy = lazy_markup_grammar("glm47", TOOLS, end=end, mark=mark)
    assert forced is not None and lazy is not None
    call = glm(("city", "Rome"), ("nights", "2"), ("extras", '["cot"]'))
    assert accepts(lltok, forced, call)
    assert accepts(lltok, lazy, call.removeprefix("<tool_call>"))
    assert not accepts(lltok, forced, glm(("city", " Rome"), ("nights", "2")))
    # Written as text, the tags match no token of this vocabulary's.
    as_text = forced_call_grammar(
        "glm47", TOOLS, REQUIRED, start=start, end=end, parallel=False
    )
    assert not accepts(lltok, as_text, call)


def test_pythonic_calls_write_json_values_and_separate_present_arguments(
    lltok, markers
):
    start, end = markers
    grammar = forced_call_grammar(
        "pythonic", TOOLS, REQUIRED, start=start, end=end, parallel=True
    )
    assert grammar is not None

    def call(body: str) -> str:
        return f"<tool_call>[{body}]</tool_call>"

    assert accepts(lltok, grammar, call('book(city="Rome", nights=2)'))
    assert accepts(
        lltok,
        grammar,
        call('book(city="Rome", room="single", nights=2, extras=["cot"]), ping()'),
    )
    for body in (
        'book(city="Rome")',
        "book(, nights=2)",
        "pong()",
        'book(nights=2, city="Rome")',
    ):
        assert not accepts(lltok, grammar, call(body)), body
    lazy = lazy_markup_grammar("pythonic", TOOLS, end=end)
    assert lazy is not None and accepts(lltok, lazy, "[ping()]</tool_call>")


def test_mistral_calls_follow_the_template_s_variant(lltok, markers):
    start = Marker("[TOOL_CALLS]")
    end = Marker("")
    listed = forced_call_grammar(
        "mistral", TOOLS, REQUIRED, start=start, end=end, parallel=True
    )
    headers = forced_call_grammar(
        "mistral",
        TOOLS,
        REQUIRED,
        start=start,
        end=end,
        parallel=True,
        template="… [TOOL_CALLS]{{ name }}[ARGS]{{ arguments }} …",
    )
    assert listed is not None and headers is not None
    book = '{"city": "Rome", "nights": 2}'
    as_list = f'[TOOL_CALLS] [{{"name": "book", "arguments": {book}}}, {{"name": "ping", "arguments": {{}}}}]'
    as_headers = f"[TOOL_CALLS]book[ARGS]{book}[TOOL_CALLS]ping[ARGS]{{}}"
    assert accepts(lltok, listed, as_list) and not accepts(lltok, listed, as_headers)
    assert accepts(lltok, headers, as_headers) and not accepts(lltok, headers, as_list)
    # A tool without parameters takes none; a required argument must be there.
    assert not accepts(lltok, headers, '[TOOL_CALLS]ping[ARGS]{"x": 1}')
    assert not accepts(lltok, headers, '[TOOL_CALLS]book[ARGS]{"city": "Rome"}')


def test_other_formats_have_no_grammar(markers):
    start, end = markers
    assert (
        forced_call_grammar(
            "function_gemma", TOOLS, REQUIRED, start=start, end=end, parallel=False
        )
        is None
    )
    assert lazy_markup_grammar("function_gemma", TOOLS, end=end) is None
