"""The desktop app: a thin PySide6 layer over the Qt-free core.

Entry points: `application.run_app` (``swapless``), `smoke_test.run_smoke_test`
(``swapless --smoke-test``), `responsiveness` (the benchmark's UI measures) and
`screenshot` (``make screenshot``), `soak` (``make soak``, ``swapless --soak``).
`main_window.MainWindow` builds the views and connects them to the controllers; views
are ``*_view.py`` (layout and painting only), behaviour is in ``*_controller.py`` (each
with its own signals), dialogs are ``*_dialog.py``. Model work runs on the
`generation_worker.GenerationWorker` thread, memory sampling on the
`memory_sampler.MemorySampler` thread (`window_threads`); the UI thread never calls MLX
or blocks.
"""
