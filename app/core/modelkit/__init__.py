"""The model kit: builds models rather than running them. Random-weight models of the
architectures people run (in real mlx-lm format, for tests and benchmarks), the demo
model, tokenizer training, and the trained reference model (`reference/`).

The one place besides the engine allowed to import mlx/mlx-lm (a test names both). May
import the engine's loader; never Qt, the UI or the server.
"""
