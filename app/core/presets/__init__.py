"""Task presets and the generation settings they carry: the typed `Preset`, the built-in
and user preset files, the form the editor fills, and `GenerationSettings` (KV bits,
group, aging) that the engine reads.

Pure Python; may import `app.core.files` and `app.core.errors`; never MLX or Qt.
"""
