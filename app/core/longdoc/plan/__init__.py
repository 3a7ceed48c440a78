"""How a document will be read before it starts: whole or in segments, the segment size
from the model's context and this machine's memory, the time from measured prefill
speed, and the plan's words.

Pure Python; may import `app.core.budget` and `app.core.presets`.
"""
