"""Who imports whom in helpers/ and tools/, and the circles in it.

An import inside a function counts as much as one at the top: it runs too, only later, and
a circle that a local import hides is still two modules that need each other. An import
under `if TYPE_CHECKING:` never runs and does not count.

    python -m tools.import_graph      # prints every circle; exit 1 if there is one
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

from helpers.paths import REPO_ROOT

PACKAGES = ("helpers", "tools")


def module_files(root: Path = REPO_ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Module name ("helpers.checks", a package as "helpers.runtime") → its file."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imported_names(name: str, path: Path) -> set[str]:
    """The dotted names a module imports (a `from x import y` gives x.y and x)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    names: set[str] = set()

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                walk(child)
            return
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                above = package[:len(package) - node.level + 1]
                base = ".".join(above + ([node.module] if node.module else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            walk(child)

    walk(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return names


def import_graph(root: Path = REPO_ROOT,
                 packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module → the modules of `packages` it imports (the nearest module a name is in)."""
    files = module_files(root, packages)

    def module_of(dotted: str) -> str | None:
        while dotted and dotted not in files:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph = {}
    for name, path in files.items():
        targets = {module_of(dotted) for dotted in _imported_names(name, path)}
        graph[name] = {t for t in targets if t and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module, each sorted (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def describe(group: list[str], graph: dict[str, set[str]]) -> str:
    """One circle, each member with what it imports of the others."""
    return "\n".join(f"  {m} → {', '.join(sorted(graph[m] & set(group)))}" for m in group)


def main() -> int:
    graph = import_graph()
    groups = circles(graph)
    for group in groups:
        print(f"an import circle of {len(group)} modules:\n{describe(group, graph)}")
    if not groups:
        print(f"no import circles among {len(graph)} modules of {', '.join(PACKAGES)}")
    return 1 if groups else 0


if __name__ == "__main__":
    sys.exit(main())
