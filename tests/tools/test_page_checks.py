"""tests/support/page_checks.py: what no page may show, found in an executed notebook's
outputs as tools.pages makes them a page (no engines, no browser)."""
from __future__ import annotations

import nbformat
import pytest

from page_checks import residue


def _notebook(*outputs) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("%%px\nwork()")
    cell.id, cell.outputs = "work", list(outputs)
    nb.cells = [cell]
    return nb


def _stream(text: str, name: str = "stdout"):
    return nbformat.v4.new_output("stream", name=name, text=text)


@pytest.mark.parametrize("output, what", [
    (_stream("[stdout:0] \nhello\n[stdout:1] \nhello\n"), "engine header"),
    (_stream("[stderr:2] \nsomething\n", "stderr"), "engine header"),
    (_stream("/root/.cache/x.py:12: FutureWarning: `foo` is deprecated\n", "stderr"),
     "deprecation warning"),
    (_stream("saved to /tmp/abc/checkpoint\n"), "build-machine path"),
    (nbformat.v4.new_output("display_data", data={
        "text/plain": "x", "text/html": "<pre>EngineError: Engine 3 died</pre>"}),
     "raw ipyparallel error"),
    (nbformat.v4.new_output("error", ename="CompositeError", evalue="one or more exceptions",
                            traceback=["\x1b[0;31mCompositeError\x1b[0m"]),
     "raw ipyparallel error"),
    (_stream("task 4f1c2b3a-9d8e-4c7b-a6f5-0e1d2c3b4a59 failed\n"), "raw ipyparallel error"),
])
def test_each_kind_of_residue_is_found_and_named(output, what):
    found = residue(_notebook(output))
    assert found and all(f.startswith("cell work: ") for f in found), found
    assert any(what in f for f in found), found


def test_the_folded_cpp_log_keeps_its_lines_without_engine_headers():
    log = ("[stderr:0] \n[rank0]:[E1205 16:01:06.67 ProcessGroupGloo.cpp:2901] [Rank 0]: x\n"
           "[stderr:1] \n[rank1]:[E1205 16:01:11.68 ProcessGroupGloo.cpp:67] Rank 1: y\n")
    assert residue(_notebook(_stream(log, "stderr"))) == []
    from tools.pages import as_page

    folded = as_page(_notebook(_stream(log, "stderr"))).cells[0].outputs[0]
    assert folded.data["text/plain"].count("ProcessGroupGloo.cpp") == 2
    assert "C++ log on the engines: 2 lines" in folded.data["text/html"]


def test_a_clean_page_and_headers_that_tools_pages_drops_pass():
    clean = [_stream("[stdout:0] \nrank 0: [1.0]\n[stdout:1] \nrank 1: [2.0]\n"),  # dropped
             _stream("rank 0 holds 3 of 4 rows (deprecated nothing)\n"),
             nbformat.v4.new_output("display_data", data={"text/plain": "a rank died: 3"}),
             # Jupyter shows an error's traceback, not its name and value
             nbformat.v4.new_output("error", ename="CompositeError", evalue="raised in: %px",
                                    traceback=["rank 0 · RuntimeError: x"])]
    assert residue(_notebook(*clean)) == []


def test_a_warning_shown_on_purpose_passes_only_in_its_own_cell():
    from page_checks import ON_PURPOSE

    (stem, cell_id, what), = [key for key in ON_PURPOSE if key[2] == "deprecation warning"]
    nb = _notebook(_stream("rank 0: True; FutureWarning: `x` is deprecated\n"))
    nb.cells[0].id = cell_id
    assert residue(nb, stem) == []
    assert residue(nb, "another_notebook") and residue(nb)
