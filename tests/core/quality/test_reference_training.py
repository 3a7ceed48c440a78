"""Training the reference model: the circuit works before training, and a seed fixes it."""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from app.core.modelkit.reference import corpus, evaluation, recipes, training
from app.core.modelkit.reference.geometry import VOCAB_SIZE
from app.core.modelkit.tokenizer_training import train_tokenizer

TINY_RECIPE = recipes.TrainingRecipe(
    stages=(
        recipes.Stage(steps=2, batch=2, length=64, max_distance=40),
        recipes.Stage(steps=1, batch=1, length=128, max_distance=100),
    ),
    warmup_steps=1,
)


def weights(model) -> dict[str, np.ndarray]:
    return {k: np.array(v) for k, v in tree_flatten(model.parameters())}


def test_the_written_circuit_alone_finds_pass_keys():
    # Before any training: the hand-built copy circuit already recalls.
    model = training.new_model(seed=0)
    tokenizer = train_tokenizer(VOCAB_SIZE)
    assert evaluation.training_recall(model, tokenizer, distance=256, count=4) >= 0.75
    assert training.parameter_count(model) == 3_672_320


def test_the_same_seed_trains_the_same_weights():
    tokenizer = train_tokenizer(VOCAB_SIZE)
    stream = corpus.TokenStream(
        tokenizer, [d for d in corpus.documents() if not d.held_out]
    )
    first, log_a = training.train(tokenizer, TINY_RECIPE, stream=stream)
    second, log_b = training.train(tokenizer, TINY_RECIPE, stream=stream)
    assert [s.loss for s in log_a.steps] == [s.loss for s in log_b.steps]
    a, b = weights(first), weights(second)
    assert all(np.array_equal(a[name], b[name]) for name in a)
    other, _ = training.train(
        tokenizer, dataclasses.replace(TINY_RECIPE, seed=1), stream=stream
    )
    c = weights(other)
    assert not np.array_equal(
        a["model.embed_tokens.weight"], c["model.embed_tokens.weight"]
    )
    assert log_a.steps[-1].tokens == TINY_RECIPE.total_tokens
    mx.clear_cache()


def test_a_protected_circuit_keeps_what_it_reads_and_trains_the_rest():
    tokenizer = train_tokenizer(VOCAB_SIZE)
    stream = corpus.TokenStream(
        tokenizer, [d for d in corpus.documents() if not d.held_out][:20]
    )
    recipe = dataclasses.replace(TINY_RECIPE, protect_circuit=True)
    before = weights(training.new_model(seed=0))
    after = weights(training.train(tokenizer, recipe, stream=stream)[0])
    for layer in (0, 1):
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            name = f"model.layers.{layer}.self_attn.{proj}.weight"
            assert np.array_equal(before[name], after[name])
        norm = f"model.layers.{layer}.input_layernorm.weight"
        assert np.array_equal(before[norm], after[norm])
    embedding = "model.embed_tokens.weight"
    assert np.allclose(after[embedding][:, 0], 1.0, atol=1e-3)  # only weight decay
    assert not after[embedding][:, 129:225].any()
    assert not np.array_equal(before[embedding][:, 1:129], after[embedding][:, 1:129])
    down = "model.layers.0.mlp.down_proj.weight"
    assert np.allclose(before[down][:225], after[down][:225], atol=1e-5)
    assert not np.array_equal(before[down][225:], after[down][225:])
    moved = "model.layers.2.self_attn.q_proj.weight"
    assert not np.array_equal(before[moved], after[moved])


def test_the_format_stage_grows_the_vocabulary_and_keeps_the_circuit():
    from app.core.modelkit.reference import chat_format, format_tasks

    tokenizer = train_tokenizer(VOCAB_SIZE)
    chat_format.extend_tokenizer(tokenizer)
    assert [tokenizer.token_to_id(t) for t in chat_format.FORMAT_TOKENS] == list(
        range(VOCAB_SIZE, VOCAB_SIZE + len(chat_format.FORMAT_TOKENS))
    )
    docs = [d for d in corpus.documents() if not d.held_out][:20]
    stream = corpus.TokenStream(tokenizer, docs)
    words = format_tasks.argument_words([d.text for d in docs])
    base = training.new_model(seed=0)
    grown = training.with_vocabulary(base, tokenizer.get_vocab_size(), seed=0)
    before = weights(grown)
    recipe = recipes.FormatRecipe(steps=2, batch=2, length=384, warmup_steps=1)
    trained, log = training.train_format(grown, stream, words, recipe)
    after = weights(trained)
    assert after["model.embed_tokens.weight"].shape[0] == VOCAB_SIZE + 6
    for name in before:
        if name.startswith(("model.layers.0.", "model.layers.1.")):
            assert np.array_equal(before[name], after[name]), name
    assert not np.array_equal(
        before["model.layers.3.mlp.up_proj.weight"],
        after["model.layers.3.mlp.up_proj.weight"],
    )
    assert len(log.steps) == 2
    mx.clear_cache()


def test_format_sequences_render_as_the_template_does():
    import random

    from app.core.modelkit.reference import chat_format, format_tasks

    rng = random.Random(0)
    task = format_tasks.tool_task(rng, ["Lisbon", "kettle"], "You are brief.")
    text = format_tasks.tool_conversation(task, True, rng)
    assert text == chat_format.render(task.messages, tools=task.tools)
    assert format_tasks.call_text(task) in text
    assert "<think>\n" in text and f"<tool_response>\n{task.result}" in text
    off = format_tasks.tool_conversation(task, False, random.Random(1))
    assert "<think>\n\n</think>\n\n" in off


def test_replies_weigh_fully_and_prompts_a_tenth():
    import random

    from tokenizers import Tokenizer

    from app.core.modelkit.reference import chat_format, format_tasks
    from app.core.modelkit.reference.install import committed_folder

    tokenizer = Tokenizer.from_file(str(committed_folder() / "tokenizer.json"))
    task = format_tasks.tool_task(random.Random(2), ["Lisbon", "kettle"], kind="named")
    text = chat_format.render(task.messages, tools=task.tools)
    encoding = tokenizer.encode(text)
    weights = corpus.reply_weights(text, encoding.offsets)
    heavy = tokenizer.decode(
        [i for i, w in zip(encoding.ids, weights, strict=True) if w == 1.0],
        skip_special_tokens=False,
    )
    assert format_tasks.call_text(task) in heavy
    assert task.result in heavy
    assert "<tools>" not in heavy and "<|im_start|>user" not in heavy  # prompt
    assert set(weights.tolist()) == {1.0, float(np.float32(corpus.PROMPT_WEIGHT))}


def test_made_up_tools_are_named_in_the_question_and_copied_into_the_call():
    import json
    import random

    from app.core.modelkit.reference import format_tasks

    named = format_tasks.tool_task(random.Random(5), ["harbour"], kind="named")
    question = named.messages[0]["content"]
    assert named.tool.name in question and f'"{named.value}"' in question
    assert json.loads(format_tasks.call_text(named).split("\n")[1]) == {
        "name": named.tool.name,
        "arguments": {named.tool.argument: named.value},
    }
    bare = format_tasks.tool_task(random.Random(5), ["harbour"], kind="no_argument")
    assert '"arguments": {}' in format_tasks.call_text(bare)
    assert bare.tools[-1]["function"]["parameters"]["properties"] == {} or any(
        t["function"]["parameters"]["properties"] == {} for t in bare.tools
    )


def test_emphasis_raises_only_the_reply_tokens_a_tool_reply_must_copy():
    import random

    from tokenizers import Tokenizer

    from app.core.modelkit.reference import chat_format, format_tasks
    from app.core.modelkit.reference.install import committed_folder

    tokenizer = Tokenizer.from_file(str(committed_folder() / "tokenizer.json"))
    task = format_tasks.tool_task(random.Random(3), ["Lisbon"], kind="catalogue")
    text = chat_format.render(task.messages, tools=task.tools)
    encoding = tokenizer.encode(text)
    plain = corpus.reply_weights(text, encoding.offsets)
    raised = corpus.emphasize(
        text, encoding.offsets, plain, format_tasks.copy_targets(task), 5.0
    )
    heavy = tokenizer.decode(
        [i for i, w in zip(encoding.ids, raised, strict=True) if w == 5.0],
        skip_special_tokens=False,
    )
    # The value in the call (its opening quote's token starts at the space before
    # it), the tool's name and the repeated result; never the question (prompt).
    assert f'{task.value}"' in heavy and task.tool.name in heavy
    assert task.result in heavy
    assert np.all(raised[plain != 1.0] == plain[plain != 1.0])
    assert np.count_nonzero(raised == 5.0) < np.count_nonzero(plain == 1.0)
    assert np.array_equal(
        corpus.emphasize(text, encoding.offsets, plain, (), 5.0), plain
    )


def test_tool_heads_train_only_their_own_query_and_output():
    from app.core.modelkit.reference import chat_format, circuit, format_tasks

    tokenizer = train_tokenizer(VOCAB_SIZE)
    chat_format.extend_tokenizer(tokenizer)
    docs = [d for d in corpus.documents() if not d.held_out][:20]
    stream = corpus.TokenStream(tokenizer, docs)
    words = format_tasks.argument_words([d.text for d in docs])
    grown = training.with_vocabulary(
        training.new_model(seed=0), tokenizer.get_vocab_size(), seed=0
    )
    before = weights(grown)
    recipe = recipes.FormatRecipe(
        steps=2, batch=2, length=384, warmup_steps=1, tool_heads=True
    )
    trained, _ = training.train_format(grown, stream, words, recipe)
    after = weights(trained)
    hd = 128
    q = "model.layers.1.self_attn.q_proj.weight"
    o = "model.layers.1.self_attn.o_proj.weight"
    for head in (0, 2):  # the copy circuit's heads: no gradient reaches them;
        # AdamW's decoupled weight decay alone shrinks them, by lr * 0.01 a step.
        rows = slice(head * hd, (head + 1) * hd)
        np.testing.assert_allclose(after[q][rows], before[q][rows], rtol=1e-4)
        np.testing.assert_allclose(after[o][:, rows], before[o][:, rows], rtol=1e-4)
    for head in (circuit.VALUE_HEAD, circuit.RESULT_HEAD):
        rows = slice(head * hd, (head + 1) * hd)
        assert not np.array_equal(before[q][rows], after[q][rows])
    for name in before:
        if name.startswith("model.layers.0.") or (
            name.startswith("model.layers.1.") and name not in (q, o)
        ):
            assert np.array_equal(before[name], after[name]), name
    mx.clear_cache()


def test_a_tool_stage_continues_a_folder_and_records_itself(tmp_path):
    import json

    from app.core.modelkit.reference.install import (
        committed_folder,
        continue_format_from,
    )

    before = json.loads((committed_folder() / "config.json").read_text())
    recipe = recipes.FormatRecipe(steps=1, batch=1, length=384, warmup_steps=1)
    out, log = continue_format_from(committed_folder(), tmp_path / "more", recipe)
    after = json.loads((out / "config.json").read_text())
    builder, was = after["swapless_builder"], before["swapless_builder"]
    assert builder["recipe"]["tool_stage"][-1]["steps"] == 1
    assert len(builder["recipe"]["tool_stage"]) == len(was["recipe"]["tool_stage"]) + 1
    assert builder["training_tokens"] == was["training_tokens"] + 384
    assert (out / "tokenizer.json").read_bytes() == (
        committed_folder() / "tokenizer.json"
    ).read_bytes()
    assert len(log.steps) == 1
    mx.clear_cache()


def _layer1_attention(model, ids: list[int], head: int) -> np.ndarray:
    """Layer 1's attention weights of ``head`` over ``ids`` (query x key)."""
    import math

    from mlx_lm.models.base import create_attention_mask

    inner = model.model
    h = inner.embed_tokens(mx.array(ids)[None])
    h = inner.layers[0](h, create_attention_mask(h, None), cache=None)
    x = inner.layers[1].input_layernorm(h)
    attention = inner.layers[1].self_attn
    q = attention.rope(attention.q_proj(x).reshape(1, -1, 4, 128).transpose(0, 2, 1, 3))
    k = attention.rope(attention.k_proj(x).reshape(1, -1, 2, 128).transpose(0, 2, 1, 3))
    scores = (q[:, head] @ k[:, head // 2].transpose(0, 2, 1)) / math.sqrt(128)
    n = len(ids)
    scores = scores + mx.triu(mx.full((n, n), -1e9), 1)
    return np.array(mx.softmax(scores, axis=-1))[0]


def test_exact_tool_heads_find_the_quoted_value_and_leave_the_copy_heads_alone():
    import random

    from mlx_lm.utils import load_model
    from tokenizers import Tokenizer

    from app.core.modelkit.reference import (
        chat_format,
        circuit,
        format_tasks,
        tool_heads,
        tool_probes,
    )
    from app.core.modelkit.reference.install import committed_folder

    folder = committed_folder()
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    model, _ = load_model(folder)
    model.set_dtype(mx.float32)
    before = weights(model)
    docs = [d for d in corpus.documents() if not d.held_out][:40]
    words = format_tasks.argument_words([d.text for d in docs])
    sequences = corpus.format_training_sequences(
        corpus.TokenStream(tokenizer, docs), 384, 5, 300, words, corpus.TOOL_STAGE_MIX
    )
    tool_heads.write_exact_tool_heads(model, tokenizer.token_to_id, sequences)
    after = weights(model)
    hd = 128
    q = "model.layers.1.self_attn.q_proj.weight"
    k = "model.layers.1.self_attn.k_proj.weight"
    for head in (0, 2):  # the copy heads: same query, and none in the new key rows
        rows = slice(head * hd, (head + 1) * hd)
        assert np.array_equal(before[q][rows], after[q][rows])
        kv = head // 2
        dims = (*tool_heads.FEATURE_DIMS, tool_heads.SINK_DIM)
        assert not np.any(after[q][[head * hd + d for d in dims]])
        assert np.any(after[k][[kv * hd + d for d in dims]])
        read = kv * hd + np.flatnonzero(np.abs(before[q][rows]).sum(1))
        assert np.array_equal(before[k][read], after[k][read])
    # On held-out values the value head, at the quote that opens the call's value,
    # looks at the value's first token in the question.
    rng = random.Random(11)
    held_out = tool_probes.held_out_words()
    landed = 0
    for tool in format_tasks.TOOLS:
        task = format_tasks.single_tool_task(rng, held_out, tool, quoted=True)
        prompt = chat_format.render(
            [task.messages[0]],
            tools=list(task.tools),
            add_generation_prompt=True,
            enable_thinking=False,
        )
        encoding = tokenizer.encode(prompt + format_tasks.call_text(task))
        opening = max(
            i for i, t in enumerate(encoding.tokens[:-4]) if t == 'Ġ"'
        )  # the value's quote: the last one before `"}}` and the end of the call
        attention = _layer1_attention(model, encoding.ids, circuit.VALUE_HEAD)
        target = int(np.argmax(attention[opening]))
        landed += encoding.tokens[target] == encoding.tokens[opening + 1] and (
            target < opening
        )
    # Measured: 6 of 8. The committed (trained) heads looked at the closing quote
    # instead in every probe of the diagnosis (docs/reference-model.md).
    assert landed >= 5, landed
    mx.clear_cache()


def test_a_single_tool_probe_offers_its_tool_alone_and_quotes_as_asked():
    import random

    from app.core.modelkit.reference import format_tasks

    rng = random.Random(0)
    tool = format_tasks.TOOLS[0]
    quoted = format_tasks.single_tool_task(rng, ["Lisbon"], tool, quoted=True)
    plain = format_tasks.single_tool_task(rng, ["Lisbon"], tool, quoted=False)
    assert [t["function"]["name"] for t in quoted.tools] == [tool.name]
    assert '"Lisbon"' in quoted.messages[0]["content"]
    assert '"' not in plain.messages[0]["content"]
    assert "Lisbon" in plain.messages[0]["content"]
    call = quoted.messages[1]["tool_calls"][0]["function"]
    assert call == {"name": tool.name, "arguments": {tool.argument: "Lisbon"}}
    assert quoted.result in quoted.messages[-1]["content"]


def test_the_tool_stage_sees_its_longest_tool_lists_whole():
    """A tool conversation longer than a sequence is skipped by the corpus.

    At the old 384 tokens half of them were (93 % of those with three tools), so
    the model trained almost only on one-tool lists and wrote made-up names when an
    MCP server offered five (docs/reference-model.md, "A value the model copies").
    """
    import random

    from tokenizers import Tokenizer

    from app.core.modelkit.reference import format_tasks
    from app.core.modelkit.reference.install import committed_folder

    tokenizer = Tokenizer.from_file(str(committed_folder() / "tokenizer.json"))
    docs = [d for d in corpus.documents() if not d.held_out][:40]
    words = format_tasks.argument_words([d.text for d in docs])
    rng = random.Random(3)
    length = recipes.TOOL_EXACT_HEADS_RECIPE.length
    sizes, offered = [], []
    for i in range(200):
        task = format_tasks.tool_task(rng, words, rng.choice(corpus.SYSTEM_PROMPTS))
        text = format_tasks.tool_conversation(task, i % 2 == 0, rng)
        sizes.append(len(tokenizer.encode(text).ids))
        offered.append(len(task.tools))
    assert max(offered) == 5 and min(offered) == 1
    assert max(sizes) <= length + 1, (max(sizes), length)


def test_tool_lists_carry_what_clients_add_and_calls_leave_optional_arguments_out():
    import random

    from app.core.modelkit.reference import format_tasks

    rng = random.Random(1)
    titled = defaulted = unrequired = 0
    for _ in range(200):
        task = format_tasks.tool_task(rng, ["Lisbon", "harbour", "query"])
        for spec in task.tools:
            parameters = spec["function"]["parameters"]
            for schema in parameters["properties"].values():
                titled += "title" in schema
                defaulted += "default" in schema
            unrequired += "required" not in parameters
        call = task.messages[1]["tool_calls"][0]["function"]
        assert call["arguments"] == task.tool.arguments(task.value)
        if "required" in (asked := task.tools[0]["function"]["parameters"]):
            assert set(asked["required"]) <= set(asked["properties"])
    assert titled and defaulted and unrequired
    # The reasoning before a call with a value quotes the value, not the question.
    task = format_tasks.tool_task(random.Random(0), ["Lisbon"], kind="catalogue")
    assert task.messages[1]["reasoning_content"].startswith(
        'The user asks about "Lisbon".'
    )
