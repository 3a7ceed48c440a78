"""Reasoning ("thinking") models: how their thoughts are marked and what Swapless does.

Pure policy, no MLX and no Qt: `markers` finds a model's reasoning markers and its
template's thinking switch from the tokenizer and template alone (mlx-lm's wrapper first,
gpt-oss harmony channels added); `thinking` holds the per-preset settings (on / off,
effort, budget) and the template arguments they become; `history` lines a conversation's
cache up with what the model's own template renders for its history (the reasoning span
a template drops is cut out). May import `app.core.turn` and the standard library only;
the engine (`app.core.engine.reasoning_stream`) applies it to tokens.
"""
