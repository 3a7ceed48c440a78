"""Run the selected measurements on one loaded engine and write every result.

Outputs in the out folder: ``results.json`` (every figure, the top-level ``ratios``,
``targets_met``, the machine, the model and the settings), ``results.md`` (the table)
and the PNG plots. A part that fails is recorded with its traceback and the run goes
on; a part whose feature is missing from this build is recorded as skipped.
"""

from __future__ import annotations

import datetime as dt
import faulthandler
import json
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from app.bench import machine, registry
from app.bench.context import BenchContext, make_engine
from app.bench.results import NotAvailable
from app.bench.settings import (
    DEFAULT_MODEL_FOLDER,
    DEFAULT_SHAPE,
    FULL,
    QUICK,
    TARGETS,
    BenchSettings,
)
from app.core.errors import KnownError

RESULTS_FORMAT = 1
# The longest parts (aged_kv, the 64K-token long document) take 12-24 min on a busy
# 2-core CPU; a part taking twice that is stuck.
PART_WATCHDOG_S = 2700
# Keys every results.json has in `ratios`, null when their part did not run.
REQUIRED_RATIOS = (
    "engine_vs_mlx_lm",
    "kv_bytes_measured_vs_predicted",
    "turn_reuse_vs_reprefill",
    "splice_vs_rebuild",
    "prefix_memory_vs_cold",
    "prefix_disk_vs_cold",
)


def default_model(log: Callable[[str], None]) -> tuple[Path, dict]:
    """Return the benchmark model folder, building it on first use.

    Returns:
        The folder and how it was obtained (``built_s`` when it was built now).
    """
    from app.core.files import paths
    from app.core.modelkit.model_builder import build_model

    folder = paths.models_dir() / DEFAULT_MODEL_FOLDER
    if (folder / "config.json").is_file() and list(folder.glob("*.safetensors")):
        return folder, {"built_now": False}
    if folder.exists() and any(folder.iterdir()):
        # build_model writes atomically, so this is not ours to delete.
        raise KnownError(
            f"{folder} exists but is not a complete model folder; delete it and the "
            "benchmark model is built again."
        )
    log(f"Building the {DEFAULT_SHAPE!r} benchmark model in {folder} …")
    started = time.perf_counter()
    build_model(folder, shape=DEFAULT_SHAPE, bits=16, seed=0)
    return folder, {"built_now": True, "built_s": time.perf_counter() - started}


def model_description(info, folder: Path) -> dict:
    """Return the model as JSON-ready values: identity, geometry, size, dtype."""
    from app.core.budget import read_geometry
    from app.core.budget.model_config import load_config

    config = load_config(folder)
    geometry = read_geometry(folder)
    builder = config.get("swapless_builder") or {}
    return {
        "folder": str(folder),
        "identity": info.identity,
        "model_type": info.model_type,
        "shape": builder.get("shape"),
        "random_weights": info.random_weights,
        "num_layers": info.num_layers,
        "hidden_size": config.get("hidden_size"),
        "num_attention_heads": geometry.num_attention_heads,
        "kv_heads": geometry.kv_heads,
        "head_dim": geometry.head_dim,
        "vocab_size": config.get("vocab_size"),
        "weights_bits_on_disk": info.weights_bits,
        "weights_bytes_in_memory": info.weights_bytes,
        "activation_dtype": info.activation_dtype,
        "load_s": info.load_seconds,
    }


def run_bench(
    out_dir: str | Path,
    model: str | Path | None = None,
    *,
    quick: bool = False,
    only: str | list[str] | None = None,
    settings: BenchSettings | None = None,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True),
    command: str | None = None,
    plots: bool = True,
) -> dict:
    """Run the benchmark and write its outputs.

    Args:
        out_dir: Folder for results.json, results.md and the plots.
        model: An mlx-lm model folder; None builds (once) and uses the ``small`` shape.
        quick: Use the quick sizes.
        only: Measurement names to run (default: all).
        settings: Sizes to use instead of the quick/full defaults (tests).
        log: Receives progress lines.
        command: The command line, recorded in results.json.
        plots: Draw the PNG plots (needs matplotlib, the ``bench`` extra).

    Returns:
        The results (what results.json holds).

    Raises:
        ValueError: For an unknown measurement name.
    """
    from app.bench.report import plots as plotting

    names = registry.select(only)
    settings = settings or (QUICK if quick else FULL)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    run_started = time.perf_counter()
    results: dict = {
        "format": RESULTS_FORMAT,
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "machine": machine.machine_info(),
        "settings": {**settings.to_dict(), "only": names},
    }
    log(f"Machine: {machine.short_description(results['machine'])}")
    if model is None:
        folder, origin = default_model(log)
    else:
        folder, origin = Path(model).expanduser().resolve(), {"built_now": False}
    scratch = Path(tempfile.mkdtemp(prefix="swapless-bench-"))
    engine = make_engine(scratch)
    try:
        info = engine.load(folder)
        results["model"] = {**model_description(info, folder), **origin}
        log(
            f"Model: {folder} ({info.model_type}, {info.num_layers} layers, "
            f"{info.weights_bytes / 2**20:.0f} MiB {info.activation_dtype})"
        )
        ctx = BenchContext(
            engine=engine,
            model_dir=folder,
            settings=settings,
            out_dir=out_dir,
            log=log,
            scratch=scratch,
        )
        results["parts"] = {}
        for index, name in enumerate(names, 1):
            results["parts"][name] = _run_part(ctx, name, f"[{index}/{len(names)}]")
    finally:
        engine.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    results["machine"]["load_average_at_end"] = machine.load_average()
    results["elapsed_s"] = time.perf_counter() - run_started
    _collect(results)
    results["files"] = ["results.json", "results.md"]
    _write(results, out_dir)  # before plotting: a plot failure must not lose figures
    if plots:
        results["files"] += plotting.draw_all(results, out_dir, log)
        _write(results, out_dir)
    log(f"Done in {results['elapsed_s']:.0f} s; results in {out_dir}")
    return results


def failed_parts(results: dict) -> list[str]:
    """Names of the parts that failed, in run order."""
    return [n for n, p in results.get("parts", {}).items() if p["status"] == "failed"]


def failure_message(results: dict, out_dir: str | Path) -> str | None:
    """One line naming the failed parts (None when none failed).

    e.g. ``bench: 2 parts failed: splice, ui (tracebacks in out/results.json)``.
    """
    failed = failed_parts(results)
    if not failed:
        return None
    noun = "part" if len(failed) == 1 else "parts"
    where = Path(out_dir) / "results.json"
    return (
        f"bench: {len(failed)} {noun} failed: {', '.join(failed)} "
        f"(tracebacks in {where})"
    )


def _write(results: dict, out_dir: Path) -> None:
    from app.bench.report.report import markdown

    (out_dir / "results.md").write_text(markdown(results), encoding="utf-8")
    (out_dir / "results.json").write_text(
        json.dumps(results, indent=2, default=_json_default) + "\n", encoding="utf-8"
    )


def _run_part(ctx: BenchContext, name: str, counter: str) -> dict:
    # A part stuck for this long is a bug: dump every thread's stack for the report.
    faulthandler.dump_traceback_later(PART_WATCHDOG_S, repeat=False)
    try:
        return _run_part_unwatched(ctx, name, counter)
    finally:
        faulthandler.cancel_dump_traceback_later()


def _run_part_unwatched(ctx: BenchContext, name: str, counter: str) -> dict:
    module = registry.module(name)
    entry: dict = {"title": module.TITLE}
    started = time.perf_counter()
    entry["load_average_before"] = machine.load_average()
    try:
        reason = module.available(ctx)
        if reason:
            raise NotAvailable(reason)
        ctx.log(f"{counter} {name}: {module.TITLE} …")
        part = module.run(ctx)
    except NotAvailable as exc:
        entry.update(status="skipped", note=str(exc))
        ctx.log(f"{counter} {name}: skipped — {exc}")
    except Exception as exc:  # a broken part must not lose the others' results
        entry.update(
            status="failed",
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
        )
        ctx.log(f"{counter} {name}: FAILED — {type(exc).__name__}: {exc}")
        ctx.log(traceback.format_exc())
    else:
        entry.update(
            status="ok",
            figures=part.figures,
            ratios=part.ratios,
            ratio_stats=part.ratio_stats,
            targets_met=part.targets_met,
            rows=[row.__dict__ for row in part.rows],
            notes=part.notes,
        )
    entry["elapsed_s"] = time.perf_counter() - started
    entry["load_average_after"] = machine.load_average()
    if entry["status"] == "ok":
        ctx.log(f"{counter} {name}: done in {entry['elapsed_s']:.1f} s")
    return entry


def _collect(results: dict) -> None:
    """Lift every part's ratios and target checks to the top level."""
    ratios: dict = dict.fromkeys(REQUIRED_RATIOS)
    stats: dict = {}
    met: dict = dict.fromkeys(TARGETS)
    for part in results["parts"].values():
        if part["status"] != "ok":
            continue
        ratios.update(part["ratios"])
        stats.update(part["ratio_stats"])
        met.update(part["targets_met"])
    results["ratios"] = ratios
    results["ratio_stats"] = stats
    results["targets"] = {key: target.text() for key, target in TARGETS.items()}
    results["targets_met"] = met
    results["part_elapsed_s"] = {
        name: round(part["elapsed_s"], 1) for name, part in results["parts"].items()
    }


def _json_default(value):
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
