"""llama.cpp side by side with Swapless (the ``peers`` bench part, docs/peers.md).

`llama_build` builds llama.cpp's ``llama-bench`` and ``llama-quantize`` from the
``llama-cpp-python`` sdist and the venv of its converter (``make peers``);
`llama_side` finds those tools, converts and quantizes the bench model and runs
llama-bench; `swapless_worker` is Swapless's engine in a process of its own; `peers`
is the part that runs both interleaved and reports the ratios.

May import the app and `app.bench`; `llama_build` imports neither MLX nor the core, so
``make peers`` works before anything else is set up.
"""
