"""House rules that keep the layout honest: a Qt-free core, one package owning MLX."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(folder: Path):
    return sorted(folder.rglob("*.py"))


def test_core_never_imports_qt():
    offenders = {
        str(path.relative_to(APP)): sorted(
            n
            for n in _imports(path)
            if n.split(".")[0] in {"PySide6", "shiboken6", "PyQt6", "PyQt5"}
        )
        for path in _modules(APP / "core")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_only_the_engine_imports_mlx():
    # The benchmark is the one other place: it measures plain mlx-lm side by side.
    allowed = (APP / "core" / "engine", APP / "bench")
    offenders = {}
    for path in _modules(APP):
        if any(folder in path.parents for folder in allowed):
            continue
        found = sorted(
            n for n in _imports(path) if n.split(".")[0] in {"mlx", "mlx_lm"}
        )
        if found:
            offenders[str(path.relative_to(APP))] = found
    assert offenders == {}


def test_the_rule_checker_sees_imports():
    # Guards the two tests above against silently passing on a parser change.
    imports = _imports(APP / "core" / "engine" / "backend.py")
    assert "mlx.core" in imports
