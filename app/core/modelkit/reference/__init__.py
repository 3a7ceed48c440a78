"""The reference model: a small llama trained here so quality checks have something to lose.

Random-weight models cannot show a loss of quality (their next-token distributions are
nearly flat and they read nothing from their context). This package builds a 3.7M
parameter llama whose copy ("induction") circuit is written into its weights at
initialisation (`circuit`) and then trained on offline text plus in-context recall
tasks (`corpus`, `training`), and measures it (`evaluation`; its reasoning and tool
format: `format_evaluation`, `tool_probes`). `tool_heads` writes layer 1's tool heads
on exact features (an experiment, docs/reference-model.md). `install` puts the
committed weights, or freshly trained ones, into a model folder that ``mlx_lm.load``
loads unchanged.
"""
