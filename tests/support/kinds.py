"""The suite's three kinds of test, read from its source (tests/tools/test_kinds.py holds them).

- `docs`: prose consistency (the text of docs/ and the README, notebooks' wording, quotes,
  counts, maps), marked `@pytest.mark.docs` or with a module's `pytestmark`;
- `timing`: asserts calibrated on one machine's speed, marked `timing`;
- behaviour: the rest.

`needs_docs(source, prose)` names the tests of a module that read committed prose and so
must be marked `docs`: a test reads it when it, or a function or fixture of its module that
it names, holds the name of a committed `.md` file (or a `*.md` pattern), or compares a
cell's type with "markdown" while naming `NOTEBOOKS` (the committed notebooks).
"""
from __future__ import annotations

import ast
from pathlib import Path

Function = ast.FunctionDef | ast.AsyncFunctionDef


def committed_prose(repo: Path) -> set[str]:
    """The names (a path from the repository's root, and the bare file name) of its prose."""
    found = [repo / "README.md", *(repo / "docs").rglob("*.md"),
             *(repo / "tools").rglob("*.md")]
    return ({str(p.relative_to(repo)) for p in found if p.is_file()}
            | {p.name for p in found if p.is_file()})


def _names_prose(node: ast.AST, prose: set[str]) -> bool:
    """A committed prose file's name (or `*.md`) as a path is built or a file opened with
    it: a part of `a / "b.md"` or a call's argument, not a word looked for in a text."""
    def prose_name(n: ast.AST) -> bool:
        return (isinstance(n, ast.Constant) and isinstance(n.value, str)
                and (n.value in prose or n.value.endswith("*.md")))
    for n in ast.walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and (
                prose_name(n.left) or prose_name(n.right)):
            return True
        if isinstance(n, ast.Call) and any(prose_name(a) for a in n.args):
            return True
    return False


def _reads_notebook_markdown(node: ast.AST) -> bool:
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    compares = any(isinstance(n, ast.Compare) and any(
        isinstance(c, ast.Constant) and c.value == "markdown" for c in [n.left, *n.comparators])
        for n in ast.walk(node))
    return compares and "NOTEBOOKS" in names


def _marks(decorators: list[ast.expr]) -> set[str]:
    return {d.attr for expr in decorators for d in ast.walk(expr)
            if isinstance(d, ast.Attribute) and isinstance(d.value, ast.Attribute)
            and d.value.attr == "mark"}


def _module_marks(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return _marks([node.value])
    return set()


def needs_docs(source: str, prose: set[str]) -> list[str]:
    """The tests of a module (source text) that read committed prose but are not marked docs."""
    tree = ast.parse(source)
    functions: dict[str, Function] = {}
    constants: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    constants[target.id] = node.value
    direct = {name for name, value in constants.items() if _names_prose(value, prose)}

    def reads(name: str, seen: set[str]) -> bool:
        node = functions[name]
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        used |= {a.arg for a in node.args.args}            # fixtures of the module
        if _names_prose(node, prose) or used & direct or _reads_notebook_markdown(node):
            return True
        seen.add(name)
        return any(reads(other, seen) for other in used & functions.keys() - seen)

    module = _module_marks(tree)
    return [name for name, node in functions.items()
            if name.startswith("test") and "docs" not in module | _marks(node.decorator_list)
            and reads(name, set())]
