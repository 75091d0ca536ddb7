"""The repeated cells are copies of tools/shared_cells/*.md, and the tool keeps them so."""
from __future__ import annotations

import shutil
import subprocess
import sys

import nbformat
import pytest

from conftest import NOTEBOOKS, REPO
from tools import shared_cells


@pytest.mark.docs
def test_every_shared_cell_is_its_template():
    found = [line for nb in sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
             for line in shared_cells.differences(nb)]
    assert found == [], "\n".join(found) + "\nrun: python -m tools.shared_cells"


@pytest.mark.docs
def test_the_repeated_cells_are_marked():
    counts: dict[str, int] = {}
    for path in NOTEBOOKS.glob("[0-9]*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            if name := shared_cells.shared_name(cell):
                counts[name] = counts.get(name, 0) + 1
    assert counts["start-ranks"] >= 11 and counts["self-check"] >= 12
    assert counts["what-every-rank-holds"] >= 8 and counts["save-and-tear-down"] >= 10


def test_check_names_an_edited_copy_and_write_restores_it(tmp_path, monkeypatch):
    copy = tmp_path / "01_scatter.ipynb"
    shutil.copy(NOTEBOOKS / "01_scatter.ipynb", copy)
    nb = nbformat.read(copy, as_version=4)
    cell = next(c for c in nb.cells if shared_cells.shared_name(c) == "self-check")
    cell.source += " Edited by hand."
    copy.write_text(nbformat.writes(nb) + "\n")
    assert len(shared_cells.differences(copy)) == 1
    assert "self-check" in shared_cells.differences(copy)[0]
    monkeypatch.setattr(shared_cells, "NOTEBOOK_DIR", tmp_path)
    assert shared_cells.main(["--check"]) == 1
    assert shared_cells.write(copy) and shared_cells.differences(copy) == []
    assert copy.read_text() == (NOTEBOOKS / "01_scatter.ipynb").read_text()


def _skeleton(path):
    cells = [nbformat.v4.new_markdown_cell("# 14 · a new notebook"),
             nbformat.v4.new_code_cell("n_ranks = None\nbackend = None"),
             nbformat.v4.new_code_cell("from helpers import start_cluster, save_results\n"
                                       "cluster = start_cluster(n_ranks, backend)"),
             nbformat.v4.new_code_cell('save_results("14_new", records)'),
             nbformat.v4.new_code_cell("cluster.stop()")]
    cells[1].metadata["tags"] = ["parameters"]
    path.write_text(nbformat.writes(nbformat.v4.new_notebook(cells=cells)) + "\n")


def test_a_new_notebook_adopts_the_shared_cells(tmp_path):
    path = tmp_path / "14_new.ipynb"
    _skeleton(path)
    done = subprocess.run([sys.executable, "-m", "tools.shared_cells", "--adopt", str(path)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "inserted start-ranks" in done.stdout and "inserted save-and-tear-down" in done.stdout
    cells = nbformat.read(path, as_version=4).cells
    names = [shared_cells.shared_name(c) for c in cells]
    assert names.index("start-ranks") == 1 and "parameters" in cells[2].metadata["tags"]
    assert names.index("save-and-tear-down") == 4 and "save_results" in cells[5].source
    assert "build/results/14_new.json" in cells[4].source
    assert shared_cells.differences(path) == []
    before = path.read_text()
    assert shared_cells.adopt(path) == [] and path.read_text() == before   # idempotent


def test_a_notebook_s_own_introduction_is_kept(tmp_path):
    path = tmp_path / "11_bandwidth.ipynb"
    shutil.copy(NOTEBOOKS / "11_bandwidth.ipynb", path)
    assert shared_cells.adopt(path) == []
    assert path.read_text() == (NOTEBOOKS / "11_bandwidth.ipynb").read_text()
