"""What the packaged app is: names, version, Info.plist, module lists, bundled corpus.

The PyInstaller spec (`swapless.spec`), the build script (`build.py`) and the unit tests
in ``tests/packaging`` share these facts. Pure Python (no PyInstaller, Qt or MLX), so
the macOS-only parts are tested on Linux too.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path

APP_NAME = "Swapless"
EXECUTABLE = "swapless"  # Linux executable and folder name under dist/
BUNDLE_ID = "app.swapless.Swapless"
DESCRIPTION = "Chat with local MLX models without letting the KV cache eat the machine."

# The oldest macOS the app could ever run on: Apple Silicon and a Python 3.11 build.
# The real minimum is the newest one any bundled wheel was built for (see
# `minimum_macos_version`): mlx 0.32.x ships macosx_14_0 wheels at the oldest.
MACOS_FLOOR = "11.0"
# Distributions whose compiled wheels set the macOS minimum of the bundle.
MACOS_BINARY_DISTRIBUTIONS = ("mlx", "mlx-metal", "pyside6-essentials", "shiboken6")

# Qt modules the app never imports (it uses QtCore, QtGui, QtWidgets). Excluding them
# keeps an accidental import from dragging QML/Quick (~100 MB) into the bundle.
QT_EXCLUDES = tuple(
    f"PySide6.{name}"
    for name in (
        "QtConcurrent",
        "QtDesigner",
        "QtHelp",
        "QtLabsStyleKit",
        "QtOpenGL",
        "QtOpenGLWidgets",
        "QtPrintSupport",
        "QtQml",
        "QtQmlFeatures",
        "QtQuick",
        "QtQuickControls2",
        "QtQuickTest",
        "QtQuickWidgets",
        "QtSql",
        "QtTest",
        "QtUiTools",
        "QtXml",
    )
)

# Installed in a developer's venv or optional for transformers, never used by the app.
HEAVY_EXCLUDES = (
    "IPython",
    "PIL",
    "_pytest",
    "_tkinter",
    "accelerate",
    "datasets",
    "flax",
    "jax",
    "jaxlib",
    "jupyter_client",
    "matplotlib",
    "notebook",
    "pandas",
    "pyarrow",
    "pytest",
    "pytestqt",
    "scipy",
    "sklearn",
    "tensorboard",
    "tensorflow",
    "tkinter",
    "torch",
    "torchaudio",
    "torchvision",
)

# Distributions whose metadata the frozen app reads at run time: the app's own version
# (`app.__version__`) and packages that check each other's versions on import.
METADATA_DISTRIBUTIONS = (
    "swapless",
    "mlx",
    "mlx-lm",
    "transformers",
    "tokenizers",
    "huggingface-hub",
    "safetensors",
    "regex",
    "numpy",
    "jinja2",
    "pyyaml",
    "packaging",
    "filelock",
    "tqdm",
)


def project_version(pyproject: Path) -> str:
    """Return ``[project] version`` from ``pyproject``.

    Raises:
        ValueError: If the file has no static version.
    """
    with open(pyproject, "rb") as f:
        project = tomllib.load(f).get("project", {})
    version = project.get("version")
    if not isinstance(version, str) or not version:
        raise ValueError(f"{pyproject} has no static [project] version")
    return version


_MACOS_TAG = re.compile(r"macosx_(\d+)_(\d+)_")


def wheel_tags(wheel_file: str) -> list[str]:
    """Return the ``Tag:`` values of a wheel's ``WHEEL`` metadata file."""
    return [
        line.split(":", 1)[1].strip()
        for line in wheel_file.splitlines()
        if line.startswith("Tag:")
    ]


def macos_wheel_tags(distributions: Iterable[str]) -> list[str]:
    """Return the wheel tags of the installed ``distributions`` (missing ones skipped)."""
    from importlib.metadata import PackageNotFoundError, distribution

    tags = []
    for name in distributions:
        try:
            tags += wheel_tags(distribution(name).read_text("WHEEL") or "")
        except PackageNotFoundError:
            continue
    return tags


def minimum_macos_version(wheel_tags: Iterable[str], floor: str = MACOS_FLOOR) -> str:
    """Return the macOS version a bundle of wheels with these tags needs.

    A wheel tagged ``macosx_14_0_arm64`` holds binaries built for macOS 14.0 or later,
    so the bundle needs the newest of all the tags (and at least ``floor``).

    Args:
        wheel_tags: Tags from the ``WHEEL`` files, e.g. ``cp311-cp311-macosx_14_0_arm64``.
            Tags without a macOS platform (pure Python, Linux) are ignored.
        floor: The answer when no tag names a newer macOS.

    Returns:
        A version string such as ``"14.0"``.
    """
    best = tuple(int(part) for part in floor.split("."))
    for tag in wheel_tags:
        for match in _MACOS_TAG.finditer(tag):
            best = max(best, (int(match[1]), int(match[2])))
    return ".".join(str(part) for part in best)


def info_plist(version: str, minimum_macos: str) -> dict:
    """Return the Info.plist keys of the macOS app (PyInstaller adds the executable's).

    Args:
        version: The app version, ``[project] version`` of pyproject.toml.
        minimum_macos: ``LSMinimumSystemVersion`` (see `minimum_macos_version`).

    Returns:
        A dict `plistlib` can write.
    """
    return {
        "CFBundleName": APP_NAME,
        "CFBundleDisplayName": APP_NAME,
        "CFBundleIdentifier": BUNDLE_ID,
        "CFBundleShortVersionString": version,
        "CFBundleVersion": version,
        "CFBundlePackageType": "APPL",
        "CFBundleDevelopmentRegion": "en",
        "LSApplicationCategoryType": "public.app-category.developer-tools",
        "LSMinimumSystemVersion": minimum_macos,
        # MLX's Metal backend exists on Apple Silicon only.
        "LSArchitecturePriority": ["arm64"],
        "LSRequiresNativeExecution": True,
        "NSHighResolutionCapable": True,
        # Follow the system's dark mode instead of forcing the light appearance.
        "NSRequiresAquaSystemAppearance": False,
        "NSHumanReadableCopyright": "MIT License",
    }


def corpus_files_to_bundle(
    files: Sequence[Path], prose_chars: int, limit: int
) -> list[Path]:
    """Return the standard-library files the tokenizer trainer reads before its cap.

    ``app.core.modelkit.tokenizer_training.iter_corpus`` reads the pydoc topics
    (``prose_chars`` characters) and then ``files`` in order, until ``limit``
    characters. A frozen app has no ``.py`` sources on disk, so the build bundles
    exactly these files where the trainer looks: the frozen app then trains the same
    tokenizer as a source checkout on the same Python version.

    Args:
        files: The trainer's files, in its order (``corpus_files()``).
        prose_chars: Characters of prose read before the first file.
        limit: The trainer's cap (``CORPUS_CHAR_LIMIT``).

    Returns:
        A prefix of ``files``.
    """
    chosen = []
    remaining = limit - prose_chars
    for path in files:
        if remaining <= 0:
            break
        chosen.append(path)
        remaining -= len(path.read_text(encoding="utf-8", errors="replace"))
    return chosen


# Per-architecture modules of transformers that need torch or serve images, audio and
# video. The app only reads configs and tokenizers; transformers' TYPE_CHECKING imports
# would otherwise pull every architecture's modeling code (~40 MB) into the bundle.
TRANSFORMERS_UNUSED_PREFIXES = (
    "modeling_",
    "modular_",
    "image_processing_",
    "video_processing_",
    "feature_extraction_",
    "processing_",
    "generation_",
    "convert_",
)


def transformers_model_excludes(models_dir: Path) -> list[str]:
    """Return ``transformers.models.<arch>.<module>`` names the bundle leaves out.

    Args:
        models_dir: The installed ``transformers/models`` folder.

    Returns:
        Module names whose file name starts with one of
        `TRANSFORMERS_UNUSED_PREFIXES`, for every architecture except ``auto`` (whose
        mappings the tokenizer loader imports).
    """
    names = []
    for path in sorted(models_dir.glob("*/*.py")):
        arch = path.parent.name
        if arch == "auto" or not path.stem.startswith(TRANSFORMERS_UNUSED_PREFIXES):
            continue
        names.append(f"transformers.models.{arch}.{path.stem}")
    return names


_UNWANTED_BINARIES = re.compile(
    r"(^|/)(libcudart|libcuda|libcublas|libnvidia|libnvrtc)[^/]*$"
    r"|(^|/)platformthemes/libqgtk3\.so$"
)


def is_unwanted_binary(dest: str) -> bool:
    """Return True for a collected binary the bundle leaves out (see the spec).

    Args:
        dest: The binary's destination path inside the bundle, ``/``-separated.
    """
    return bool(_UNWANTED_BINARIES.search(dest.replace("\\", "/")))
