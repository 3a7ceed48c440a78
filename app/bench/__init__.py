"""`swapless bench`: measure what Swapless promises, side by side with plain mlx-lm.

One run measures every comparison interleaved (A B A B …) on the same loaded model and
reports each as a ratio with its median and spread; absolute times are recorded, never
asserted. Each measurement is one module with ``NAME``, ``TITLE``, ``available(ctx)`` and
``run(ctx)``; `registry` lists them in order and `runner` runs them, writes
``results.json``, the Markdown table and the plots.

This package may import ``mlx``/``mlx_lm`` directly (the layout test allows it): the
baseline is plain mlx-lm on the engine's own model object, and the splice quality check
needs logits, which the engine does not expose.
"""
