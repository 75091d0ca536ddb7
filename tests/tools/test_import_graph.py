"""No import circles in helpers/ or tools/ (tools/import_graph.py), and the finder finds one."""
from __future__ import annotations

from pathlib import Path

import pytest

from tools.import_graph import circles, describe, import_graph


def test_helpers_and_tools_have_no_import_circles():
    graph = import_graph()
    assert {"helpers.checks", "helpers.runtime.cluster", "tools.site"} <= set(graph)
    groups = circles(graph)
    assert groups == [], "\n".join(describe(g, graph) for g in groups)


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize("b_imports_a", [
    "from pkg import a\n",                               # at the top
    "def later():\n    from pkg.a import X\n",           # inside a function: still a circle
    "from . import a\n",                                 # relative
    "from .sub import c\n",                              # through a third module
])
def test_a_circle_is_found_however_it_is_written(tmp_path, b_imports_a):
    root = _package(tmp_path, {"__init__.py": "", "a.py": "from pkg import b\nX = 1\n",
                               "b.py": b_imports_a, "sub/__init__.py": "",
                               "sub/c.py": "import pkg.a\n"})
    groups = circles(import_graph(root, ("pkg",)))
    assert groups and {"pkg.a", "pkg.b"} <= set(groups[0])


def test_an_import_for_type_checking_only_is_no_circle(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "", "a.py": "from pkg import b\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"})
    graph = import_graph(root, ("pkg",))
    assert "pkg.b" in graph["pkg.a"] and "pkg.a" not in graph["pkg.b"] and circles(graph) == []
