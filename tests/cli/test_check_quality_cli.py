"""`swapless check-quality` and `make-model --shape reference` as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from app.cli.main import main
from app.core.models.model_identity import folder_identity
from app.core.quality.cells import kv_cell
from app.core.quality.events import QualityReport
from app.core.quality.metrics import CellResult
from app.core.store import Store


def command(args, home):
    env = dict(os.environ, SWAPLESS_HOME=str(home))
    return [sys.executable, "-m", "app", *args], env


def run_cli(args, home, timeout=300):
    argv, env = command(args, home)
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env=env
    )


def test_the_16_bit_control_comes_out_exact(tiny_model_dir, swapless_home):
    result = run_cli(
        [
            "check-quality",
            "--model",
            str(tiny_model_dir),
            "--quick",
            "--json",
            "--only",
            "kv:16:64",
        ],
        swapless_home,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (control,) = report["results"]
    assert control["cell"] == "kv:16:64"
    assert control["top1_agreement"] == 1.0 and control["mean_kl"] == 0.0
    assert report["quick"] is True and report["cancelled"] is False
    assert report["stored"] is True
    assert "random weights" in result.stderr
    # Stored: the doctor shows it for this model, as long as the folder is unchanged.
    doctor = run_cli(
        ["doctor", "--model", str(tiny_model_dir), "--json"], swapless_home
    )
    assert doctor.returncode == 0, doctor.stderr
    quality = json.loads(doctor.stdout)["quality"]
    assert quality["results"]["kv:16:64"]["top1_agreement"] == 1.0
    assert quality["results"]["kv:16:64"]["settings_key"].endswith(":quick")


def test_the_doctor_warns_about_a_preset_whose_kv_fails_here(
    tiny_model_dir, swapless_home
):
    failing = CellResult(
        cell=kv_cell(4, 64),
        positions=500,
        top1_agreement=0.62,
        mean_kl=0.41,
        perplexity_ratio=1.31,
        recall_hits=2,
        recall_total=10,
        reference_hits=9,
    )
    with Store.open(swapless_home / "swapless.db") as store:
        store.save_quality_report(
            QualityReport(
                model_identity=folder_identity(tiny_model_dir),
                model_folder=str(tiny_model_dir),
                settings_key="probes-v1:full",
                quick=False,
                results=(failing,),
                measured_at="2026-12-03T10:00:00Z",
            )
        )
    doctor = run_cli(["doctor", "--model", str(tiny_model_dir)], swapless_home)
    assert doctor.returncode == 0, doctor.stderr
    assert "4-bit KV, group 64: 62.0 % top-1" in doctor.stdout
    assert "Warning: Preset 'long-document' uses 4-bit KV, group 64" in doctor.stdout
    assert "Preset 'chat'" not in doctor.stdout  # 8-bit: not measured, no warning


def test_bad_input_is_one_line_and_exit_code_2(
    tiny_model_dir, tmp_path, capsys, monkeypatch
):
    # In-process (the same `main` the console script runs): both are refused before
    # an engine exists, so a subprocess would only add its start-up (~3 CPU-s each).
    monkeypatch.setenv("SWAPLESS_NO_OPENBLAS", "1")  # never re-exec the test runner
    capsys.readouterr()
    code = main(["check-quality", "--model", str(tiny_model_dir), "--only", "kv:3:64"])
    unknown = capsys.readouterr()
    assert code == 2 and unknown.out == ""
    assert unknown.err.strip().count("\n") == 0
    assert "unknown cell 'kv:3:64'" in unknown.err
    assert main(["check-quality", "--model", str(tmp_path / "nope")]) == 2
    missing = capsys.readouterr().err
    assert missing.startswith("swapless: error:") and missing.count("\n") == 1


def test_ctrl_c_stops_and_keeps_what_was_measured(tiny_model_dir, swapless_home):
    argv, env = command(
        [
            "check-quality",
            "--model",
            str(tiny_model_dir),
            "--quick",  # the full probe set took ~27 s of CPU before the first line
            "--json",
            "--no-store",
            "--only",
            "kv:8:64,kv:4:64,kv:4:32",
        ],
        swapless_home,
    )
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    # Without a terminal every finished cell is one stderr line.
    for line in process.stderr:
        if line.startswith("8-bit KV, group 64:"):
            process.send_signal(signal.SIGINT)
            break
    out, _ = process.communicate(timeout=300)
    assert process.returncode == 130
    report = json.loads(out)
    assert report["cancelled"] is True
    assert report["results"][0]["cell"] == "kv:8:64"
    assert report["results"][0]["complete"] is True
    assert len(report["results"]) < 3


def test_make_model_reference_copies_the_committed_model(swapless_home, tmp_path):
    result = run_cli(
        ["make-model", str(tmp_path / "ref"), "--shape", "reference"], swapless_home
    )
    assert result.returncode == 0, result.stderr
    config = json.loads((tmp_path / "ref" / "config.json").read_text())
    assert config["swapless_builder"]["shape"] == "reference"
    wrong = run_cli(
        ["make-model", str(tmp_path / "t"), "--shape", "tiny", "--train"], swapless_home
    )
    assert wrong.returncode == 2
    assert "--train applies to --shape reference only" in wrong.stderr
