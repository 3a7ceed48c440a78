"""Building llama.cpp's ``llama-bench`` and ``llama-quantize``, its converter's venv and
the ``llama-cpp-python`` binding.

``make peers`` (``python -m app.bench.parts.peers.llama_build``) prepares what the
``peers`` bench part compares Swapless with, once, under ``~/.cache/swapless/peers``:

1. the source: the PyPI ``llama-cpp-python`` sdist (``pip download --no-binary :all:``),
   which vendors llama.cpp under ``vendor/llama.cpp`` — pip is the one channel to
   llama.cpp's sources every Swapless machine already has;
2. the two tools, built with CMake (Release, static, ``GGML_NATIVE=ON``: a measurement
   tool for this machine, never shipped), only those targets, ``nice`` and two jobs;
3. a separate venv for llama.cpp's own converter (``convert_hf_to_gguf.py``), which
   needs torch, transformers and the sdist's ``gguf-py``: tools of the measurement,
   never Swapless dependencies;
4. ``llama-cpp-python`` itself, built by pip from the same sdist into that venv, for
   the multi-turn chat (`chat_turns`).

Each step is skipped when its output exists, so running it again is cheap. The version
is pinned (`DEFAULT_VERSION`) so a table can be reproduced; ``SWAPLESS_LLAMA_VERSION``
picks another. This module imports neither MLX nor anything of the app's core.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "llama-cpp-python"
DEFAULT_VERSION = "0.3.36"
"""The sdist the measured table was made with (llama.cpp/ggml 0.25.3)."""
VERSION_ENV = "SWAPLESS_LLAMA_VERSION"
CACHE_ENV = "SWAPLESS_PEERS_DIR"
"""Overrides the cache folder (default ``$XDG_CACHE_HOME/swapless/peers``)."""
TORCH_ENV = "SWAPLESS_PEERS_TORCH"
"""The torch requirement of the converter's venv. Set ``PIP_EXTRA_INDEX_URL`` to
``https://download.pytorch.org/whl/cpu`` where PyPI's default torch would pull CUDA."""
DEFAULT_TORCH = "torch==2.13.0"
TARGETS = ("llama-bench", "llama-quantize")
# The converter's other needs, as its requirements file lists them; transformers 4
# (the converter pins 4.57), and the sdist's own gguf-py is installed after these.
CONVERTER_REQUIREMENTS = (
    "numpy",
    "sentencepiece",
    "transformers<5",
    "protobuf<5",
    "safetensors",
)
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
)


class BuildError(Exception):
    """A step of the build failed; the message says which and where its log is."""


@dataclass(frozen=True)
class Layout:
    """Where one version's files live under the cache folder.

    Attributes:
        root: The cache folder.
        version: The ``llama-cpp-python`` version.
    """

    root: Path
    version: str

    @property
    def sdist_dir(self) -> Path:
        return self.root / "sdist"

    @property
    def source(self) -> Path:
        """The vendored llama.cpp tree."""
        return (
            self.root
            / "src"
            / f"llama_cpp_python-{self.version}"
            / "vendor"
            / "llama.cpp"
        )

    @property
    def build_dir(self) -> Path:
        return self.root / "build" / self.version

    @property
    def bin_dir(self) -> Path:
        return self.build_dir / "bin"

    @property
    def llama_bench(self) -> Path:
        return self.bin_dir / "llama-bench"

    @property
    def llama_quantize(self) -> Path:
        return self.bin_dir / "llama-quantize"

    @property
    def converter(self) -> Path:
        return self.source / "convert_hf_to_gguf.py"

    @property
    def venv_python(self) -> Path:
        return self.root / "venv" / "bin" / "python"


def cache_root() -> Path:
    """The folder holding the sdist, the builds and the converter's venv."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "swapless" / "peers"


def layout(version: str | None = None) -> Layout:
    """The layout of ``version`` (default: ``$SWAPLESS_LLAMA_VERSION`` or the pinned)."""
    chosen = version or os.environ.get(VERSION_ENV) or DEFAULT_VERSION
    return Layout(cache_root(), chosen)


def _run(
    command: list[str],
    log: Path,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> None:
    """Run a step at low priority, its output to ``log``; raise `BuildError` on failure."""
    log.parent.mkdir(parents=True, exist_ok=True)
    niced = ["nice", *command] if shutil.which("nice") else command
    with log.open("w", encoding="utf-8") as out:
        done = subprocess.run(
            niced, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False
        )
    if done.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-5:]
        raise BuildError(
            f"{Path(command[0]).name} failed (exit {done.returncode}); log {log}: "
            + " | ".join(tail)
        )


def fetch_source(where: Layout, say=print) -> Path:
    """Download and unpack the sdist (once); return the vendored llama.cpp tree."""
    if where.converter.is_file():
        return where.source
    archive = where.sdist_dir / f"llama_cpp_python-{where.version}.tar.gz"
    if not archive.is_file():
        say(f"Downloading the {PACKAGE} {where.version} sdist …")
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-binary",
                ":all:",
                "--no-deps",
                f"{PACKAGE}=={where.version}",
                "-d",
                str(where.sdist_dir),
            ],
            where.root / "logs" / "download.log",
        )
    say(f"Unpacking {archive.name} …")
    with tarfile.open(archive) as tar:
        tar.extractall(where.root / "src", filter="data")
    if not where.converter.is_file():
        raise BuildError(f"{archive} holds no vendor/llama.cpp/convert_hf_to_gguf.py")
    return where.source


def missing_tools() -> list[str]:
    """The build tools this machine lacks."""
    missing = [tool for tool in ("cmake",) if shutil.which(tool) is None]
    if not any(shutil.which(cc) for cc in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler")
    return missing


def build_tools(where: Layout, jobs: int = 2, say=print) -> tuple[Path, Path]:
    """Configure and build `TARGETS` (once); return llama-bench's and llama-quantize's paths."""
    if where.llama_bench.is_file() and where.llama_quantize.is_file():
        return where.llama_bench, where.llama_quantize
    missing = missing_tools()
    if missing:
        raise BuildError(f"cannot build llama.cpp: missing {', '.join(missing)}")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    logs = where.root / "logs"
    say(f"Configuring llama.cpp in {where.build_dir} …")
    _run(
        [
            "cmake",
            "-S",
            str(where.source),
            "-B",
            str(where.build_dir),
            *generator,
            *CMAKE_OPTIONS,
        ],
        logs / f"cmake-{where.version}.log",
    )
    say(f"Building {', '.join(TARGETS)} with {jobs} jobs (takes a while) …")
    _run(
        [
            "cmake",
            "--build",
            str(where.build_dir),
            "--target",
            *TARGETS,
            "-j",
            str(jobs),
        ],
        logs / f"build-{where.version}.log",
    )
    return where.llama_bench, where.llama_quantize


def converter_venv(where: Layout, say=print) -> Path:
    """Create the converter's venv (once); return its Python."""
    python = where.venv_python
    if python.is_file() and python_imports(python, "torch", "gguf", "transformers"):
        return python
    say(f"Creating the converter's venv in {python.parent.parent} (torch, gguf) …")
    logs = where.root / "logs"
    if not python.is_file():
        _run(
            [sys.executable, "-m", "venv", str(python.parent.parent)], logs / "venv.log"
        )
    torch = os.environ.get(TORCH_ENV) or DEFAULT_TORCH
    _run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            torch,
            *CONVERTER_REQUIREMENTS,
        ],
        logs / "venv-install.log",
    )
    _run(
        [str(python), "-m", "pip", "install", "--quiet", str(where.source / "gguf-py")],
        logs / "venv-gguf.log",
    )
    return python


def python_binding(where: Layout, jobs: int = 2, say=print) -> Path:
    """Install ``llama-cpp-python`` from the same sdist into the venv (once).

    The chat comparison (`chat_turns`) holds a conversation through the binding, as a
    llama-cpp-python user would. pip compiles its own copy of llama.cpp with the same
    native flags as the tools (a measurement build for this machine, never shipped).
    """
    python = where.venv_python
    if python_imports(python, "llama_cpp"):
        return python
    say(f"Building llama-cpp-python {where.version} into the venv (takes a while) …")
    flags = [
        option
        for option in CMAKE_OPTIONS
        if not option.startswith(("-DCMAKE_BUILD_TYPE", "-DBUILD_SHARED_LIBS"))
    ]
    env = dict(
        os.environ,
        CMAKE_ARGS=" ".join([*flags, "-DLLAMA_BUILD_TOOLS=OFF"]),
        CMAKE_BUILD_PARALLEL_LEVEL=str(jobs),
    )
    sdist = where.sdist_dir / f"llama_cpp_python-{where.version}.tar.gz"
    _run(
        [str(python), "-m", "pip", "install", "--quiet", str(sdist)],
        where.root / "logs" / "binding-install.log",
        env=env,
    )
    return python


def python_imports(python: Path, *modules: str) -> bool:
    """Whether ``python`` can import every one of ``modules`` (in a child process)."""
    done = subprocess.run(
        [str(python), "-c", "import " + ", ".join(modules)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def prepare(version: str | None = None, jobs: int = 2, say=print) -> Layout:
    """Every step, each skipped when done: source, tools, converter venv."""
    where = layout(version)
    where.root.mkdir(parents=True, exist_ok=True)
    fetch_source(where, say)
    build_tools(where, jobs, say)
    converter_venv(where, say)
    python_binding(where, jobs, say)
    return where


def main(argv: list[str] | None = None) -> int:
    """``make peers``: prepare everything; exit 2 with one line when a step fails."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m app.bench.parts.peers.llama_build",
        description="Build llama-bench and llama-quantize from the llama-cpp-python "
        "sdist, and the venv of llama.cpp's converter, for `swapless bench --only peers`.",
    )
    parser.add_argument(
        "--version", help=f"llama-cpp-python version ({DEFAULT_VERSION})"
    )
    parser.add_argument("--jobs", type=int, default=2, help="parallel compile jobs (2)")
    args = parser.parse_args(argv)
    try:
        where = prepare(args.version, args.jobs)
    except (BuildError, OSError, tarfile.TarError) as exc:
        print(f"make peers: {exc}", file=sys.stderr)
        return 2
    print(f"llama-bench: {where.llama_bench}")
    print(f"llama-quantize: {where.llama_quantize}")
    print(f"converter: {where.converter} (python {where.venv_python})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
