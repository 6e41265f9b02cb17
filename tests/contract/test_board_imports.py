"""The board's modules import one way: ``app.py`` assembles them and none of them imports it back.

Read with ``ast`` from the sources, function-level (late) imports included: a late import hides a
circle from Python's import machinery, not from the design.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BOARD = ROOT / "services/board"
PACKAGE = "services.board"
#: The one late import left: the route that serves /api/v1/openapi.json reads the table of every
#: route, itself included, at call time (routes/meta.py -> routes/__init__.py); admin.py reads
#: meta's VERSION and so stands in the same circle.
KNOWN_CIRCLES: frozenset[frozenset[str]] = frozenset(
    {frozenset({"routes/__init__.py", "routes/meta.py", "routes/admin.py"})}
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def board_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(BOARD.rglob("*.py")) if "__pycache__" not in path.parts}


def imported(path: Path, modules: dict[str, Path]) -> set[str]:
    """The board modules ``path`` imports, anywhere in the file."""
    own = module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            # ``from . import x`` names a module x when one exists, else a name of the package.
            targets = [f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in modules else stem for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target in modules and target != own)
    return found


def graph() -> dict[str, set[str]]:
    modules = board_modules()
    return {name: imported(path, modules) for name, path in modules.items()}


def circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in edges:
        if node not in index:
            visit(node)
    return found


def short(name: str) -> str:
    path = board_modules()[name]
    return path.relative_to(BOARD).as_posix()


def test_the_scan_sees_the_board() -> None:
    edges = graph()
    assert len(edges) > 40, "the scan stopped seeing the board's modules"
    assert f"{PACKAGE}.keys" in edges[f"{PACKAGE}.api"], "the scan stopped reading relative imports"


def test_no_module_imports_the_app_back() -> None:
    edges = graph()
    importers = sorted(short(name) for name, targets in edges.items() if f"{PACKAGE}.app" in targets)
    assert importers == ["cli.py"], "take the app's keys from services/board/keys.py, not from app.py"


def test_the_keys_import_only_what_they_carry() -> None:
    edges = graph()
    keys = f"{PACKAGE}.keys"
    readers = {name for name, targets in edges.items() if keys in targets}
    assert readers, "nothing reads the keys: the scan is broken"
    # Everything keys.py imports, transitively, must not read the keys itself.
    seen: set[str] = set()
    todo = list(edges[keys])
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(edges[name])
    assert not (seen & readers), f"keys.py imports modules that read it: {sorted(short(n) for n in seen & readers)}"


def test_the_board_has_no_import_circle() -> None:
    found = {frozenset(short(name) for name in component) for component in circles(graph())}
    assert found <= KNOWN_CIRCLES, f"import circles: {[sorted(c) for c in found - KNOWN_CIRCLES]}"
