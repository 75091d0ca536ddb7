"""tools/lint.py: ruff's pyflakes rules over the code and over each namespace of a notebook."""
from __future__ import annotations

import shutil
from pathlib import Path

import nbformat

from tools import lint

REPO = Path(__file__).resolve().parents[2]


def _tree(tmp_path: Path, cells: list[str]) -> Path:
    """A repository with the real engine.py and one notebook of `cells` (code only)."""
    (tmp_path / "helpers/runtime").mkdir(parents=True)
    shutil.copy(REPO / "helpers/runtime/engine.py", tmp_path / "helpers/runtime/engine.py")
    (tmp_path / "notebooks").mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source, id=f"c{i}") for i, source in enumerate(cells)]
    nbformat.write(nb, tmp_path / "notebooks/01_x.ipynb")
    return tmp_path


def test_the_engines_names_are_read_from_the_engine():
    assert {"rank", "world_size", "device", "torch", "dist"} <= set(lint.engine_names())


def test_a_clean_notebook_passes_with_engine_pushed_and_disposable_names(tmp_path):
    root = _tree(tmp_path, [
        "from helpers.runtime.disposable import run_disposable, start_disposable\n"
        "cluster = object()\n"
        "cluster.push(steps=3)",
        "%%px\nx = torch.ones(steps, device=device) * rank\ndist.all_reduce(x)",
        "%%px\ny = x + world_size",                    # a name from an earlier %%px cell
        "def case(rank, world_size):\n    return dist.get_rank() + torch.ones(1)\n"
        "run_disposable(case, world_size=2)",
        "def started(rank, world_size):\n    return dist.get_rank() + torch.ones(1)\n"
        "start_disposable(started, world_size=2).outcomes()",
        "display(cluster)\n%matplotlib inline\n!ls",     # IPython's own names and lines
    ])
    assert lint.lint(root) == []


def test_findings_name_the_notebook_the_cell_and_the_line(tmp_path):
    root = _tree(tmp_path, [
        "import os\ncluster = object()",               # os: unused, in the kernel
        "%%px\nz = undefined_on_engines + rank",      # line 2 of the cell: not pushed
        "print(torch)",                                # torch is the engines', not the kernel's
    ])
    found = lint.lint(root)
    assert any("01_x.ipynb cell c0 line 1: F401" in f and "os" in f for f in found), found
    assert any("cell c1 line 2: F821" in f and "undefined_on_engines" in f for f in found), found
    assert any("cell c2 line 1: F821" in f and "torch" in f for f in found), found
    assert len(found) == 3, found


def test_the_code_folders_are_linted_too(tmp_path):
    root = _tree(tmp_path, ["x = 1"])
    (root / "tools").mkdir()
    (root / "tools/bad.py").write_text("import json\n")
    assert [f for f in lint.lint(root) if f.startswith("tools/bad.py:1: F401")]
