"""What one notebook's page really depends on, for `make html`'s incremental build.

- the notebook itself;
- the helpers modules it imports, in the notebook or in a `%%px` cell, followed
  transitively through helpers/ (imports anywhere in a module, relative ones, and the
  `python -m helpers....` commands a module starts); `from helpers import name` counts
  the module the lazy registry (helpers/__init__.py) takes `name` from;
- the images it shows: images/<collective>.png of each `load_diagram("...")` (every image when the name is not a literal), and images a
  markdown cell links;
- how it is run and rendered (tools/execute.py, tools/templates/) and the settings
  (requirements.txt; the environment variables are hashed by tools.build).

So editing tools/classroom.py, or a helper only another notebook uses, executes nothing.

The same walk writes the notebook → module map of docs/ARCHITECTURE.md
(`python -m tools.dependencies --write-map`; tests/tools/test_architecture.py checks it).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat

from helpers.collectives.registry import ALIASES
from helpers.paths import REPO_ROOT

_DIAGRAM_CALL = re.compile(r"\bload_diagram\(\s*([^)\s,]*)")
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


def _started(tree: ast.AST) -> set[str]:
    """The helpers modules a command list in the code starts: [..., "-m", "helpers.x", ...]."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.List):
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            found |= {module for flag, module in zip(words, words[1:]) if flag == "-m"
                      and isinstance(module, str) and module.startswith("helpers.")}
    return found


def _cell_imports(notebook: Path, lazy: dict[str, str]) -> set[str]:
    """Module names (helpers...) the notebook's own code cells import, %%px cells included."""
    found: set[str] = set()
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type == "code":
            try:
                found |= _imported(ast.parse(_python_of(cell.source)), "", lazy)
            except SyntaxError:          # a cell that is not Python: its words, at least
                found |= set(_MODULE_NAME.findall(cell.source))
    return found


def _closure(names: set[str], root: Path, lazy: dict[str, str],
             follow: bool = True) -> dict[str, Path]:
    """The modules `names` are (helpers.x.function → helpers.x) and, when `follow`, every
    helpers module they import or start, with the packages' __init__ files."""
    todo, seen = set(names), {}
    while todo:
        name = todo.pop()
        path = _module_file(name, root)
        if path is None and name.count(".") > 1:
            todo.add(name.rpartition(".")[0])                # helpers.x.function → helpers.x
        if path is None or name in seen:
            continue
        seen[name] = path
        if not follow:
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        text = path.read_text()
        tree = ast.parse(text)
        todo |= _imported(tree, package, lazy) | set(_RUN_MODULE.findall(text))
        todo |= {f"{module}.__main__" for module in _started(tree)}  # -m a.package
        parent = name.rpartition(".")[0]
        if parent:
            todo.add(parent)                                 # a package's __init__ runs too
    return seen


def helper_files(notebook: Path, root: Path = REPO_ROOT) -> list[Path]:
    """The helpers modules the notebook uses, transitively (helpers/__init__.py included)."""
    lazy = _lazy_names(root)
    found = _closure({"helpers"} | _cell_imports(notebook, lazy), root, lazy)
    return sorted(set(found.values()))


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


# ---------------------------------------------------------------- the map in docs/ARCHITECTURE.md

ARCHITECTURE = Path("docs") / "ARCHITECTURE.md"
MAP_BEGIN = "<!-- module map: begin (python -m tools.dependencies --write-map) -->"
MAP_END = "<!-- module map: end -->"
# The helpers modules no notebook runs, and what does. A module missing here that no
# notebook uses fails tests/tools/test_architecture.py: dead code, or a user to name.
NOT_IN_NOTEBOOKS = {
    "helpers.bench.ratios": "`make bench` (benchmarks/notebook_vs_torchrun.py)",
    "helpers.runtime.ipp_compat": "tests/runtime/test_ipp_compat.py (the runtime's code "
                                  "names its entries in comments)",
}


def module_name(path: Path, root: Path = REPO_ROOT) -> str:
    """helpers/x/y.py → helpers.x.y; helpers/x/__init__.py → helpers.x."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def helpers_modules(root: Path = REPO_ROOT) -> list[str]:
    """Every module of helpers/, packages' __init__ files left out (docstrings, the registry)."""
    return sorted(module_name(p, root) for p in (root / "helpers").rglob("*.py")
                  if p.name != "__init__.py")


def notebook_files(root: Path = REPO_ROOT) -> list[Path]:
    return sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def direct_modules(notebook: Path, root: Path = REPO_ROOT) -> list[str]:
    """The helpers modules the notebook's cells import, a name of `from helpers import ...`
    counted as the module it comes from; packages' __init__ files left out."""
    lazy = _lazy_names(root)
    found = _closure(_cell_imports(notebook, lazy), root, lazy, follow=False)
    return sorted(name for name, path in found.items() if path.name != "__init__.py")


def module_map(root: Path = REPO_ROOT) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(notebook stem → the modules its cells import,
        helpers module → the notebook stems that run it, directly or through other modules)."""
    imports = {nb.stem: direct_modules(nb, root) for nb in notebook_files(root)}
    users: dict[str, list[str]] = {name: [] for name in helpers_modules(root)}
    for nb in notebook_files(root):
        for path in helper_files(nb, root):
            if path.name != "__init__.py":
                users.setdefault(module_name(path, root), []).append(nb.stem)
    return imports, users


def _numbers(stems: list[str]) -> str:
    """["00_a", "01_b", "02_c", "05_d", "06_e"] → "00–02, 05, 06"."""
    numbers = sorted(int(stem[:2]) for stem in stems)
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"{a:02d}" if a == b else f"{a:02d}, {b:02d}" if b == a + 1
                     else f"{a:02d}–{b:02d}" for a, b in spans)


def _short(module: str) -> str:
    return f"`{module.removeprefix('helpers.')}`"


def map_markdown(root: Path = REPO_ROOT) -> str:
    """The two tables written between the markers of docs/ARCHITECTURE.md."""
    imports, users = module_map(root)
    lines = ["Modules are named from `helpers/` (`runtime.cluster` is "
             "`helpers/runtime/cluster.py`).", "",
             "**Notebook → the modules its cells import** (directly; `from helpers import "
             "name` counts the module the name comes from):", "",
             "| notebook | imports |", "|---|---|"]
    lines += [f"| `{stem}` | {', '.join(map(_short, modules)) or '—'} |"
              for stem, modules in imports.items()]
    lines += ["", "**Module → the notebooks that run it** (directly or through other "
              "modules, on the notebook's side or on the engines):", "",
              "| module | notebooks |", "|---|---|"]
    for module, stems in sorted(users.items()):
        who = _numbers(stems) if stems else f"none: {NOT_IN_NOTEBOOKS.get(module, '?')}"
        lines.append(f"| {_short(module)} | {who} |")
    return "\n".join(lines)


def with_map(text: str, table: str) -> str:
    """`text` with whatever stood between the markers replaced by `table`."""
    begin, end = text.index(MAP_BEGIN) + len(MAP_BEGIN), text.index(MAP_END)
    return f"{text[:begin]}\n{table}\n{text[end:]}"


def write_map(root: Path = REPO_ROOT) -> bool:
    """Rewrite the map in docs/ARCHITECTURE.md; True when it changed."""
    path = root / ARCHITECTURE
    text = path.read_text()
    new = with_map(text, map_markdown(root))
    if new != text:
        path.write_text(new)
    return new != text


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="The notebook → helpers module map.")
    parser.add_argument("--write-map", action="store_true",
                        help=f"rewrite the map in {ARCHITECTURE} (else print it)")
    if parser.parse_args().write_map:
        print(f"{ARCHITECTURE}: " + ("map rewritten" if write_map() else "map up to date"))
    else:
        print(map_markdown())
