"""Qt-free core of Swapless: engine, cache policy, memory budget, memory probe, store.

Nothing under this package imports Qt (a test enforces it), and only `app.core.engine`
imports MLX, so policy code is testable without a model or a display.
"""
