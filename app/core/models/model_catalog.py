"""Find the mlx-lm models already on this machine, and say whether each fits before loading.

The model manager lists every model folder it can find: Swapless's own
(``SWAPLESS_HOME/models``), the Hugging Face cache (``HF_HUB_CACHE``, or ``HF_HOME/hub``,
or ``~/.cache/huggingface/hub``, one ``models--org--name/snapshots/<rev>`` per model),
LM Studio's folders (``~/.lmstudio/models`` and ``~/.cache/lm-studio/models``, laid out
``publisher/model``) and folders the user added. A model folder is one with a
``config.json`` and at least one ``*.safetensors`` file, which is what mlx-lm loads; GGUF
folders are skipped. Only file names and sizes are read while scanning; the verdict
(`assess`) reads config.json and the safetensors headers through the doctor.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app.core.budget.memory_budget import BudgetSettings, check_model_fits
from app.core.errors import KnownError
from app.core.files import bounded_read, paths
from app.core.memory.snapshot import MemorySnapshot

SOURCE_SHIPPED = "shipped"
SOURCE_SWAPLESS = "swapless"
SOURCE_HUGGING_FACE = "huggingface"
SOURCE_LM_STUDIO = "lm-studio"
SOURCE_FOLDER = "folder"
# The loaded model, when it lives outside every place searched (``--model DIR``).
SOURCE_LOADED = "loaded"
SOURCE_LABELS = {
    SOURCE_SHIPPED: "Ships with Swapless",
    SOURCE_SWAPLESS: "Swapless",
    SOURCE_HUGGING_FACE: "Hugging Face cache",
    SOURCE_LM_STUDIO: "LM Studio",
    SOURCE_FOLDER: "Added folder",
    SOURCE_LOADED: "Loaded from its folder",
}
# LM Studio nests publisher/model; an added folder may hold a model or a tree of them.
MAX_SEARCH_DEPTH = 3


@dataclass(frozen=True)
class LocalModel:
    """One loadable model folder.

    Attributes:
        name: A readable name (``org/name`` for hub models, else the folder name).
        path: The folder mlx-lm loads.
        source: Where it was found (one of the ``SOURCE_*`` constants).
        size_bytes: Bytes of its files on disk (symlinks followed).
        is_demo: True for Swapless's demo model (random weights).
        is_reference: True for the reference model shipped with Swapless.
    """

    name: str
    path: Path
    source: str
    size_bytes: int
    is_demo: bool = False
    is_reference: bool = False

    @property
    def source_label(self) -> str:
        """The source in words."""
        return SOURCE_LABELS.get(self.source, self.source)


@dataclass(frozen=True)
class ModelVerdict:
    """Whether a model fits this machine, from the doctor report.

    Attributes:
        fits: False when its weights alone exceed the memory budget or it cannot be
            read.
        summary: One sentence for the model list.
        weights_bytes: Resident size of the weights on this backend, when known.
        max_safe_context: Longest safe context by KV bits (``"16"``, ``"8"``, ``"4"``);
            a value is None when that precision cannot be used (see the report's
            ``kv_errors``) or memory does not limit it.
        report: The full doctor report, or None when the folder cannot be read.
        trained_context: The context the model was trained for (config.json's
            ``max_position_embeddings``), when it declares one: conversations never
            pass it, whatever memory allows.
    """

    fits: bool
    summary: str
    weights_bytes: int | None
    max_safe_context: dict[str, int | None]
    report: dict[str, Any] | None
    trained_context: int | None = None

    def usable_context(self, bits: str) -> int | None:
        """The longest context usable at ``bits``: memory's limit, capped by training.

        None when memory does not limit it and the model declares no trained context,
        or when this precision is unusable.
        """
        if bits not in self.max_safe_context or bits in self.kv_errors:
            return None
        safe = self.max_safe_context[bits]
        if self.trained_context is None:
            return safe
        return self.trained_context if safe is None else min(safe, self.trained_context)

    def capped_by_training(self, bits: str) -> bool:
        """True when the trained context, not memory, sets the usable context."""
        safe = self.max_safe_context.get(bits)
        return (
            self.trained_context is not None
            and bits in self.max_safe_context
            and bits not in self.kv_errors
            and (safe is None or safe > self.trained_context)
        )

    @property
    def kv_errors(self) -> dict[str, str]:
        """Precisions this model cannot use, with the reason (from the report)."""
        return (self.report or {}).get("kv_errors", {})


REFERENCE_NAME = "Reference model"
REFERENCE_EXPLANATION = (
    "The reference model ships with Swapless and answers offline. It is tiny (3.7 "
    "million parameters, trained on a CPU): it continues text in the style it read and "
    "finds a fact given earlier in the conversation, but it is no assistant."
)


def reference_model_folder() -> Path:
    """The reference model shipped with Swapless (``resources/quality/reference-model``)."""
    return paths.resources_dir() / "quality" / "reference-model"


def is_model_folder(folder: Path) -> bool:
    """True when ``folder`` holds a config.json and safetensors weights."""
    try:
        return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))
    except OSError:
        return False


def hf_hub_cache(
    env: Mapping[str, str] | None = None, home: Path | None = None
) -> Path:
    """Return the Hugging Face hub cache folder, honouring HF_HUB_CACHE and HF_HOME."""
    env = os.environ if env is None else env
    home = Path.home() if home is None else home
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    xdg = env.get("XDG_CACHE_HOME")
    cache = Path(xdg).expanduser() if xdg else home / ".cache"
    return cache / "huggingface" / "hub"


def lm_studio_folders(home: Path | None = None) -> list[Path]:
    """Return LM Studio's model folders (current and older layouts)."""
    home = Path.home() if home is None else home
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def find_models(
    extra_folders: Iterable[str | Path] = (),
    *,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> list[LocalModel]:
    """List the model folders on this machine.

    Args:
        extra_folders: Folders the user added: each may be a model folder or hold
            model folders up to `MAX_SEARCH_DEPTH` levels down.
        env: Environment (default ``os.environ``), for HF_HUB_CACHE/HF_HOME.
        home: The user's home folder (default ``Path.home()``).

    Returns:
        Models sorted by source then name; a folder found twice is listed once.
    """
    found: list[LocalModel] = []
    reference = reference_model_folder()
    if is_model_folder(reference):
        found.append(
            replace(
                _model(REFERENCE_NAME, reference, SOURCE_SHIPPED), is_reference=True
            )
        )
    own = paths.models_dir()
    demo = paths.demo_model_dir()
    for folder in _model_folders_under(own, MAX_SEARCH_DEPTH):
        name = str(folder.relative_to(own))
        found.append(_model(name, folder, SOURCE_SWAPLESS, is_demo=_same(folder, demo)))
    found += _hugging_face_models(hf_hub_cache(env, home))
    for root in lm_studio_folders(home):
        for folder in _model_folders_under(root, MAX_SEARCH_DEPTH):
            found.append(
                _model(str(folder.relative_to(root)), folder, SOURCE_LM_STUDIO)
            )
    for extra in extra_folders:
        root = Path(extra).expanduser()
        for folder in _model_folders_under(root, MAX_SEARCH_DEPTH):
            name = root.name if folder == root else str(folder.relative_to(root))
            found.append(_model(name, folder, SOURCE_FOLDER))
    unique: dict[Path, LocalModel] = {}
    for model in found:
        unique.setdefault(_resolved(model.path), model)
    order = list(SOURCE_LABELS)
    return sorted(
        unique.values(), key=lambda m: (order.index(m.source), m.name.lower())
    )


def _hugging_face_models(cache: Path) -> list[LocalModel]:
    models: list[LocalModel] = []
    try:
        repos = sorted(cache.glob("models--*"))
    except OSError:
        return models
    for repo in repos:
        snapshot = _current_snapshot(repo)
        if snapshot is not None and is_model_folder(snapshot):
            name = repo.name.removeprefix("models--").replace("--", "/", 1)
            models.append(_model(name, snapshot, SOURCE_HUGGING_FACE))
    return models


def _current_snapshot(repo: Path) -> Path | None:
    """The snapshot ``refs/main`` points at, else the newest complete one."""
    snapshots = repo / "snapshots"
    ref = repo / "refs" / "main"
    try:
        if ref.is_file():
            candidate = snapshots / ref.read_text(encoding="ascii").strip()
            if is_model_folder(candidate):
                return candidate
        complete = [s for s in snapshots.iterdir() if is_model_folder(s)]
    except OSError:
        return None
    if not complete:
        return None
    return max(complete, key=lambda s: s.stat().st_mtime)


def _model_folders_under(root: Path, depth: int) -> list[Path]:
    """Model folders at ``root`` or below it (not inside a model folder)."""
    if is_model_folder(root):
        return [root]
    if depth == 0:
        return []
    try:
        children = sorted(
            c for c in root.iterdir() if c.is_dir() and not c.name.startswith(".")
        )
    except OSError:
        return []
    found = []
    for child in children:
        found += _model_folders_under(child, depth - 1)
    return found


def _model(name: str, folder: Path, source: str, is_demo: bool = False) -> LocalModel:
    return LocalModel(
        name=name,
        path=folder,
        source=source,
        size_bytes=folder_size(folder),
        is_demo=is_demo,
    )


def folder_size(folder: Path) -> int:
    """Bytes of the files directly in ``folder`` and below, following symlinks."""
    total = 0
    for dirpath, _dirs, files in os.walk(folder, followlinks=False):
        for name in files:
            try:
                total += (Path(dirpath) / name).stat().st_size
            except OSError:
                continue  # a dangling symlink of an incomplete download
    return total


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


def _same(a: Path, b: Path) -> bool:
    return _resolved(a) == _resolved(b)


def assess(
    folder: Path,
    settings: BudgetSettings,
    snapshot: MemorySnapshot,
    *,
    act_dtype_bytes: int | None = None,
) -> ModelVerdict:
    """Say whether a model folder fits this machine, without loading it.

    The weights are counted as the engine will hold them on this platform (on the CPU
    backend packed when the native kernel serves every quantized layer, else
    dequantized to float32), exactly as ``swapless doctor`` does.

    Args:
        folder: The model folder.
        settings: Budget settings.
        snapshot: A memory snapshot of this machine.
        act_dtype_bytes: Activation width at run time (default: this platform's).

    Returns:
        The verdict; a folder the doctor cannot read gives ``fits=False`` with the
        reason in ``summary`` rather than an exception.
    """
    from app.core.budget.model_config import load_config
    from app.core.budget.runtime_profile import resident_weights_bytes, runtime_profile
    from app.core.doctor.doctor import build_report

    profile = runtime_profile()
    act = act_dtype_bytes if act_dtype_bytes is not None else profile.act_dtype_bytes
    try:
        weights = resident_weights_bytes(
            Path(folder), load_config(Path(folder)), profile
        )
        report = build_report(folder, settings, snapshot, act, weights_bytes=weights)
    except (KnownError, OSError, ValueError) as exc:
        return ModelVerdict(False, f"Cannot be read: {exc}", None, {}, None)
    weights = report["model"]["weights_bytes"]
    safe = dict(report["max_safe_context"])
    trained = report["model"].get("max_position_embeddings")
    try:
        check_model_fits(snapshot.total_bytes, weights, settings)
    except KnownError as exc:
        return ModelVerdict(False, str(exc), weights, safe, report, trained)
    verdict = ModelVerdict(True, "", weights, safe, report, trained)
    return replace(verdict, summary=_fits_summary(verdict))


def _fits_summary(verdict: ModelVerdict) -> str:
    parts, usable = [], []
    for bits in ("16", "8", "4"):
        if bits not in verdict.max_safe_context:
            continue
        value = verdict.usable_context(bits)
        if bits in verdict.kv_errors:
            text = "unavailable"
        elif value is None:
            text = "not limited by memory"
        else:
            text = format_tokens(value)
            usable.append(bits)
        if verdict.capped_by_training(bits):
            text += " (trained context)"
        parts.append(f"{bits}-bit {text}")
    if not parts:
        return "Fits in memory."
    if verdict.trained_context is None:
        return "Fits. Max safe context: " + ", ".join(parts) + "."
    capped = [b for b in usable if verdict.capped_by_training(b)]
    if capped and capped == usable:
        return (
            f"Fits. Usable context: {format_tokens(verdict.trained_context)} at "
            f"{'/'.join(usable)}-bit, the context the model was trained for (memory "
            "would allow more)."
        )
    return "Fits. Usable context: " + ", ".join(parts) + "."


def has_random_weights(folder: str | Path) -> bool:
    """True for a model built by ``swapless make-model`` (the demo): its text is noise.

    Reads only config.json; an unreadable folder counts as a real model.
    """
    try:
        config = bounded_read.read_json(
            Path(folder) / "config.json", what="The model configuration"
        )
    except (OSError, bounded_read.FileReadError):
        return False
    builder = config.get("swapless_builder") if isinstance(config, dict) else None
    return isinstance(builder, dict) and bool(builder.get("random_weights"))


def format_tokens(tokens: int) -> str:
    """``131072`` → ``"128K"``; small counts stay exact."""
    if tokens >= 1024 * 1024:
        return f"{tokens / (1024 * 1024):.1f}M tokens"
    if tokens >= 1024:
        return f"{tokens // 1024}K tokens"
    return f"{tokens} tokens"
