"""ruff's pyflakes rules over the code and over every notebook's code cells.

    python -m tools.lint   # helpers/ tools/ benchmarks/ tests/ docs/kit/hang_lab/ notebooks/*.ipynb

A notebook runs code in three namespaces: the kernel's cells; the `%%px` cells, on every
engine; and the cases a kernel cell hands to `run_disposable` or `start_disposable`, whose
source runs in fresh processes. Each becomes one Python file for ruff (cells in order, so a name defined in one
cell and used in a later one is fine). The engine file starts with the names every engine
provides (helpers/runtime/engine.py) and those the notebook sends with
`cluster.push(name=...)`; a case's file with `torch` and `dist`, the names a disposable
rank gives it (helpers/runtime/disposable.py). A finding is reported by notebook and cell.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from helpers.paths import REPO_ROOT

FOLDERS = ("helpers", "tools", "benchmarks", "tests", "docs/kit/hang_lab")
# ruff's settings (the rules: pyflakes), for the code and for the notebooks' scripts, which
# are linted in a temporary folder that no pyproject.toml of the project covers.
CONFIG = REPO_ROOT / "pyproject.toml"


def engine_names(root: Path = REPO_ROOT) -> list[str]:
    """The names `join_process_group` puts in every engine's namespace."""
    tree = ast.parse((root / "helpers/runtime/engine.py").read_text())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "update" and isinstance(node.func.value, ast.Call)
                and getattr(node.func.value.func, "id", "") == "_user_namespace"):
            return [k.arg for k in node.keywords if k.arg]
    raise LookupError("helpers/runtime/engine.py: no _user_namespace().update(...) found")


def _pushed(source: str) -> set[str]:
    """Names a kernel cell sends to the engines: cluster.push(a=..., b=...)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {k.arg for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == "push"
            for k in node.keywords if k.arg}


@dataclass
class Script:
    """One namespace of a notebook as a file: its text and, per line, the cell it came from."""
    name: str
    lines: list[str]
    origin: list[tuple[str, int] | None]

    def add(self, cell_id: str, source: str) -> None:
        for number, line in enumerate(source.splitlines(), start=1):
            self.lines.append(line)
            self.origin.append((cell_id, number))
        self.lines.append("")
        self.origin.append(None)


RUNNERS = ("run_disposable", "start_disposable")    # helpers/runtime/disposable.py


def _cases(source: str) -> set[str]:
    """Functions a kernel cell hands to run_disposable(case, ...) or start_disposable."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {node.args[0].id for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", "") in RUNNERS and node.args
            and isinstance(node.args[0], ast.Name)}


def _split_cases(source: str, cases: set[str]) -> tuple[str, str]:
    """(the cell with each case's body replaced by `...`, the cases' own lines)."""
    lines, own = source.splitlines(), []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source, ""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in cases:
            first, last = node.body[0].lineno - 1, node.end_lineno
            own += lines[node.lineno - 1: last]
            indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
            lines[first:last] = [indent + "..."] + [""] * (last - first - 1)
    return "\n".join(lines), "\n".join(own)


def _without_magics(lines: list[str]) -> str:
    # a line magic or shell line keeps its place (line numbers) as a `pass`; one whose
    # result is assigned (`names = %who_ls`) as `names = None`
    def plain(line: str) -> str:
        target, _, value = line.partition("=")
        if value.lstrip().startswith(("%", "!")) and target.strip().isidentifier():
            return f"{target}= None"
        return (line[: len(line) - len(line.lstrip())] + "pass"
                if line.lstrip().startswith(("%", "!")) else line)
    return "\n".join(plain(line) for line in lines)


def notebook_scripts(path: Path, root: Path = REPO_ROOT, *,
                     provided: bool = True) -> tuple[Script, Script, Script]:
    """The kernel's cells, the engines' (%%px) cells and the disposable cases of a notebook.
    provided=False: the cells' code alone, without the first lines that define the names
    the kernel, the engines (read from root's helpers/runtime/engine.py) and a disposable
    rank provide (tools.dependencies reads the imports so)."""
    kernel, engines = Script(f"{path.stem}.kernel", [], []), Script(f"{path.stem}.engines", [], [])
    disposable = Script(f"{path.stem}.cases", [], [])
    pushed: set[str] = set()
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    cases = set().union(*(_cases(_without_magics(c.source.splitlines())) for c in cells))
    for cell in cells:
        lines = cell.source.splitlines()
        if lines and lines[0].startswith("%%px"):
            engines.add(cell.get("id", "?"), "pass\n" + _without_magics(lines[1:]))
        elif lines and lines[0].startswith("%%"):
            continue                                      # another language (%%bash ...)
        else:
            source, own = _split_cases(_without_magics(lines), cases)
            pushed |= _pushed(source)
            kernel.add(cell.get("id", "?"), source)
            if own:
                disposable.add(cell.get("id", "?"), own)
    if not provided:
        return kernel, engines, disposable
    engine = [f"{name} = ...  # provided by the engine" for name in
              sorted(set(engine_names(root)) | pushed)]
    for script, prelude in ((kernel, ["display = ...  # an IPython kernel's own"]),
                            (engines, engine),
                            (disposable, ["torch = dist = ...  # a disposable rank's"])):
        script.lines[:0] = prelude
        script.origin[:0] = [None] * len(prelude)
    return kernel, engines, disposable


def _ruff(paths: list[str], cwd: Path) -> list[dict]:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config",
                             str(CONFIG), "--output-format", "json", *paths],
                            cwd=cwd, capture_output=True, text=True)
    if result.returncode not in (0, 1):
        raise RuntimeError(f"ruff failed: {result.stderr.strip()}")
    return json.loads(result.stdout or "[]")


def lint(root: Path = REPO_ROOT) -> list[str]:
    """Every finding, one line each; empty when the code and the notebooks are clean."""
    found = [f"{Path(f['filename']).relative_to(root)}:{f['location']['row']}: "
             f"{f['code']} {f['message']}"
             for f in _ruff([d for d in FOLDERS if (root / d).is_dir()], root)]
    with tempfile.TemporaryDirectory(prefix="nccl-notebooks-lint-") as folder:
        scripts = {}
        for path in sorted((root / "notebooks").glob("*.ipynb")):
            for script in notebook_scripts(path, root):
                file = Path(folder) / f"{script.name}.py"
                file.write_text("\n".join(script.lines) + "\n")
                scripts[file.name] = (path, script)
        for f in _ruff(sorted(scripts), Path(folder)):
            path, script = scripts[Path(f["filename"]).name]
            origin = script.origin[f["location"]["row"] - 1]
            where = f"cell {origin[0]} line {origin[1]}" if origin else "(prelude)"
            found.append(f"{path.relative_to(root)} {where}: {f['code']} {f['message']}")
    return found


def main() -> int:
    found = lint()
    print("\n".join(found) if found else "ruff (pyflakes rules): the code and every "
          "notebook's code cells are clean")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
