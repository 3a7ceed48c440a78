"""llama.cpp's side of the comparison: find its tools, convert the model, run llama-bench.

The tools are found in this order: a ``llama-bench`` path given to the bench
(``--llama-bench``), ``$SWAPLESS_LLAMA_BENCH``, then the build of ``make peers``
(`llama_build`). ``llama-quantize`` is looked for next to llama-bench, then in that
build; the converter (``convert_hf_to_gguf.py``) in the ``make peers`` source tree or
above a user's own llama-bench (a llama.cpp checkout's ``build/bin``), run by the
converter venv's Python or ``$SWAPLESS_PEERS_PYTHON``.

Each ``llama-bench`` run is a process of its own; its peak RSS is read from the kernel
when it exits (``wait4``, through a small waiting process), so it is llama.cpp's alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from app.bench.parts.peers import llama_build

BENCH_ENV = "SWAPLESS_LLAMA_BENCH"
PYTHON_ENV = "SWAPLESS_PEERS_PYTHON"
QUANT_TYPE = "Q4_0"
OUTTYPE = "f16"
"""The converter's output: a 16-bit float GGUF, what llama-quantize starts from."""
PRE_TOKENIZER = "qwen2"
"""llama.cpp's pre-tokenizer for the bench models: the model kit trains their BPE with
Qwen2's split regex (`tokenizer_training`), but the converter only recognizes a
pre-tokenizer by hashing a known vocabulary's output, so it is named for it."""
RUN_TIMEOUT_S = 3600
# Runs a command and writes its peak RSS (KiB, wait4's ru_maxrss) to a file.
_WAIT = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""
# Runs llama.cpp's converter with one change: an unknown vocabulary hash falls back to
# the named pre-tokenizer instead of refusing (random-weight models have their own BPE).
_CONVERT = """
import os, runpy, sys
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(script))
from conversion import base
known = base.TextModel.get_vocab_base_pre
def pre(self, tokenizer):
    try:
        return known(self, tokenizer)
    except NotImplementedError:
        return os.environ["SWAPLESS_PRE_TOKENIZER"]
base.TextModel.get_vocab_base_pre = pre
runpy.run_path(script, run_name="__main__")
"""


@dataclass(frozen=True)
class Tools:
    """llama.cpp's programs this comparison runs.

    Attributes:
        bench: ``llama-bench``.
        quantize: ``llama-quantize``.
        converter: ``convert_hf_to_gguf.py``.
        python: The Python that runs the converter (with torch and gguf).
    """

    bench: Path
    quantize: Path
    converter: Path
    python: Path

    def to_dict(self) -> dict:
        """Return the paths as strings."""
        return {k: str(v) for k, v in self.__dict__.items()}


def _executable(path: Path | None) -> Path | None:
    if path is not None and path.is_file() and os.access(path, os.X_OK):
        return path
    return None


def find_tools(given: str = "") -> tuple[Tools | None, str]:
    """Find every tool; return them, or None and why not (one line, with the fix).

    Args:
        given: A llama-bench path from the command line ('' for none).
    """
    build = llama_build.layout()
    named = given or os.environ.get(BENCH_ENV, "")
    if named:
        bench = _executable(Path(named).expanduser())
        if bench is None:
            return None, f"llama-bench {named!r} is not an executable file"
    else:
        on_path = shutil.which("llama-bench")
        bench = _executable(build.llama_bench) or _executable(
            Path(on_path) if on_path else None
        )
        if bench is None:
            return None, (
                "no llama-bench found: run `make peers` to build it from the "
                f"llama-cpp-python sdist, or pass --llama-bench PATH (or set {BENCH_ENV})"
            )
    quantize = _executable(bench.parent / "llama-quantize") or _executable(
        build.llama_quantize
    )
    if quantize is None:
        return None, f"no llama-quantize next to {bench} nor in {build.bin_dir}"
    converter = next(
        (
            candidate
            for candidate in (
                build.converter,
                *(parent / "convert_hf_to_gguf.py" for parent in bench.parents[:4]),
            )
            if candidate.is_file()
        ),
        None,
    )
    if converter is None:
        return None, "no convert_hf_to_gguf.py: run `make peers` (it unpacks llama.cpp)"
    named_python = os.environ.get(PYTHON_ENV)
    python = _executable(Path(named_python) if named_python else None) or _executable(
        build.venv_python
    )
    if python is None:
        return None, (
            f"no Python for llama.cpp's converter: run `make peers` (a venv with torch "
            f"and gguf) or set {PYTHON_ENV}"
        )
    return Tools(bench, quantize, converter, python), ""


def convert(tools: Tools, source: Path, out_dir: Path, log) -> tuple[Path, dict]:
    """Convert a float model folder to GGUF and quantize it to `QUANT_TYPE` (once).

    Args:
        tools: The tools.
        source: An unquantized (bfloat16) Hugging Face-layout model folder.
        out_dir: Where the GGUF files go; kept, so a later run skips both steps.
        log: Progress lines.

    Returns:
        The quantized GGUF file and what making it took (seconds, sizes).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    floats = out_dir / f"model-{OUTTYPE}.gguf"
    quantized = out_dir / f"model-{QUANT_TYPE.lower()}.gguf"
    made: dict = {}
    if not quantized.is_file():
        import time

        if not floats.is_file():
            log(f"peers: converting {source.name} with llama.cpp's converter")
            started = time.perf_counter()
            partial = floats.with_suffix(".partial")
            _checked(
                "convert_hf_to_gguf.py",
                [
                    str(tools.python),
                    "-c",
                    _CONVERT,
                    str(tools.converter),
                    str(source),
                    "--outfile",
                    str(partial),
                    "--outtype",
                    OUTTYPE,
                ],
                out_dir / "convert.log",
                {"SWAPLESS_PRE_TOKENIZER": PRE_TOKENIZER},
            )
            partial.replace(floats)
            made["convert_s"] = time.perf_counter() - started
        log(f"peers: quantizing to {QUANT_TYPE} with llama-quantize")
        started = time.perf_counter()
        partial = quantized.with_suffix(".partial")
        _checked(
            "llama-quantize",
            [str(tools.quantize), str(floats), str(partial), QUANT_TYPE],
            out_dir / "quantize.log",
        )
        partial.replace(quantized)
        made["quantize_s"] = time.perf_counter() - started
    made.update(
        f16_bytes=floats.stat().st_size if floats.is_file() else None,
        q4_0_bytes=quantized.stat().st_size,
    )
    return quantized, made


def _checked(
    name: str, command: list[str], log_path: Path, env: dict | None = None
) -> None:
    with log_path.open("w", encoding="utf-8") as out:
        done = subprocess.run(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    if done.returncode != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-3:]
        raise RuntimeError(
            f"{name} failed (exit {done.returncode}, log {log_path}): {' | '.join(tail)}"
        )


def run_bench(
    tools: Tools,
    model: Path,
    threads: int,
    *,
    prompt: int = 0,
    generate: int = 0,
    depth: int = 0,
    repetitions: int = 1,
    log_path: Path,
) -> dict:
    """One ``llama-bench`` process for one test; its result and peak RSS.

    Args:
        prompt: Prompt tokens of a prefill test (``-p``), 0 for none.
        generate: Tokens of a decode test (``-n``), 0 for none.
        depth: Tokens in the context before the test (``-d``).
        repetitions: ``-r``.
        log_path: Where llama-bench's stderr goes.

    Returns:
        ``tps`` (the mean of its samples), ``samples_tps``, ``peak_rss_bytes``, and
        the settings llama-bench reports (KV type, flash attention, batch sizes,
        build).
    """
    command = [
        str(tools.bench),
        "-m",
        str(model),
        "-t",
        str(threads),
        "-p",
        str(prompt),
        "-n",
        str(generate),
        "-d",
        str(depth),
        "-r",
        str(repetitions),
        "-o",
        "json",
    ]
    with log_path.open("a", encoding="utf-8") as err:
        err.write(" ".join(command) + "\n")
        err.flush()
        out, peak = _run_measured(command, err)
    tests = json.loads(out)
    if len(tests) != 1:
        raise RuntimeError(f"llama-bench reported {len(tests)} tests, expected 1")
    test = tests[0]
    keep = (
        "type_k",
        "type_v",
        "flash_attn",
        "n_batch",
        "n_ubatch",
        "build_commit",
        "build_number",
        "model_type",
        "model_size",
        "cpu_info",
    )
    return {
        "tps": float(test["avg_ts"]),
        "samples_tps": [float(v) for v in test.get("samples_ts", [])],
        "peak_rss_bytes": peak,
        **{key: test.get(key) for key in keep},
    }


def _run_measured(command: list[str], err) -> tuple[str, int]:
    """Run ``command``; return its stdout and its own peak RSS in bytes.

    Through a small Python that waits for it: a child forked straight from this
    process would report this process's peak too (Linux carries the parent's high-water
    mark across fork and exec into ``ru_maxrss``), so the figure would be the bench's.
    """
    with tempfile.TemporaryDirectory(prefix="swapless-peers-") as folder:
        peak_file = Path(folder) / "peak"
        done = subprocess.run(
            [sys.executable, "-c", _WAIT, str(peak_file), *command],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"llama-bench exited with {done.returncode}: {' '.join(command)}"
            )
        return done.stdout, int(peak_file.read_text()) * 1024  # KiB on Linux
