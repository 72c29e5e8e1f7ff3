"""The package's import graph read from the source (``ast``), every import statement counted:
module level, inside functions (the imports that defer an SDK or once closed a circle), and
under ``if TYPE_CHECKING:``. A module importing ``a.b.c`` depends on ``a.b.c`` (the module
named, or the package when the name is not a module of its own)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "priority_pubsub"


def module_files(root: Path) -> dict[str, Path]:
    """Every module of the package under ``root`` (the directory holding ``priority_pubsub``)."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(module: str, is_package: bool, tree: ast.AST, modules: set[str]) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against this module's package
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                parent = ".".join([*base, *([node.module] if node.module else [])])
            else:
                parent = node.module or ""
            for alias in node.names:  # ``from pkg import mod``: the module, else ``pkg``
                name = f"{parent}.{alias.name}"
                found.add(name if name in modules else parent)
    return found & modules


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the project modules it imports (itself left out)."""
    files = module_files(root)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[module] = _imported(module, path.name == "__init__.py", tree, set(files)) - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found
