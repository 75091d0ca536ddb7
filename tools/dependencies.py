"""What one notebook's page really depends on, for `make html`'s incremental build.

- the notebook itself;
- the helpers modules it imports, in the notebook or in a `%%px` cell, followed
  transitively through helpers/ (imports anywhere in a module, relative ones, and the
  `python -m helpers....` commands a module starts); `from helpers import name` counts
  the module the lazy registry (helpers/__init__.py) takes `name` from;
- the images it shows: images/<collective>.png of each `load_diagram("...")` /
  `show_diagram("...")` (every image when the name is not a literal), and images a
  markdown cell links;
- how it is run and rendered (tools/execute.py, tools/templates/) and the settings
  (requirements.txt; the environment variables are hashed by tools.build).

So editing tools/classroom.py, or a helper only another notebook uses, executes nothing.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat

from helpers.collectives.registry import ALIASES
from helpers.paths import REPO_ROOT

_DIAGRAM_CALL = re.compile(r"\b(?:load_diagram|show_diagram)\(\s*([^)\s,]*)")
_IMAGE_LINK = re.compile(r"images/([\w.-]+\.png)")
_MODULE_NAME = re.compile(r"\bhelpers(?:\.\w+)+")
# A module a helper starts as a process: [sys.executable, "-m", "helpers.x"] or "-m helpers.x".
_RUN_MODULE = re.compile(r"""-m["']?,?\s*["']?(helpers(?:\.\w+)+)""")


def _module_file(name: str, root: Path) -> Path | None:
    """helpers.x.y → root/helpers/x/y.py or root/helpers/x/y/__init__.py, if it exists."""
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _lazy_names(root: Path) -> dict[str, str]:
    """The registry of helpers/__init__.py: public name → module."""
    tree = ast.parse((root / "helpers" / "__init__.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_WHERE" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def _python_of(cell_source: str) -> str:
    """A code cell as Python: a %%px cell's body, other magics and shell lines dropped."""
    lines = cell_source.splitlines()
    if lines and lines[0].startswith("%%"):
        lines = lines[1:] if lines[0].startswith("%%px") else []
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines)


def _imported(tree: ast.AST, package: str, lazy: dict[str, str]) -> set[str]:
    """Module names (helpers...) that a parsed file or cell imports."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:                                  # from . import x, from .x import y
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(parts + ([module] if module else []))
            found.add(module)
            for alias in node.names:
                found.add(f"{module}.{alias.name}")         # a submodule, when it is one
                if module == "helpers" and alias.name in lazy:
                    found.add(lazy[alias.name])
    return {name for name in found if name == "helpers" or name.startswith("helpers.")}


def helper_files(notebook: Path, root: Path = REPO_ROOT) -> list[Path]:
    """The helpers modules the notebook uses, transitively (helpers/__init__.py included)."""
    lazy = _lazy_names(root)
    nb = nbformat.read(notebook, as_version=4)
    todo: set[str] = {"helpers"}
    for cell in nb.cells:
        if cell.cell_type == "code":
            try:
                todo |= _imported(ast.parse(_python_of(cell.source)), "", lazy)
            except SyntaxError:          # a cell that is not Python: its words, at least
                todo |= set(_MODULE_NAME.findall(cell.source))
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        path = _module_file(name, root)
        if path is None and name.count(".") > 1:
            todo.add(name.rpartition(".")[0])                # helpers.x.function → helpers.x
        if path is None or name in seen:
            continue
        seen[name] = path
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        text = path.read_text()
        todo |= _imported(ast.parse(text), package, lazy) | set(_RUN_MODULE.findall(text))
        parent = name.rpartition(".")[0]
        if parent:
            todo.add(parent)                                 # a package's __init__ runs too
    return sorted(set(seen.values()))


def image_files(notebook: Path, root: Path = REPO_ROOT) -> list[Path]:
    """The images the notebook shows: its diagrams' fallbacks and linked images."""
    images = root / "images"
    nb = nbformat.read(notebook, as_version=4)
    names: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            names |= set(_IMAGE_LINK.findall(cell.source))
            continue
        for argument in _DIAGRAM_CALL.findall(cell.source):
            literal = re.fullmatch(r"""["'](\w+)["']""", argument)
            if literal is None:
                return sorted(images.glob("*.png"))          # a computed name: any of them
            names.add(f"{ALIASES.get(literal[1], literal[1])}.png")
    return sorted(p for p in (images / n for n in names) if p.is_file())


def dependencies(notebook: Path, root: Path = REPO_ROOT) -> list[Path]:
    """Every file whose change must execute `notebook` again."""
    running = [root / "tools" / "execute.py", *sorted((root / "tools" / "templates").rglob("*.*")),
               root / "requirements.txt"]
    return [notebook, *helper_files(notebook, root), *image_files(notebook, root),
            *[p for p in running if p.is_file()]]
