"""House rules that keep the layout honest: a Qt-free core, MLX in the engine and the
model kit only, a folder per concept, no import circles, the product never importing
the bench."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"
MAX_MODULES_PER_FOLDER = 15


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _module_imports(path: Path, known: set[str]) -> set[str]:
    """The app modules ``path`` imports: `from pkg import module` names the module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if name in known else node.module)
    return {name for name in found if name in known}


def _modules(folder: Path):
    return sorted(folder.rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(APP.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _import_graph() -> dict[str, set[str]]:
    paths = {_module_name(path): path for path in _modules(APP)}
    known = set(paths)
    return {name: _module_imports(path, known) - {name} for name, path in paths.items()}


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


def test_only_the_engine_and_the_model_kit_import_mlx():
    # The benchmark is the one other place: it measures plain mlx-lm side by side.
    allowed = (APP / "core" / "engine", APP / "core" / "modelkit", APP / "bench")
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
    # Guards the tests above against silently passing on a parser change.
    imports = _imports(APP / "core" / "engine" / "cpu" / "backend.py")
    assert "mlx.core" in imports
    graph = _import_graph()
    assert "app.core.modelkit.shapes" in graph["app.core.modelkit.model_builder"]


def test_no_folder_is_a_flat_heap():
    crowded = {
        str(folder.relative_to(APP.parent)): count
        for folder in [APP, *(p for p in APP.rglob("*") if p.is_dir())]
        if folder.name != "__pycache__"
        and (count := sum(1 for p in folder.glob("*.py") if p.name != "__init__.py"))
        > MAX_MODULES_PER_FOLDER
    }
    assert crowded == {}


def test_every_package_says_what_lives_there():
    silent = []
    for init in APP.rglob("__init__.py"):
        tree = ast.parse(init.read_text(encoding="utf-8"))
        if not ast.get_docstring(tree):
            silent.append(str(init.relative_to(APP.parent)))
    assert silent == []


def test_no_modules_import_each_other():
    graph = _import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in graph[node]:
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                circles.append(sorted(members))

    for node in graph:
        if node not in index:
            visit(node)
    assert circles == []


def test_the_product_never_imports_the_bench():
    # The CLI's `bench` command is the one way in.
    allowed = {APP / "cli" / "bench_command.py"}
    offenders = {
        str(path.relative_to(APP)): sorted(
            n for n in _imports(path) if n == "app.bench" or n.startswith("app.bench.")
        )
        for path in _modules(APP)
        if APP / "bench" not in path.parents and path not in allowed
    }
    assert {k: v for k, v in offenders.items() if v} == {}
