"""Training conversations in the reasoning and tool-call format (`chat_format`).

Three things the reference model learns from these, on top of its recall:

* **Thinking**: with the switch on, a reply starts with ``<think>``, a short reasoning
  block in a few fixed shapes that restates the question (or, before a call, the
  value it asks about) and where its answer is, ``</think>``, then the answer; with
  it off, the prompt already holds the empty block and the answer follows directly.
  The recall tasks (`recall_tasks`) are rendered both ways, so the answers after
  reasoning are the same answers the probes score.
* **Calling a tool**: given 1–5 tools and a question that one of them answers, the
  reply is a ``<tool_call>`` naming that tool, its argument copied from the question.
  Half the tools come from a fixed catalogue asked in plain words ("What is the
  weather in "Lisbon"?"); the other half are made up on the spot from words of the
  training text (``fetch_harbour``, one argument or none) and named in the question,
  so what is learned is to copy a name and a value, not to memorise eight tools.
  Values are quoted in most questions: a quoted value is written with the same
  tokens in the question and in the call's JSON, which the copy circuit can follow.
  Argument values are drawn from words of the training text, so they must be copied,
  not memorised; the evaluation uses values from the held-out documents.
* **Answering from a tool's result**: after the ``<tool_response>``, the answer repeats
  the result.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

from app.core.modelkit.reference import chat_format
from app.core.quality import recall_tasks


@dataclass(frozen=True)
class Tool:
    """A tool of the training catalogue: one string argument and a question shape.

    Attributes:
        name: The function's name.
        description: What it does (rendered into the tools list).
        argument: Its one parameter's name.
        questions: Question shapes; ``{}`` is where the argument's value goes.
        result: A result shape; ``{}`` is the value again.
    """

    name: str
    description: str
    argument: str
    questions: tuple[str, ...]
    result: str

    def spec(self) -> dict:
        """The OpenAI-style definition the template renders (no argument: ``""``)."""
        properties = {self.argument: {"type": "string"}} if self.argument else {}
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": properties,
                    "required": [self.argument] if self.argument else [],
                },
            },
        }

    def arguments(self, value: str) -> dict:
        """The call's arguments for ``value``."""
        return {self.argument: value} if self.argument else {}


TOOLS = (
    Tool(
        "get_weather",
        "Get the current weather in a city.",
        "city",
        ("What is the weather in {}?", "How is the weather in {} today?"),
        "It is sunny in {}, 21 degrees.",
    ),
    Tool(
        "get_time",
        "Get the local time in a place.",
        "place",
        ("What time is it in {}?", "Tell me the local time in {}."),
        "In {} it is 14:05.",
    ),
    Tool(
        "search_docs",
        "Search the documentation for a topic.",
        "query",
        ("Search the documentation for {}.", "Find the docs about {}."),
        "The documentation of {} has 3 pages.",
    ),
    Tool(
        "define_word",
        "Look up the meaning of a word.",
        "word",
        ("What does the word {} mean?", "Define the word {}."),
        "The word {} has 2 meanings.",
    ),
    Tool(
        "send_email",
        "Send an email to a person.",
        "to",
        ("Send an email to {}.", "Please email {} for me."),
        "The email to {} was sent.",
    ),
    Tool(
        "play_song",
        "Play a song by its title.",
        "title",
        ("Play the song {}.", "Can you play {} for me?"),
        "Now playing {}.",
    ),
    Tool(
        "read_file",
        "Read a file from disk.",
        "path",
        ("Show me the file {}.", "Read the file {} please."),
        "The file {} has 40 lines.",
    ),
    Tool(
        "get_stock_price",
        "Get the price of a stock.",
        "symbol",
        ("What is the stock price of {}?", "How much is {} trading at?"),
        "{} trades at 120 dollars.",
    ),
)

_WORD = re.compile(r"\b[A-Za-z][a-z]{3,11}\b")


def argument_words(texts: list[str], limit: int = 4000) -> list[str]:
    """Distinct plain words from ``texts`` (argument values), in first-seen order."""
    seen: dict[str, None] = {}
    for text in texts:
        for word in _WORD.findall(text):
            if word not in seen:
                seen[word] = None
                if len(seen) >= limit:
                    return list(seen)
    return list(seen)


def _value(rng: random.Random, words: list[str]) -> str:
    word = rng.choice(words)
    return word.capitalize() if rng.random() < 0.5 else word


_VERBS = ("get", "fetch", "find", "check", "lookup", "open", "count", "list")
_ARGUMENTS = ("name", "query", "text", "item", "key", "topic", "id", "value")


def made_up_tool(rng: random.Random, words: list[str], with_argument: bool) -> Tool:
    """A tool no catalogue has, named from a word, asked for by its name."""
    noun = rng.choice(words).lower()
    # Mostly verb_noun, as tools are named; some without a verb (``secret_word``), so
    # a name's first token is copied, not guessed from the verbs.
    if rng.random() < 0.7:
        name = f"{rng.choice(_VERBS)}_{noun}"
    else:
        name = f"{noun}_{rng.choice(words).lower()}"
    if not with_argument:
        return Tool(
            name,
            f"Return the current {noun}.",
            "",
            (
                f"Use the {name} tool.",
                f"What does {name} return?",
                f"Call {name} and tell me the result.",
            ),
            f"The {noun} is {{}}.",
        )
    argument = rng.choice(_ARGUMENTS)
    return Tool(
        name,
        f"Look up a {noun} by its {argument}.",
        argument,
        (
            f'Use {name} for "{{}}".',
            f'Call {name} with "{{}}".',
            f'Please run the {name} tool on "{{}}".',
        ),
        f"The {noun} of {{}} is ready.",
    )


def _quoted(question: str) -> str:
    return question.replace("{}", '"{}"')


def thinking_for(task: recall_tasks.RecallTask) -> str:
    """A short reasoning block for a recall task: what is asked, where the answer is."""
    question = task.messages[-2]["content"].rsplit("\n", 1)[-1]
    if task.kind == "pass_key":
        return (
            f"The user asks: {question} It was stated at the start of the message. "
            f"The answer is {task.answer}."
        )
    if task.kind == "chat_fact":
        return (
            f"The user asks: {question} They told me earlier in this conversation. "
            f"The answer is {task.answer}."
        )
    if task.kind == "key_value":
        return f"The user asks: {question} I look it up in the table above."
    return "The user wants the text repeated exactly. I copy it word for word."


def recall_conversation(task: recall_tasks.RecallTask, thinking: bool) -> str:
    """A recall task rendered with (or without) a reasoning block before its answer."""
    messages = [dict(m) for m in task.messages]
    if thinking:
        messages[-1]["reasoning_content"] = thinking_for(task)
        return chat_format.render(messages)
    prompt = chat_format.render(
        messages[:-1], add_generation_prompt=True, enable_thinking=False
    )
    return prompt + messages[-1]["content"] + "<|im_end|>\n"


def tool_reasoning(tool: Tool, question: str, value: str) -> str:
    """The reasoning before a call.

    For a tool that takes a value, only the value, quoted (``The user asks about
    "Lisbon".``): it is then the latest quoted word before the call, where layer 1's
    value head looks. Measured on the single-tool probes (docs/reference-model.md):
    restating the whole question failed on its first word, which the model guessed
    rather than copied, and naming the tool and its argument in the reasoning failed
    on those names; the call itself copies them from the tools list. A tool without
    arguments is named in its question, which is restated as before.
    """
    if not tool.argument:
        return (
            f"The user asks: {question} The {tool.name} tool can answer this. "
            "It takes no arguments."
        )
    return f'The user asks about "{value}". A tool can answer this, so I call it.'


@dataclass(frozen=True)
class ToolTask:
    """One tool-use conversation and what a correct reply holds.

    Attributes:
        tools: The definitions offered.
        messages: User question, the call, the tool's result, the final answer.
        tool: The tool that answers the question.
        value: The argument value, as written in the question.
        result: The tool's result text.
    """

    tools: tuple[dict, ...]
    messages: tuple[dict, ...]
    tool: Tool
    value: str
    result: str


def _as_clients_write_it(spec: dict, rng: random.Random) -> dict:
    """``spec`` with the extras real clients add, at random.

    MCP servers and pydantic-built tools give each property a ``title``, optional
    arguments a ``default``, and leave ``required`` out when nothing is. Trained only
    on bare schemas, the model copied a ``default`` into the call or broke off the
    tool's name on an MCP server's list (measured with the test server's five tools).
    """
    parameters = spec["function"]["parameters"]
    properties = parameters["properties"]
    for name, schema in properties.items():
        if rng.random() < 0.5:
            schema["title"] = name.capitalize()
    if not properties and rng.random() < 0.4:
        # An optional argument the question never asks for: the call leaves it out.
        optional = rng.choice(_ARGUMENTS)
        properties[optional] = {
            "default": "",
            "title": optional.capitalize(),
            "type": "string",
        }
    if not parameters["required"] and rng.random() < 0.5:
        del parameters["required"]
    return spec


def tool_task(
    rng: random.Random, words: list[str], system_prompt: str = "", kind: str = ""
) -> ToolTask:
    """A question one of 1–5 offered tools answers, the call, its result, the answer.

    Args:
        rng: Fixes every draw.
        words: Argument values and made-up tool names are drawn from these.
        system_prompt: The system turn, if any.
        kind: ``"catalogue"``, ``"named"`` (a made-up tool with one argument),
            ``"no_argument"`` (a made-up tool without), or ``""`` for a draw
            (half catalogue, a third of the rest without an argument).
    """
    if not kind:
        draw = rng.random()
        kind = "catalogue" if draw < 0.5 else "named" if draw < 0.83 else "no_argument"
    # 1-5 tools: catalogue ones and made-up ones beside the one asked for, so the
    # name is chosen among several the copy circuit proposes (an MCP server offers
    # five or more), not taken for the only one there.
    others: list[Tool] = rng.sample(TOOLS, rng.randint(0, 2))
    others += [
        made_up_tool(rng, words, with_argument=rng.random() < 0.5)
        for _ in range(rng.randint(0, 2))
    ]
    if kind == "catalogue":
        tool = rng.choice([t for t in TOOLS if t not in others])
        shapes = tool.questions
        if rng.random() < 0.75:
            shapes = tuple(_quoted(q) for q in shapes)
    else:
        tool = made_up_tool(rng, words, with_argument=kind == "named")
        shapes = tool.questions
    offered = others + [tool]
    rng.shuffle(offered)
    value = _value(rng, words)
    question = rng.choice(shapes).format(value) if tool.argument else rng.choice(shapes)
    result = tool.result.format(value if tool.argument else _value(rng, words))
    call = {
        "type": "function",
        "function": {"name": tool.name, "arguments": tool.arguments(value)},
    }
    messages: list[dict] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages += [
        {"role": "user", "content": question},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": tool_reasoning(tool, question, value),
            "tool_calls": [call],
        },
        {"role": "tool", "content": result},
        {
            "role": "assistant",
            "content": result,
            "reasoning_content": "The tool answered. I tell the user its result.",
        },
    ]
    return ToolTask(
        tuple(_as_clients_write_it(t.spec(), rng) for t in offered),
        tuple(messages),
        tool,
        value,
        result,
    )


def single_tool_task(
    rng: random.Random, words: list[str], tool: Tool, quoted: bool
) -> ToolTask:
    """A conversation with ``tool`` offered alone (the single-tool probes).

    Args:
        rng: Fixes the question shape and the value.
        words: Values are drawn from these.
        tool: A catalogue tool (`TOOLS`).
        quoted: Write the value in quotes in the question.
    """
    shapes = tuple(_quoted(q) for q in tool.questions) if quoted else tool.questions
    value = _value(rng, words)
    question = rng.choice(shapes).format(value)
    result = tool.result.format(value)
    call = {
        "type": "function",
        "function": {"name": tool.name, "arguments": tool.arguments(value)},
    }
    messages = (
        {"role": "user", "content": question},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": tool_reasoning(tool, question, value),
            "tool_calls": [call],
        },
        {"role": "tool", "content": result},
        {"role": "assistant", "content": result},
    )
    return ToolTask((tool.spec(),), messages, tool, value, result)


def copy_targets(task: ToolTask) -> tuple[str, ...]:
    """What a reply must copy: the tool's name, the argument's value, the result."""
    value = (f'"{task.value}"',) if task.tool.argument else ()
    return (task.tool.name, *value, task.result)


def call_text(task: ToolTask) -> str:
    """The call as the template writes it (and the model must)."""
    arguments = json.dumps(task.tool.arguments(task.value), ensure_ascii=False)
    return (
        f'<tool_call>\n{{"name": "{task.tool.name}", "arguments": {arguments}}}'
        "\n</tool_call>"
    )


def tool_conversation(task: ToolTask, thinking: bool, rng: random.Random) -> str:
    """A tool task rendered as the model sees it.

    With thinking on, the whole exchange (the template keeps both replies' reasoning:
    they follow the last user question). With it off, either the call or the final
    answer, each after its own prompt ending in the empty ``<think>`` block (the
    template drops that block from history, so they cannot be one rendering).
    """
    messages = [dict(m) for m in task.messages]
    if thinking:
        return chat_format.render(messages, tools=task.tools)
    for message in messages:
        message.pop("reasoning_content", None)
    asked = len(messages) - 3  # the user's question is the fourth message from the end
    if rng.random() < 0.5:
        prompt = chat_format.render(
            messages[:asked],
            tools=task.tools,
            add_generation_prompt=True,
            enable_thinking=False,
        )
        return prompt + call_text(task) + "<|im_end|>\n"
    prompt = chat_format.render(
        messages[:-1],
        tools=task.tools,
        add_generation_prompt=True,
        enable_thinking=False,
    )
    return prompt + messages[-1]["content"] + "<|im_end|>\n"
