"""What one notebook's page really depends on, for `make html`'s incremental build.

- the notebook itself;
- the helpers modules it imports, in the notebook, in a `%%px` cell or in a case it hands
  to run_disposable (the notebook's Python as tools.lint reads it), followed transitively
  through helpers/ (imports anywhere in a module, relative ones, and the modules a command
  list or call starts, [..., "-m", "helpers.x"], a package's __main__ with it); `from helpers
  import name` counts the module the lazy registry (helpers/__init__.py) takes `name` from;
- the images it shows: images/<collective>.png of each `load_diagram("...")` (every image when the name is not a literal), and images a
  markdown cell links;
- the training table it quotes (benchmarks/saved/training.json), if it uses
  helpers.bench.quote;
- how it is run (RUNNING: tools/execute.py and its kernels' provisioner) and the settings (requirements.txt; the environment
  variables are hashed by tools.build).

So editing the site (tools/site.py, tools/pages.py, book/: every build renders every page
again from the executed copies), tools/classroom.py, or a helper only another notebook
uses, executes nothing.

The same walk writes the notebook → module map of docs/ARCHITECTURE.md
(`python -m tools.dependencies --write-map`; tests/tools/test_architecture.py checks it).
"""
from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import nbformat

from helpers.collectives.registry import ALIASES
from helpers.paths import REPO_ROOT
from tools.lint import notebook_scripts

# How `make html` and the tests run a notebook: a change to one of these runs every notebook
# again.
RUNNING = ("execute.py", "kernel_provisioner.py", "jupyter_compat.py")
_DIAGRAM_CALL = re.compile(r"\bload_diagram\(\s*([^)\s,]*)")
_IMAGE_LINK = re.compile(r"images/([\w.-]+\.png)")
_MODULE_NAME = re.compile(r"\bhelpers(?:\.\w+)+")


def _module_file(name: str, root: Path) -> Path | None:
    """helpers.x.y → root/helpers/x/y.py or root/helpers/x/y/__init__.py, if it exists."""
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


# Parsed once per text (lru_cache): a module many notebooks use, or helpers/__init__.py, is
# walked once per process, and a file edited since is parsed again.
@lru_cache(maxsize=None)
def _registry(text: str, name: str = "_WHERE") -> Any:
    """The literal assigned to `name` in module `text` ({} when it has none)."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def _lazy_names(root: Path) -> dict[str, str]:
    """The registry of helpers/__init__.py: public name → module."""
    return _registry((root / "helpers" / "__init__.py").read_text())


@lru_cache(maxsize=None)
def _references(text: str, package: str) -> tuple[frozenset[str], frozenset[str]]:
    """(the module names, helpers..., that Python `text` of `package` imports or starts,
    the names it imports `from helpers`, which the registry maps to modules).

    A started module is a command list [..., "-m", "helpers.x", ...], or a call given those
    arguments (`torchrun_command(2, "-m", "helpers.x", ...)`): helpers.x and, when it is a
    package, the helpers.x.__main__ that `-m` runs; or a module named in a constant whose
    name ends in PRELOAD, a list a forkserver imports before it forks."""
    found, from_helpers = set(), set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:                                  # from . import x, from .x import y
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(parts + ([module] if module else []))
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}  # a submodule, if one
            if module == "helpers":
                from_helpers |= {alias.name for alias in node.names}
        elif (isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple))
              and any(isinstance(t, ast.Name) and t.id.endswith("PRELOAD")
                      for t in node.targets)):      # what a forkserver imports before forking
            found |= {e.value for e in node.value.elts
                      if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        elif isinstance(node, (ast.List, ast.Tuple, ast.Call)):
            elements = node.args if isinstance(node, ast.Call) else node.elts
            words = [e.value if isinstance(e, ast.Constant) else None for e in elements]
            started = {module for flag, module in zip(words, words[1:])
                       if flag == "-m" and isinstance(module, str)}
            found |= started | {f"{module}.__main__" for module in started}
    return (frozenset(name for name in found if name == "helpers" or name.startswith("helpers.")),
            frozenset(from_helpers))


def _imported(text: str, package: str, lazy: dict[str, str]) -> set[str]:
    """Module names (helpers...) that Python `text` of `package` imports or starts, a name
    of `from helpers import name` counted as the module the registry takes it from too."""
    modules, from_helpers = _references(text, package)
    return set(modules) | {lazy[name] for name in from_helpers if name in lazy}


@lru_cache(maxsize=None)
def _scripts(notebook: Path, content: bytes) -> tuple[str, ...]:
    """The notebook's three namespaces as Python (tools.lint: the kernel's cells, the %%px
    cells, the disposable cases); `content` keys the cache, so an edited notebook is read again."""
    return tuple("\n".join(script.lines) for script in notebook_scripts(notebook, provided=False))


def _cell_imports(notebook: Path, lazy: dict[str, str]) -> set[str]:
    """Module names (helpers...) the notebook's code imports: the kernel's cells, the %%px
    cells and the cases it hands to run_disposable."""
    found: set[str] = set()
    for text in _scripts(notebook, notebook.read_bytes()):
        try:
            found |= _imported(text, "", lazy)
        except SyntaxError:          # a namespace that is not Python: its words, at least
            found |= set(_MODULE_NAME.findall(text))
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
        todo |= _imported(path.read_text(), package, lazy)
        if name == "helpers":      # what start_cluster imports by name (KERNEL_ADDITIONS)
            todo |= set(_registry(path.read_text(), "KERNEL_ADDITIONS"))
        parent = name.rpartition(".")[0]
        if parent:
            todo.add(parent)                                 # a package's __init__ runs too
    return seen


def _used(cells: set[str], root: Path, lazy: dict[str, str]) -> list[Path]:
    """The files of the modules `cells` (a notebook's imports) run, helpers/__init__.py too."""
    return sorted(set(_closure({"helpers"} | cells, root, lazy).values()))


def helper_files(notebook: Path, root: Path = REPO_ROOT) -> list[Path]:
    """The helpers modules the notebook uses, transitively (helpers/__init__.py included)."""
    lazy = _lazy_names(root)
    return _used(_cell_imports(notebook, lazy), root, lazy)


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
    running = [root / "tools" / name for name in RUNNING] + [root / "requirements.txt"]
    helpers = helper_files(notebook, root)
    if root / "helpers" / "bench" / "quote.py" in helpers:    # it shows the saved table
        running.append(root / "benchmarks" / "saved" / "training.json")
    return [notebook, *helpers, *image_files(notebook, root),
            *[p for p in running if p.is_file()]]


# ---------------------------------------------------------------- the map in docs/ARCHITECTURE.md

ARCHITECTURE = Path("docs") / "ARCHITECTURE.md"
MAP_BEGIN = "<!-- module map: begin (python -m tools.dependencies --write-map) -->"
MAP_END = "<!-- module map: end -->"
# The helpers modules no notebook runs, and what does. A module missing here that no
# notebook uses fails tests/tools/test_architecture.py: dead code, or a user to name.
NOT_IN_NOTEBOOKS = {
    "helpers.bench.ratios": "`make bench` (benchmarks/notebook_vs_torchrun.py)",
    "helpers.bench.step_profile": "`make bench` (benchmarks/training_worker.py)",
    "helpers.bench.taught": "`make bench` (benchmarks/pairs/: the notebooks' own code)",
    "helpers.runtime.ipp_compat": "tests/runtime/test_ipp_compat.py (the runtime's code "
                                  "names its entries in comments)",
    "helpers.scale.at_scale_training": "`python -m tools.at_scale` (writes each page's At "
                                       "scale box into its notebook)",
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


def _direct(cells: set[str], root: Path, lazy: dict[str, str]) -> list[str]:
    found = _closure(cells, root, lazy, follow=False)
    return sorted(name for name, path in found.items() if path.name != "__init__.py")


def direct_modules(notebook: Path, root: Path = REPO_ROOT) -> list[str]:
    """The helpers modules the notebook's cells import, a name of `from helpers import ...`
    counted as the module it comes from; packages' __init__ files left out."""
    lazy = _lazy_names(root)
    return _direct(_cell_imports(notebook, lazy), root, lazy)


def module_map(root: Path = REPO_ROOT) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(notebook stem → the modules its cells import,
        helpers module → the notebook stems that run it, directly or through other modules)."""
    lazy = _lazy_names(root)
    imports: dict[str, list[str]] = {}
    users: dict[str, list[str]] = {name: [] for name in helpers_modules(root)}
    for nb in notebook_files(root):
        cells = _cell_imports(nb, lazy)                        # the notebook read once
        imports[nb.stem] = _direct(cells, root, lazy)
        for path in _used(cells, root, lazy):
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
