"""A committed notebook read without running it: the literal values its cells set, its prose.

    literals(NOTEBOOKS / "18_pipeline_parallel.ipynb", "cell-03")   # {"width": 512, ...}

A `docs` test compares what the prose states with these; the notebook's behaviour test
compares what the run used with them, so the prose is held to the run without the docs
test executing anything.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import nbformat


def prose(path: Path) -> str:
    """The notebook's markdown, its whitespace runs as single spaces."""
    nb = nbformat.read(path, as_version=4)
    return " ".join(" ".join(c.source.split()) for c in nb.cells if c.cell_type == "markdown")


def literals(path: Path, cell_id: str) -> dict[str, Any]:
    """name → value for each name the code cell `cell_id` of the notebook at `path` first
    sets to a literal at its top level (`a = 1`, `a, b = 1, 2`); magic lines (`%%px`) are
    left out. KeyError names a cell that is not there or is not code."""
    cells = {c.get("id"): c for c in nbformat.read(path, as_version=4).cells
             if c.cell_type == "code"}
    if cell_id not in cells:
        raise KeyError(f"{path.name}: no code cell {cell_id!r}")
    source = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                       for line in cells[cell_id].source.splitlines())
    found: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = ([(target, node.value)] if isinstance(target, ast.Name) else
                     list(zip(target.elts, node.value.elts))
                     if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                     and len(target.elts) == len(node.value.elts) else [])
            for name, value in pairs:
                if isinstance(name, ast.Name) and name.id not in found:
                    try:
                        found[name.id] = ast.literal_eval(value)
                    except (ValueError, TypeError):
                        continue
    return found
