"""The reference model's chat format: Qwen3's, with thinking and tool calls.

The reference model speaks the format most local reasoning models of 2026 use, so the
reasoning and tool-call code paths run against a model that really writes them:

* ``<think>``, ``</think>``, ``<tool_call>``, ``</tool_call>``, ``<tool_response>`` and
  ``</tool_response>`` are single tokens of its tokenizer (added after the trained BPE,
  ids 2048–2053, not "special" so decoding keeps them, as Qwen3's tokenizer does);
* the chat template is Qwen3's layout: an ``enable_thinking`` switch (off: the
  generation prompt ends with an empty ``<think>\\n\\n</think>\\n\\n``), reasoning kept
  only for the assistant turns after the last user question, tools listed one JSON
  object per line inside ``<tools>…</tools>`` in the system turn, a call written as
  ``<tool_call>\\n{"name": …, "arguments": …}\\n</tool_call>`` and results sent back in
  a user turn inside ``<tool_response>…</tool_response>``.

mlx-lm's ``TokenizerWrapper`` infers ``has_thinking`` and its ``json_tools`` parser from
this alone. `render` renders the template the way transformers does (same Jinja
settings, same ``tojson``), so the training corpus is token for token what
``apply_chat_template`` gives at run time (a test compares them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Tokenizer

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
TOOL_RESPONSE_START = "<tool_response>"
TOOL_RESPONSE_END = "</tool_response>"
FORMAT_TOKENS = (
    THINK_START,
    THINK_END,
    TOOL_CALL_START,
    TOOL_CALL_END,
    TOOL_RESPONSE_START,
    TOOL_RESPONSE_END,
)

# Qwen3's template layout (system + tools, last-query reasoning rule, tool calls and
# responses, the enable_thinking switch), written here for this model; the tools
# preamble is shorter than Qwen3's (a 2K-vocabulary model pays ~100 tokens for it).
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nTo call a tool, write:\\n<tool_call>\\n'"
    ' + \'{"name": <function-name>, "arguments": <args-json-object>}\\n\''
    " + '</tool_call><|im_end|>\\n' }}"
    "{%- else %}"
    "{%- if messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}"
    "{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if ns.multi_step_tool and message.role == 'user' and message.content is string"
    " and not (message.content.startswith('<tool_response>')"
    " and message.content.endswith('</tool_response>')) %}"
    "{%- set ns.multi_step_tool = false %}"
    "{%- set ns.last_query_index = index %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message.content is string %}{%- set content = message.content %}"
    "{%- else %}{%- set content = '' %}{%- endif %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{%- set reasoning_content = '' %}"
    "{%- if message.reasoning_content is string %}"
    "{%- set reasoning_content = message.reasoning_content %}"
    "{%- elif '</think>' in content %}"
    "{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n')"
    ".split('<think>')[-1].lstrip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}"
    "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n')"
    " + '\\n</think>\\n\\n' + content.lstrip('\\n') }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content }}"
    "{%- endif %}"
    "{%- if message.tool_calls %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if (loop.first and content) or (not loop.first) %}{{- '\\n' }}{%- endif %}"
    "{%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'<tool_call>\\n{"name": "\' }}'
    "{{- tool_call.name }}"
    '{{- \'", "arguments": \' }}'
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or (messages[loop.index0 - 1].role != 'tool') %}"
    "{{- '<|im_start|>user' }}"
    "{%- endif %}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)


def _tojson(value: Any, indent: int | None = None) -> str:
    # transformers' filter: no HTML escaping, keys in their order, non-ASCII kept.
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = _tojson
    return env


_TEMPLATE = _environment().from_string(CHAT_TEMPLATE)


def render(
    messages: Sequence[dict],
    tools: Sequence[dict] | None = None,
    add_generation_prompt: bool = False,
    enable_thinking: bool = True,
) -> str:
    """Render ``messages`` as ``apply_chat_template`` does with `CHAT_TEMPLATE`.

    Args:
        messages: Hugging Face chat messages (``reasoning_content``, ``tool_calls``,
            ``role: tool``).
        tools: OpenAI-style tool definitions, or None.
        add_generation_prompt: Append the assistant's header.
        enable_thinking: The template's thinking switch.
    """
    return _TEMPLATE.render(
        messages=list(messages),
        tools=list(tools) if tools else None,
        add_generation_prompt=add_generation_prompt,
        enable_thinking=enable_thinking,
    )


def extend_tokenizer(tokenizer: Tokenizer) -> Tokenizer:
    """Add `FORMAT_TOKENS` (in order, after the trained vocabulary) to ``tokenizer``."""
    tokenizer.add_tokens(
        [
            AddedToken(token, single_word=False, normalized=False, special=False)
            for token in FORMAT_TOKENS
        ]
    )
    return tokenizer
