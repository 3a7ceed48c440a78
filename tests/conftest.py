"""Fixtures shared by the whole suite.

Every test runs with ``SWAPLESS_HOME`` pointed at its own temporary folder, so no test
ever reads or writes a real user's data. Models are built once per session, with the
same code as ``swapless make-model``.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def swapless_home(tmp_path, monkeypatch):
    """Point all Swapless data at a fresh temporary folder for this test."""
    home = tmp_path / "swapless-home"
    home.mkdir(mode=0o700)  # as Swapless creates it (a looser one is tightened)
    monkeypatch.setenv("SWAPLESS_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny llama-architecture model in real mlx-lm format (random weights)."""
    from app.core.modelkit.model_builder import build_model

    folder = tmp_path_factory.mktemp("models") / "tiny"
    build_model(folder, shape="tiny", bits=16, seed=0)
    return folder


@pytest.fixture(scope="session")
def tiny_qwen2_model_dir(tmp_path_factory):
    """The tiny shape with the qwen2 architecture (q/k/v biases, Qwen2 tokenizer)."""
    from app.core.modelkit.model_builder import build_model

    folder = tmp_path_factory.mktemp("models") / "tiny-qwen2"
    build_model(folder, shape="tiny", bits=16, seed=0, arch="qwen2")
    return folder


@pytest.fixture(scope="session")
def arch_model_dir(tmp_path_factory):
    """Build the tiny model of an architecture once per session: ``arch_model_dir(name)``.

    Every name of `app.core.modelkit.arch_configs.ARCHES` builds (Gemma 3/4, gpt-oss,
    Qwen3/3.5/3-Next, Granite 4.0-H, LFM2, llama, qwen2), through mlx-lm's own classes.
    """
    from app.core.modelkit.model_builder import build_model

    built: dict = {}

    def get(arch: str):
        if arch not in built:
            folder = tmp_path_factory.mktemp("models") / f"tiny-{arch}"
            build_model(folder, shape="tiny", bits=16, seed=0, arch=arch)
            built[arch] = folder
        return built[arch]

    return get


@pytest.fixture(scope="session")
def arch_engine(arch_model_dir, tmp_path_factory):
    """A loaded engine per architecture, shared by the session: ``arch_engine(name)``.

    Tests use their own cache keys. The prefix cache lives in a session folder, so no
    test's SWAPLESS_HOME is touched by another.
    """
    from app.core.engine.cache.prefix_cache import PrefixCache, PrefixCacheSettings
    from app.core.engine.engine import Engine

    engines: dict = {}

    def get(arch: str):
        if arch not in engines:
            folder = tmp_path_factory.mktemp("prefix") / arch
            engine = Engine(
                prefix_cache=PrefixCache(PrefixCacheSettings(folder=folder))
            )
            engine.load(arch_model_dir(arch))
            engines[arch] = engine
        return engines[arch]

    yield get
    for engine in engines.values():
        engine.shutdown()


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    """A real engine with the tiny model loaded, shared by one test module."""
    from app.core.engine.engine import Engine

    engine = Engine()
    engine.load(tiny_model_dir)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="session")
def thinking_model_dir(tmp_path_factory):
    """A tiny model (random weights) that speaks the reasoning/tool-call format.

    Its tokenizer has ``<think>``, ``</think>`` and the tool-call tokens as single
    tokens and its template is the reference model's Qwen3-style one
    (`app.core.modelkit.reference.chat_format`); ``thinking_model_dir(template)``
    gives a copy with another chat template.
    """
    import json
    import shutil

    from app.core.modelkit.model_builder import build_model
    from app.core.modelkit.reference import chat_format
    from app.core.modelkit.tokenizer_training import train_tokenizer

    root = tmp_path_factory.mktemp("models")
    base = root / "tiny-thinking"
    build_model(base, shape="tiny", bits=16, seed=0)
    config = json.loads((base / "config.json").read_text())
    # Room for up to 16 more tokens (harmony's, DeepSeek's) inside the embedding.
    spare = 16
    tokenizer = train_tokenizer(
        config["vocab_size"] - len(chat_format.FORMAT_TOKENS) - spare
    )
    tokenizer.save(str(root / "plain-tokenizer.json"))
    chat_format.extend_tokenizer(tokenizer)
    tokenizer.save(str(base / "tokenizer.json"))
    made: dict[str, object] = {}

    def get(
        template: str = chat_format.CHAT_TEMPLATE, extra_tokens=(), think_tokens=True
    ):
        """``think_tokens=False``: without ``<think>`` and the tool tokens (a model
        whose markers are others, e.g. Gemma 4's channels, has none of them)."""
        key = template + "\0" + "\0".join(extra_tokens) + f"\0{think_tokens}"
        if key not in made:
            folder = root / f"tiny-thinking-{len(made)}"
            shutil.copytree(base, folder)
            if not think_tokens:
                shutil.copyfile(
                    root / "plain-tokenizer.json", folder / "tokenizer.json"
                )
            if extra_tokens:
                from tokenizers import AddedToken, Tokenizer

                grown = Tokenizer.from_file(str(folder / "tokenizer.json"))
                grown.add_tokens(
                    [
                        AddedToken(t, normalized=False, special=True)
                        for t in extra_tokens
                    ]
                )
                assert grown.get_vocab_size() <= config["vocab_size"]
                grown.save(str(folder / "tokenizer.json"))
            settings = json.loads((folder / "tokenizer_config.json").read_text())
            settings["chat_template"] = template
            (folder / "tokenizer_config.json").write_text(json.dumps(settings))
            made[key] = folder
        return made[key]

    return get
