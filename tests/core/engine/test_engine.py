"""The engine on a real tiny model: cache reuse, KV precision, cancellation, errors."""

from __future__ import annotations

import json
import threading

import mlx.core as mx
import pytest

from app.core.cancel import CancelToken
from app.core.engine.cache.conversation_cache import ConversationCache
from app.core.engine.engine import Engine
from app.core.engine.events import GenerationEvent
from app.core.engine.loader import load_model_folder
from app.core.errors import KnownError, ModelLoadError
from app.core.presets.generation_settings import KVSettings, SamplingSettings
from app.core.token_ids import common_prefix_length

GREEDY = SamplingSettings(temperature=0.0, max_tokens=12)
SYSTEM = {
    "role": "system",
    "content": "You are a terse assistant for Python questions.",
}


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    engine = Engine()
    engine.load(tiny_model_dir)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model_folder(tiny_model_dir)


def _render(loaded, messages):
    text = loaded.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )
    return list(loaded.tokenizer.encode(text, add_special_tokens=False))


def _last_logits(loaded, cache: ConversationCache, prompt_ids: list[int]) -> mx.array:
    reused = cache.prepare_for(prompt_ids)
    logits = loaded.model(mx.array(prompt_ids[reused:])[None], cache=cache.layers)
    cache.token_ids = list(prompt_ids)
    return logits[0, -1]


def _prefill(loaded, cache: ConversationCache, ids: list[int]) -> None:
    loaded.model(mx.array(ids)[None], cache=cache.layers)
    cache.token_ids = cache.token_ids + list(ids)


@pytest.mark.parametrize("bits", [16, 8, 4])
def test_reused_prefix_gives_the_same_logits_as_a_full_prefill(loaded, bits):
    kv = KVSettings(bits=bits)
    first = _render(loaded, [SYSTEM, {"role": "user", "content": "What is a list?"}])
    # What the model "said" last turn differs from what the template renders next turn,
    # so the cache holds tokens past the common prefix that must be trimmed.
    said = list(
        loaded.tokenizer.encode("A list is an ordered box.", add_special_tokens=False)
    )
    second = _render(
        loaded,
        [
            SYSTEM,
            {"role": "user", "content": "What is a list?"},
            {"role": "assistant", "content": "A mutable sequence."},
            {"role": "user", "content": "And a tuple?"},
        ],
    )
    shared = common_prefix_length(first + said, second)
    assert len(first) <= shared < len(first) + len(said)

    def quantize(cache):
        if kv.quantized:
            cache.layers = [
                layer.to_quantized(group_size=64, bits=bits) for layer in cache.layers
            ]

    live = ConversationCache(loaded.model, kv)
    _prefill(loaded, live, first[:-3])
    quantize(live)
    _prefill(loaded, live, first[-3:] + said)  # continues after the quantized part
    reused = live.prepare_for(second)
    assert reused == shared and live.offset == shared
    reused_logits = loaded.model(mx.array(second[reused:])[None], cache=live.layers)[
        0, -1
    ]

    fresh = ConversationCache(loaded.model, kv)
    _prefill(loaded, fresh, first[:-3])
    quantize(fresh)
    fresh_logits = loaded.model(
        mx.array(second[len(first) - 3 :])[None], cache=fresh.layers
    )[0, -1]
    assert mx.abs(reused_logits - fresh_logits).max().item() < 1e-3

    # The comparison can fail: without the trim, the stale tokens stay visible.
    stale = ConversationCache(loaded.model, kv)
    _prefill(loaded, stale, first[:-3])
    quantize(stale)
    _prefill(loaded, stale, first[-3:] + said)
    wrong = loaded.model(mx.array(second[shared:])[None], cache=stale.layers)[0, -1]
    assert mx.abs(wrong - fresh_logits).max().item() > 1e-3


FP_KV = KVSettings(bits=16)


def _conversation(engine, key, turns, kv=FP_KV, sampling=GREEDY):
    messages = [SYSTEM]
    finals = []
    for text in turns:
        messages.append({"role": "user", "content": text})
        handle = engine.chat(key, list(messages), kv, sampling)
        reply = handle.text()
        finals.append((reply, handle.final))
        messages.append({"role": "assistant", "content": reply})
    return messages, finals


def test_multi_turn_reuse_matches_full_reprefill(engine):
    turns = ["How do I sort a dict by value?", "And in reverse?", "Thanks, and a set?"]
    messages, finals = _conversation(engine, "reuse", turns)
    assert finals[0][1].reused_tokens == 0
    for _, final in finals[1:]:
        assert final.reused_tokens > 0
        assert final.new_tokens == final.prompt_tokens - final.reused_tokens
        assert final.reuse_source == "memory"
    # Each later turn again from scratch, with no cache: the same greedy reply.
    for index in range(1, len(turns)):
        history = messages[: 2 + 2 * index]
        handle = engine.chat(f"fresh-{index}", history, KVSettings(bits=16), GREEDY)
        assert handle.text() == finals[index][0]
        assert handle.final.reused_tokens == 0


def test_context_tokens_count_prompt_and_reply(engine):
    _, finals = _conversation(engine, "count", ["Count me."])
    final = finals[0][1]
    assert final.context_tokens == final.prompt_tokens + final.generated_tokens
    assert engine.cache_state("count").tokens == final.context_tokens


def test_kv_bytes_shrink_by_the_expected_factor(engine):
    sizes = {}
    for bits in (16, 8, 4):
        _, finals = _conversation(
            engine,
            f"bits-{bits}",
            ["Tell me about bytes."],
            kv=KVSettings(bits=bits, group_size=64),
        )
        final = finals[0][1]
        assert final.kv_bits == bits
        sizes[bits] = final.kv_bytes
    # Caches hold 16-bit floats, on the CPU too (2 bytes); quantized: bits/8 + 2 * 2 /
    # group per element (16-bit scales and biases).
    activation = 4 if engine.model_info.kv_dtype == "float32" else 2
    assert engine.model_info.kv_dtype in ("float16", "bfloat16")
    for bits in (8, 4):
        per_element = bits / 8 + 2 * activation / 64
        assert sizes[16] / sizes[bits] == pytest.approx(
            activation / per_element, rel=1e-9
        )


@pytest.mark.parametrize("group", [32, 64, 128])
def test_every_group_size_works(engine, group):
    _, finals = _conversation(
        engine, f"group-{group}", ["Hi"], kv=KVSettings(bits=4, group_size=group)
    )
    assert finals[0][1].kv_bits == 4


def test_quantized_kv_start_is_honoured(engine):
    kv = KVSettings(bits=8, quantized_kv_start=10_000)
    _, finals = _conversation(engine, "late-quant", ["Short prompt."], kv=kv)
    assert finals[0][1].kv_bits == 16
    kv = KVSettings(bits=8, quantized_kv_start=20)
    _, finals = _conversation(
        engine, "early-quant", ["A prompt longer than twenty tokens, surely."], kv=kv
    )
    assert finals[0][1].kv_bits == 8


class _CancelAtPoll(CancelToken):
    """A cancel token that cancels itself when polled for the n-th time."""

    def __init__(self, n: int):
        super().__init__()
        self._left = n

    def __call__(self) -> bool:
        self._left -= 1
        if self._left <= 0:
            self.cancel()
        return self.cancelled


def test_cancel_stops_after_a_token_and_leaves_a_usable_cache(engine):
    sampling = SamplingSettings(temperature=0.0, max_tokens=200)
    messages = [SYSTEM, {"role": "user", "content": "Write a long story."}]
    # The engine polls the token between prefill chunks and after every token; this one
    # turns itself on at the fifth poll, so the test does not race the engine (a loaded
    # machine lags behind): at most five tokens can come out.
    token = _CancelAtPoll(5)
    handle = engine.chat("cancel", messages, KVSettings(bits=8), sampling, cancel=token)
    parts = [event.text for event in handle if isinstance(event, GenerationEvent)]
    final = handle.final
    assert final.finish_reason == "cancelled"
    assert 1 <= final.generated_tokens <= 5
    assert (
        engine.cache_state("cancel").tokens
        == final.prompt_tokens + final.generated_tokens
    )

    partial = "".join(parts)
    follow_up = [
        *messages,
        {"role": "assistant", "content": partial},
        {"role": "user", "content": "Go on."},
    ]
    continued = engine.chat("cancel", follow_up, KVSettings(bits=8), GREEDY)
    reply = continued.text()
    assert continued.final.reused_tokens > final.prompt_tokens
    fresh = engine.chat("cancel-fresh", follow_up, KVSettings(bits=8), GREEDY)
    assert fresh.text() == reply


def test_all_model_work_runs_on_one_engine_thread(engine):
    names = set()
    results = []

    def consumer():
        handle = engine.chat(
            "thread", [SYSTEM, {"role": "user", "content": "hi"}], KVSettings(), GREEDY
        )
        results.append(handle.wait())

    worker = threading.Thread(target=consumer)
    worker.start()
    worker.join(60)
    names.add(engine.submit(lambda: threading.current_thread().name).result())
    assert names == {"swapless-engine"}
    assert results and results[0].finished


def test_errors_on_the_engine_thread_reach_the_consumer(engine):
    bad = [{"role": "user", "content": "x"}]
    handle = engine.chat("errors", bad, KVSettings(), GREEDY)
    handle.wait()  # a sane request works
    empty_engine = Engine()
    with pytest.raises(KnownError, match="No model is loaded"):
        empty_engine.chat("x", bad, KVSettings(), GREEDY).wait()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bits": 3}, "kv_bits must be one of 16, 8, 4"),
        ({"group_size": 16}, "kv_group must be one of 32, 64, 128"),
        ({"quantized_kv_start": -1}, "quantized_kv_start"),
    ],
)
def test_bad_kv_settings_name_the_valid_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        KVSettings(**kwargs)


def test_broken_model_folders_give_known_errors(tmp_path, tiny_model_dir):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model_folder(tmp_path / "missing")

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match="no config.json") as excinfo:
        load_model_folder(empty)
    assert str(empty) in str(excinfo.value)

    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "config.json").write_text(json.dumps({"model_type": "no-such-arch"}))
    with pytest.raises(ModelLoadError, match="not supported"):
        load_model_folder(unknown)

    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for item in tiny_model_dir.iterdir():
        (corrupt / item.name).write_bytes(item.read_bytes())
    (corrupt / "model.safetensors").write_bytes(b"\x00" * 100)
    with pytest.raises(ModelLoadError, match="cannot be loaded") as excinfo:
        load_model_folder(corrupt)
    assert str(corrupt) in str(excinfo.value)

    garbled = tmp_path / "garbled"
    garbled.mkdir()
    (garbled / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        load_model_folder(garbled)


@pytest.mark.parametrize("bits", [16, 8])
def test_a_trimmed_cache_grows_back_to_exactly_the_predicted_allocation(loaded, bits):
    # mlx-lm appends after the spare step a trim leaves at a multiple of 256 tokens
    # (1.17x the prediction); the cache gives spare steps back when it is trimmed.
    cache = ConversationCache(loaded.model, KVSettings(bits=bits))
    ids = list(range(5, 1221))
    _prefill(loaded, cache, ids[:300])
    if bits != 16:
        cache.layers = [
            layer.to_quantized(group_size=64, bits=bits) for layer in cache.layers
        ]
    _prefill(loaded, cache, ids[300:])
    cache.trim_to(1024)
    _prefill(loaded, cache, ids[:300])
    # 16-bit keys, values and scales on the CPU backend too (`kv_storage`).
    per_token = 2 * 2 * 2 * 128 * (2 if bits == 16 else 1 + 2 * 2 / 64)
    assert cache.offset == 1324
    assert cache.nbytes == 1536 * per_token  # 1324 rounded up to the 256-token step
