"""The post-build checks: metallib beside libmlx (macOS), ldd resolution (Linux)."""

from __future__ import annotations

import os
from pathlib import Path

LDD_OK = """\
\tlinux-vdso.so.1 (0x00007ffd8a5f2000)
\tliblapack-86b2c207.so.3.10.0 => {bundle}/_internal/mlx/lib/../../mlx_cpu.libs/liblapack-86b2c207.so.3.10.0 (0x00007f1)
\tlibblas-bd8a282c.so.3.10.0 => {bundle}/_internal/mlx/lib/../../mlx_cpu.libs/libblas-bd8a282c.so.3.10.0 (0x00007f2)
\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f3)
\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f4)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f5)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f6)
"""


def _app(tmp_path: Path) -> Path:
    """A fake .app laid out as PyInstaller lays out MLX (data in Resources, linked)."""
    app = tmp_path / "Swapless.app" / "Contents"
    frameworks = app / "Frameworks" / "mlx" / "lib"
    resources = app / "Resources" / "mlx" / "lib"
    frameworks.mkdir(parents=True)
    resources.mkdir(parents=True)
    (frameworks / "libmlx.dylib").write_bytes(b"\xcf\xfa\xed\xfe")
    (resources / "mlx.metallib").write_bytes(b"MTLB")
    (frameworks / "mlx.metallib").symlink_to(
        os.path.relpath(resources / "mlx.metallib", frameworks)
    )
    return tmp_path / "Swapless.app"


def test_a_linked_metallib_beside_libmlx_passes(bundle_checks, tmp_path):
    assert bundle_checks.metallib_problems(_app(tmp_path)) == []


def test_a_top_level_libmlx_link_without_metallib_fails_and_is_repaired(
    bundle_checks, tmp_path
):
    app = _app(tmp_path)
    frameworks = app / "Contents" / "Frameworks"
    (frameworks / "libmlx.dylib").symlink_to("mlx/lib/libmlx.dylib")
    problems = bundle_checks.metallib_problems(app)
    assert len(problems) == 1 and "Contents/Frameworks/libmlx.dylib" in problems[0]

    created = bundle_checks.link_missing_metallibs(app)
    assert created == [frameworks / "mlx.metallib"]
    assert (frameworks / "mlx.metallib").read_bytes() == b"MTLB"
    assert not os.path.isabs(os.readlink(frameworks / "mlx.metallib"))
    assert bundle_checks.metallib_problems(app) == []


def test_a_dangling_metallib_link_fails(bundle_checks, tmp_path):
    app = _app(tmp_path)
    (app / "Contents" / "Resources" / "mlx" / "lib" / "mlx.metallib").unlink()
    assert len(bundle_checks.metallib_problems(app)) == 1


def test_a_bundle_without_mlx_fails(bundle_checks, tmp_path):
    (tmp_path / "Empty.app").mkdir()
    assert "not collected" in bundle_checks.metallib_problems(tmp_path / "Empty.app")[0]


def test_parse_ldd(bundle_checks):
    parsed = bundle_checks.parse_ldd(
        "\tlibfoo.so.1 => not found\n\tlibm.so.6 => /lib/libm.so.6 (0x1)\n"
        "\tlinux-vdso.so.1 (0x2)\n"
    )
    assert parsed == {
        "libfoo.so.1": None,
        "libm.so.6": "/lib/libm.so.6",
        "linux-vdso.so.1": "",
    }


def test_ldd_of_a_good_bundle_has_no_problems(bundle_checks, tmp_path):
    bundle = tmp_path / "swapless"
    libs = bundle / "_internal" / "mlx_cpu.libs"
    (bundle / "_internal" / "mlx" / "lib").mkdir(parents=True)
    libs.mkdir(parents=True)
    for name in ("liblapack-86b2c207.so.3.10.0", "libblas-bd8a282c.so.3.10.0"):
        (libs / name).write_bytes(b"")
    output = LDD_OK.format(bundle=bundle)
    assert bundle_checks.ldd_problems(output, bundle, "libmlx.so") == []


def test_ldd_reports_missing_and_outside_libraries(bundle_checks, tmp_path):
    output = (
        "\tlibblas.so.3 => /usr/lib/x86_64-linux-gnu/libblas.so.3 (0x1)\n"
        "\tlibgfortran-f7379c93.so.5.0.0 => not found\n"
        "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x2)\n"
    )
    problems = bundle_checks.ldd_problems(output, tmp_path, "libmlx.so")
    assert problems == [
        "libmlx.so: libblas.so.3 resolved outside the bundle "
        "(/usr/lib/x86_64-linux-gnu/libblas.so.3)",
        "libmlx.so: libgfortran-f7379c93.so.5.0.0 not found",
    ]
