"""Which BLAS the CLI preloads, and with how many BLIS threads."""

from __future__ import annotations

import os

from app.cli.blas import preload as blas


def test_blis_comes_before_openblas(tmp_path, monkeypatch):
    fake_blis = tmp_path / "blis" / "libblas.so.3"
    fake_openblas = tmp_path / "openblas" / "libblas.so.3"
    for path in (fake_blis, fake_openblas):
        path.parent.mkdir()
        path.write_bytes(b"")
    monkeypatch.setattr(blas, "BLIS_CANDIDATES", (str(fake_blis),))
    monkeypatch.setattr(blas, "OPENBLAS_CANDIDATES", (str(fake_openblas),))
    assert blas.find_blas() == str(fake_blis)
    fake_blis.unlink()
    assert blas.find_blas() == str(fake_openblas)
    fake_openblas.unlink()
    assert blas.find_blas() is None


def test_blis_gets_idle_cores_unless_the_user_chose(monkeypatch):
    library = "/usr/lib/x86_64-linux-gnu/blis-pthread/libblas.so.3"
    env = blas.preload_environment(library, {"LD_PRELOAD": "/x.so"})
    assert env["LD_PRELOAD"] == f"{library}:/x.so"
    assert 1 <= int(env["BLIS_NUM_THREADS"]) <= (os.cpu_count() or 1)
    assert env[blas.NO_PRELOAD_ENV] == "1"
    chosen = blas.preload_environment(library, {"BLIS_NUM_THREADS": "7"})
    assert chosen["BLIS_NUM_THREADS"] == "7"
    openblas = blas.preload_environment("/usr/lib64/libopenblas.so.0", {})
    assert "BLIS_NUM_THREADS" not in openblas


def test_idle_cores_subtracts_the_load(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(os, "getloadavg", lambda: (1.2, 0, 0))
    assert blas.idle_cores() == 3
    monkeypatch.setattr(os, "getloadavg", lambda: (10.0, 0, 0))
    assert blas.idle_cores() == 1
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0, 0))
    assert blas.idle_cores() == 4
    assert blas.blas_name("/usr/lib64/libopenblas.so.0") == "OpenBLAS"


def test_a_makefile_preload_of_blis_still_gets_its_thread_count(monkeypatch):
    library = "/usr/lib/x86_64-linux-gnu/blis-pthread/libblas.so.3"
    monkeypatch.setenv("LD_PRELOAD", library)
    monkeypatch.setenv("BLIS_NUM_THREADS", "")  # unset for the code, restored after
    monkeypatch.delenv(blas.NO_PRELOAD_ENV, raising=False)
    monkeypatch.setattr(blas.platform, "system", lambda: "Linux")
    monkeypatch.setattr(
        blas.sys, "modules", {k: v for k, v in blas.sys.modules.items() if k != "mlx"}
    )
    monkeypatch.setattr(
        blas.os,
        "execve",
        lambda *a: (_ for _ in ()).throw(AssertionError("re-executed")),
    )
    blas.reexec_with_openblas([])
    assert int(os.environ["BLIS_NUM_THREADS"]) >= 1
