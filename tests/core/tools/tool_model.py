"""A tiny random-weight model whose tokenizer and template call tools the Qwen3 way.

The kit's tiny model with two changes to its tokenizer: the last two BPE merges give
their ids to ``<tool_call>`` and ``</tool_call>`` as special tokens (the embedding has
no spare rows), and the chat template renders ``tools`` into the system turn inside
``<tools>…</tools>``, calls as ``<tool_call>\\n{"name", "arguments"}\\n</tool_call>``
and tool results inside ``<tool_response>`` in a user turn. mlx-lm then infers its
``json_tools`` parser from the tokenizer alone, as it will for the reference model.
"""

from __future__ import annotations

import json
from pathlib import Path

TOOL_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}"
    "{%- endif %}"
    "{{- '# Tools\\n\\nFunctions you may call:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nTo call one, write:\\n<tool_call>\\n"
    '{"name": <name>, "arguments": <object>}'
    "\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first %}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + (message.content or '') }}"
    "{%- for tool_call in message.tool_calls or [] %}"
    "{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{%- if tool_call.function is defined %}"
    "{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'<tool_call>\\n{"name": "\' + tool_call.name + \'", "arguments": \' }}'
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content"
    " + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
MARKERS = ("<tool_call>", "</tool_call>")


def make_tool_model(
    folder: Path,
    template: str = TOOL_TEMPLATE,
    markers: tuple[str, ...] = MARKERS,
) -> Path:
    """Build the tiny qwen2 model into ``folder`` and give it tool calling.

    Args:
        folder: Where the model goes.
        template: Its chat template (default: the Qwen3-style one above).
        markers: The call's start and end markers, made special tokens (and any
            other markup the real vocabulary holds as single tokens, after them).
    """
    from app.core.modelkit.model_builder import build_model

    build_model(folder, shape="tiny", bits=16, seed=0, arch="qwen2")
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    model = data["model"]
    merges = model["merges"]
    by_id = {i: t for t, i in model["vocab"].items()}
    top = max(by_id)
    freed = list(range(top - len(markers) + 1, top + 1))
    for token_id in freed:
        del model["vocab"][by_id[token_id]]
    # The merges that made the freed tokens are the last ones (BPE assigns ids in
    # merge order); without them no text encodes to the freed ids.
    model["merges"] = merges[: -len(markers)]
    for token_id, text in zip(freed, markers, strict=True):
        data["added_tokens"].append(
            {
                "id": token_id,
                "content": text,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
    path.write_text(json.dumps(data), encoding="utf-8")
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = template
    config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return folder
