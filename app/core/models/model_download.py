"""Download an mlx-lm model from the Hugging Face hub, with progress and cancel.

The model manager calls `download_model` on a worker thread. Files go to
``SWAPLESS_HOME/models/<org>--<name>`` (a plain folder the catalog lists, never the
user's shared hub cache), only the files mlx-lm needs are fetched, progress is reported
in bytes through a callback, and a cancel event stops the transfer at the next chunk.
Every failure a user can meet (no internet, offline mode, unknown or gated repo, a repo
that is not an mlx-lm model, a full disk) becomes a `DownloadError` in words.
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.core.errors import InputError, KnownError
from app.core.files import paths
from app.core.models.model_catalog import is_model_folder

# What mlx-lm reads: config, weights, tokenizer and chat template; never PyTorch/GGUF.
ALLOW_PATTERNS = [
    "*.json",
    "*.safetensors",
    "*.txt",
    "*.model",
    "*.tiktoken",
    "*.jinja",
]
_REPO_ID = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$"
)
HUB_HELP = (
    "Check the internet connection, or download the model another way (e.g. "
    "`hf download REPO` on a connected machine) and add its folder in the model manager."
)


class DownloadError(KnownError):
    """A model could not be downloaded; the message says why in words."""


class DownloadCancelled(KnownError):
    """The user cancelled a download."""


@dataclass(frozen=True)
class DownloadProgress:
    """How far a download is.

    Attributes:
        downloaded_bytes: Bytes received so far.
        total_bytes: Bytes to receive in all, or 0 while not yet known.
        files_done: Files finished.
        files_total: Files to fetch, or 0 while not yet known.
    """

    downloaded_bytes: int
    total_bytes: int
    files_done: int
    files_total: int

    @property
    def fraction(self) -> float | None:
        """Share done (0-1), or None while the total is unknown."""
        if self.total_bytes:
            return min(1.0, self.downloaded_bytes / self.total_bytes)
        if self.files_total:
            return self.files_done / self.files_total
        return None


def check_repo_id(text: str) -> str:
    """Return a cleaned ``org/name`` repo id, accepting a pasted hub URL too.

    Raises:
        InputError: The text is not a repo id; the message shows the expected form.
    """
    repo = text.strip().removeprefix("https://huggingface.co/").strip("/")
    if not _REPO_ID.match(repo):
        raise InputError(
            f"{text.strip()!r} is not a Hugging Face repo id; write it as org/name, "
            "e.g. mlx-community/Qwen2.5-0.5B-Instruct-4bit."
        )
    return repo


def target_folder(repo_id: str) -> Path:
    """The folder a repo is downloaded into."""
    return paths.models_dir() / repo_id.replace("/", "--")


def download_model(
    repo_id: str,
    *,
    on_progress: Callable[[DownloadProgress], None] | None = None,
    cancel: threading.Event | None = None,
    endpoint: str | None = None,
    token: str | None = None,
) -> Path:
    """Download a model repo into ``SWAPLESS_HOME/models`` (blocking).

    Args:
        repo_id: ``org/name`` (or a hub URL).
        on_progress: Called from download threads with the running totals.
        cancel: Set it to stop the download; `DownloadCancelled` is raised.
        endpoint: Hub URL (default: huggingface.co, or ``HF_ENDPOINT``).
        token: Hub token for gated repos (default: the user's saved login, if any).

    Returns:
        The model folder.

    Raises:
        InputError: ``repo_id`` is malformed.
        DownloadCancelled: ``cancel`` was set.
        DownloadError: The hub cannot be reached, the repo does not exist or is gated,
            it is not an mlx-lm model, or the files cannot be written.
    """
    repo_id = check_repo_id(repo_id)
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub import errors as hub_errors

    if constants.HF_HUB_OFFLINE:
        raise DownloadError(
            f"Cannot download {repo_id}: Hugging Face offline mode is on "
            "(HF_HUB_OFFLINE=1). Turn it off, or add a model folder you already have."
        )
    cancel = cancel or threading.Event()
    folder = target_folder(repo_id)
    progress_class = _progress_class(on_progress or (lambda _p: None), cancel)
    try:
        snapshot_download(
            repo_id,
            local_dir=folder,
            allow_patterns=ALLOW_PATTERNS,
            tqdm_class=progress_class,
            endpoint=endpoint,
            token=token,
            etag_timeout=10,
        )
    except DownloadCancelled:
        raise
    except hub_errors.GatedRepoError as exc:
        raise DownloadError(
            f"{repo_id} is gated: accept its licence on huggingface.co and log in "
            "(`hf auth login`), then try again."
        ) from exc
    except hub_errors.RepositoryNotFoundError as exc:
        raise DownloadError(
            f"There is no model {repo_id} on the Hugging Face hub (or it is private). "
            "Check the spelling; mlx-community/… repos hold ready-made MLX models."
        ) from exc
    except hub_errors.RevisionNotFoundError as exc:
        raise DownloadError(f"{repo_id} has no main revision to download.") from exc
    except hub_errors.LocalEntryNotFoundError as exc:
        raise DownloadError(
            f"Cannot reach the Hugging Face hub to download {repo_id}: this machine "
            f"seems to be offline. {HUB_HELP}"
        ) from exc
    except hub_errors.HfHubHTTPError as exc:
        raise DownloadError(
            f"The hub refused the download of {repo_id}: {exc}"
        ) from exc
    except OSError as exc:
        if _is_network_error(exc):
            raise DownloadError(
                f"Cannot reach the Hugging Face hub to download {repo_id}: {exc}. "
                f"{HUB_HELP}"
            ) from exc
        raise DownloadError(
            f"Cannot write the model to {folder}: {exc.strerror or exc}."
        ) from exc
    except Exception as exc:
        if _is_network_error(exc):
            raise DownloadError(
                f"Cannot reach the Hugging Face hub to download {repo_id}: {exc}. "
                f"{HUB_HELP}"
            ) from exc
        raise
    if cancel.is_set():
        raise DownloadCancelled(f"Download of {repo_id} cancelled.")
    if not is_model_folder(folder):
        raise DownloadError(
            f"{repo_id} downloaded, but it has no config.json and *.safetensors "
            "weights, so it is not a model mlx-lm can load (GGUF or PyTorch-only repos "
            "are not supported; look for an mlx-community conversion)."
        )
    return folder


def _is_network_error(exc: BaseException) -> bool:
    names = {type(e).__name__ for e in _chain(exc)}
    return bool(
        names
        & {
            "ConnectError",
            "ConnectTimeout",
            "ReadTimeout",
            "ConnectionError",
            "ConnectionRefusedError",
            "TimeoutError",
            "gaierror",
        }
    )


def _chain(exc: BaseException):
    seen = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _progress_class(
    report: Callable[[DownloadProgress], None], cancel: threading.Event
) -> type:
    """A tqdm look-alike class that forwards hub progress to ``report``.

    huggingface_hub instantiates it for the byte counters and for the per-file bar;
    every update checks ``cancel``, so a cancel takes effect at the next chunk.
    """
    from tqdm.auto import tqdm

    lock = threading.Lock()
    totals = {"bytes": 0, "bytes_total": 0, "files": 0, "files_total": 0}

    class _Progress(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.pop("name", None)
            kwargs["file"] = io.StringIO()  # never draw on the terminal
            kwargs["disable"] = False
            super().__init__(*args, **kwargs)
            description = str(kwargs.get("desc") or "")
            # "Reconstructing" counts bytes written against the known file sizes; the
            # "Downloading bytes" bar has no real total, so it is not reported.
            if description.startswith("Reconstructing"):
                self._kind = "bytes"
            elif description.startswith("Fetching"):
                self._kind = "files"
            else:
                self._kind = "other"

        def update(self, n=1):
            if cancel.is_set():
                raise DownloadCancelled("Download cancelled.")
            result = super().update(n)
            self._publish()
            return result

        def refresh(self, *args, **kwargs):
            self._publish()
            return super().refresh(*args, **kwargs)

        def _publish(self):
            if self._kind == "other":
                return
            with lock:
                if self._kind == "bytes":
                    totals["bytes"], totals["bytes_total"] = (
                        int(self.n),
                        int(self.total or 0),
                    )
                else:
                    totals["files"], totals["files_total"] = (
                        int(self.n),
                        int(self.total or 0),
                    )
                snapshot = DownloadProgress(
                    totals["bytes"],
                    totals["bytes_total"],
                    totals["files"],
                    totals["files_total"],
                )
            report(snapshot)

    return _Progress
