"""`swapless doctor`: what this machine can run and why, built from config.json, the
safetensors headers and one memory snapshot, without loading a model.

Pure Python; may import `app.core.budget`, `app.core.memory` and `app.core.presets`;
never MLX or Qt.
"""
