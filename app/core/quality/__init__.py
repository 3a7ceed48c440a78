"""How much each compression costs in answers, measured on the user's own model.

The pure half of `swapless check-quality`: the probes (texts, pass keys, conversation
facts), the grid of compressions to compare, the metrics and their thresholds, the
frozen events the check streams and the results it stores. The half that runs the
model lives in `app.core.engine.quality.quality_check`.
"""
