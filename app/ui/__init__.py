"""The desktop app: a thin PySide6 layer over the Qt-free core.

Entry points: `application.run_app` (``swapless``), `smoke_test.run_smoke_test`
(``swapless --smoke-test``), `responsiveness` (the benchmark's UI measures) and
`screenshot` (``make screenshot``). `main_window.MainWindow` is the controller; views
are ``*_view.py`` (layout and painting only), dialogs ``*_dialog.py``. Model work runs
on the `generation_worker.GenerationWorker` thread, memory sampling on the
`memory_sampler.MemorySampler` thread; the UI thread never calls MLX or blocks.
"""
