"""The facts the PyInstaller spec builds from: version, Info.plist, module lists."""

from __future__ import annotations

import ast
import plistlib
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_project_version_reads_pyproject(bundle_info):
    with open(REPO / "pyproject.toml", "rb") as f:
        expected = tomllib.load(f)["project"]["version"]
    assert bundle_info.project_version(REPO / "pyproject.toml") == expected


def test_project_version_refuses_a_dynamic_version(bundle_info, tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndynamic = ["version"]\n')
    with pytest.raises(ValueError, match="no static"):
        bundle_info.project_version(pyproject)


def test_wheel_tags_come_from_the_wheel_file(bundle_info):
    text = (
        "Wheel-Version: 1.0\nGenerator: setuptools\nRoot-Is-Purelib: false\n"
        "Tag: cp311-cp311-macosx_14_0_arm64\n"
    )
    assert bundle_info.wheel_tags(text) == ["cp311-cp311-macosx_14_0_arm64"]


def test_minimum_macos_is_the_newest_wheel_target(bundle_info):
    tags = [
        "cp311-cp311-macosx_14_0_arm64",  # mlx 0.32
        "cp310-abi3-macosx_13_0_universal2",  # PySide6
        "py3-none-any",
        "cp311-cp311-manylinux_2_35_x86_64",
    ]
    assert bundle_info.minimum_macos_version(tags) == "14.0"


def test_minimum_macos_compares_numbers_not_strings(bundle_info):
    tags = ["cp311-cp311-macosx_9_0_arm64", "cp311-cp311-macosx_13_5_arm64"]
    assert bundle_info.minimum_macos_version(tags, floor="11.0") == "13.5"


def test_minimum_macos_falls_back_to_the_floor(bundle_info):
    assert (
        bundle_info.minimum_macos_version(["py3-none-any"]) == bundle_info.MACOS_FLOOR
    )


def test_info_plist_has_the_required_keys_and_serializes(bundle_info):
    plist = bundle_info.info_plist("1.2.3", "14.0")
    assert plist["CFBundleIdentifier"] == "app.swapless.Swapless"
    assert plist["CFBundleShortVersionString"] == "1.2.3"
    assert plist["CFBundleVersion"] == "1.2.3"
    assert plist["LSMinimumSystemVersion"] == "14.0"
    assert plist["NSHighResolutionCapable"] is True
    assert plist["CFBundleName"] == "Swapless"
    # What PyInstaller writes to Contents/Info.plist must round-trip.
    assert plistlib.loads(plistlib.dumps(plist)) == plist


def test_corpus_files_stop_where_the_trainer_stops(bundle_info, tmp_path):
    files = []
    for name, size in (("a.py", 40), ("b.py", 40), ("c.py", 40)):
        path = tmp_path / name
        path.write_text("x" * size)
        files.append(path)
    # 30 characters of prose, cap 150: 120 left, then 80, 40, 0: all three read.
    assert bundle_info.corpus_files_to_bundle(files, 30, 150) == files
    # Cap 100: 70 left, then 30; b is read (the trainer truncates it), c is not.
    assert bundle_info.corpus_files_to_bundle(files, 30, 100) == files[:2]
    # Prose alone fills the cap: no file at all.
    assert bundle_info.corpus_files_to_bundle(files, 100, 100) == []


def test_corpus_matches_the_trainer(bundle_info):
    from pydoc_data.topics import topics

    from app.core.modelkit import tokenizer_training

    chosen = bundle_info.corpus_files_to_bundle(
        tokenizer_training.corpus_files(),
        sum(len(text) for text in topics.values()),
        tokenizer_training.CORPUS_CHAR_LIMIT,
    )
    read = sum(len(text) for text in tokenizer_training.iter_corpus())
    assert read == tokenizer_training.CORPUS_CHAR_LIMIT  # the cap is reached
    assert 0 < len(chosen) <= len(tokenizer_training.corpus_files())


def _pyside_modules_imported_by_the_app() -> set[str]:
    modules = set()
    for path in (REPO / "app").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            modules.update(
                ".".join(n.split(".")[:2]) for n in names if n.startswith("PySide6.")
            )
    return modules


def test_no_qt_module_the_app_imports_is_excluded(bundle_info):
    used = _pyside_modules_imported_by_the_app()
    assert {"PySide6.QtCore", "PySide6.QtWidgets"} <= used
    assert used.isdisjoint(bundle_info.QT_EXCLUDES)


def test_transformers_excludes_keep_configs_and_tokenizers(bundle_info, tmp_path):
    for relative in (
        "llama/__init__.py",
        "llama/configuration_llama.py",
        "llama/tokenization_llama.py",
        "llama/modeling_llama.py",
        "llama/modular_llama.py",
        "whisper/english_normalizer.py",
        "whisper/feature_extraction_whisper.py",
        "auto/modeling_auto.py",
    ):
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    assert bundle_info.transformers_model_excludes(tmp_path) == [
        "transformers.models.llama.modeling_llama",
        "transformers.models.llama.modular_llama",
        "transformers.models.whisper.feature_extraction_whisper",
    ]


@pytest.mark.parametrize(
    ("dest", "unwanted"),
    [
        ("libcudart.so", True),
        ("libcudart.so.13", True),
        ("PySide6/Qt/plugins/platformthemes/libqgtk3.so", True),
        ("PySide6/Qt/plugins/platformthemes/libqxdgdesktopportal.so", False),
        ("PySide6/Qt/lib/libicudata.so.73", False),
        ("mlx/lib/libmlx.so", False),
    ],
)
def test_unwanted_binaries(bundle_info, dest, unwanted):
    assert bundle_info.is_unwanted_binary(dest) is unwanted
