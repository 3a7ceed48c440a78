"""Auto-trim on a reasoning model's template splices, as it does on a plain one.

Qwen3's template (the reference model's) gives the reply that ends a rendering an
empty thinking block, which that reply lacks once more turns follow: the rendering of
the dropped turns alone is then not a prefix of the cache, and a trim that measured
the cut by it said "the cache did not line up" and rebuilt every time.
"""

from __future__ import annotations

from app.core.chat.conversation_session import ConversationSession
from app.core.engine.engine import Engine
from app.core.presets.presets import get_preset


def test_a_trim_on_a_qwen3_style_template_splices(thinking_model_dir, tmp_path):
    from app.core.store import Store

    engine = Engine()
    store = Store.open(tmp_path / "chat.db")
    try:
        engine.load(thinking_model_dir())
        preset = get_preset("chat").with_changes(
            system_prompt="You are a test bot.",
            temperature=0.0,
            max_tokens=12,
            summary_mode="extractive",
            max_context=448,
            recall=False,
            thinking=False,
        )
        session = ConversationSession.start(engine, store, preset, model="thinking")
        trims = []
        for i in range(1, 13):
            report = session.send(
                f"Turn {i}: item {i} costs {i * 3} euros and is blue."
            ).wait()
            assert report.context_tokens <= 448
            if report.trimmed:
                trims.append((report.trim_method, report.trim_note))
        assert trims
        assert any(method == "splice" for method, _ in trims), trims
        assert not any("did not line up" in note for _, note in trims), trims
    finally:
        store.close()
        engine.shutdown()
