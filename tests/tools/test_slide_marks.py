"""Slide marks (tools.slide_marks) and the decks built from them (tools.slide_layout):
breaks only between whole statements, no slide of a lone status or `[stdout:N]` line, the
title slide with its bullets, a packing budget with a margin, and the committed notebooks'
marks present and up to date."""
from __future__ import annotations

import ast
import json
import shutil
import textwrap

import nbformat
import pytest

from conftest import NOTEBOOKS
from tools import slide_marks
from tools.slide_layout import (CELL_PAD_PX, MARGIN_PX, SLIDE_PX, STDOUT_HEAD, TITLE_PX,
                                code_height, layout, md_height, source_pieces, text_pages)

MASTERS = sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
TITLE = ("# 99 · A title\n\n**What you will learn**\n\n"
         + "\n".join(f"- point {i}: a bullet long enough to wrap over one line of the slide, "
                     "as the series' bullets do, with more words" for i in range(14)))


def _nb(*cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(c[2:]) if c.startswith("M:")
                else nbformat.v4.new_code_cell(c) for c in cells]
    for i, cell in enumerate(nb.cells):
        cell.id = f"k{i}"
    return nb


def _marked(nb: nbformat.NotebookNode, executed=None) -> nbformat.NotebookNode:
    raw = json.loads(nbformat.writes(nb))
    slide_marks.apply(raw, slide_marks.plan(nb, executed))
    return nbformat.reads(json.dumps(raw), as_version=4)


def _pieces_parse(source: str, breaks: list[int]) -> None:
    skip = source.startswith("%%")
    for n, piece in enumerate(source_pieces(source, breaks)):
        lines = piece.split("\n")[1 if skip and n == 0 else 0:]
        ast.parse(textwrap.dedent("\n".join(lines)))     # whole statements, or SyntaxError


LONG_DEF = ("def run(order, m):\n    \"\"\"A docstring that must never be cut:\n\n"
            "    it spans lines.\n    \"\"\"\n"
            + "".join(f"    x{i} = order[{i}] * m  # step {i}\n" for i in range(20))
            + "    for kind in order:\n" + "".join(f"        y{i} = kind * {i}\n"
                                                  for i in range(12))
            + "    return x0\n\n" + "".join(f"z{i} = run([{i}], {i})\n" for i in range(14)))


@pytest.mark.parametrize("magic", ["", "%%px\n"], ids=["python", "px"])
def test_a_long_code_cell_is_cut_between_whole_statements(magic):
    nb = _marked(_nb("M:# 99 · t", magic + LONG_DEF))
    cell = nb.cells[1]
    breaks = cell.metadata["slides"]["breaks"]
    assert len(breaks) >= 2
    _pieces_parse(cell.source, breaks)
    pieces = source_pieces(cell.source, breaks)
    assert '"""A docstring that must never be cut:\n\n    it spans lines.\n    """' in pieces[0]
    assert all(code_height(p) + CELL_PAD_PX <= SLIDE_PX for p in pieces)
    if magic:
        assert pieces[0].startswith("%%px\n") and not any(p.startswith("%%") for p in pieces[1:])
    deck = layout(nb)
    code = [c for c in deck.cells if c.cell_type == "code"]
    assert [c.metadata["slideshow"]["slide_type"] for c in code][1:] == ["subslide"] * len(
        breaks)
    shown = [ln for c in code for ln in c.source.split("\n") if ln.strip()]
    assert shown == [ln for ln in cell.source.split("\n") if ln.strip()]   # nothing dropped


def test_a_cut_that_would_split_a_statement_is_never_made():
    """A single statement taller than a slide (a long call) is left whole, not cut."""
    call = "f(\n" + "".join(f"    {i},\n" for i in range(40)) + ")\n"
    nb = _marked(_nb("M:# 99 · t", call + "g()\n"))
    for b in nb.cells[1].metadata.get("slides", {}).get("breaks", []):
        _pieces_parse(nb.cells[1].source, [b])
        assert b in (0, 42)


def test_the_title_slide_carries_its_bullets():
    """Notebook 24's bullets came two slides after its title: the cell was cut in blocks
    for a full slide, not the title's room, and the series' contents came in between."""
    nb = _marked(_nb("M:" + TITLE, "M:## Next"))
    cuts = nb.cells[0].metadata["slides"]["breaks"]
    first = source_pieces(nb.cells[0].source, cuts)[0]
    assert first.startswith("# 99 · A title") and "**What you will learn**" in first
    assert first.count("\n- point") >= 3 and md_height(first) <= TITLE_PX
    deck = layout(nb)
    kinds = [c.metadata["slideshow"]["slide_type"] for c in deck.cells]
    assert kinds[0] == "slide" and deck.cells[0].source == first


def _executed(*cells_and_outputs) -> nbformat.NotebookNode:
    nb = _nb(*[c for c, _ in cells_and_outputs])
    for cell, (_, outputs) in zip(nb.cells, cells_and_outputs):
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=t)
                            for t in outputs]
    return nb


def _slides(deck) -> list[list]:
    slides = []
    for cell in deck.cells:
        kind = cell.metadata["slideshow"]["slide_type"]
        if kind in ("skip", "notes"):
            continue
        if kind in ("slide", "subslide"):
            slides.append([])
        slides[-1].append(cell)
    return slides


def _shown_lines(slide) -> list[str]:
    lines = []
    for cell in slide:
        if cell.cell_type == "markdown" or not cell.metadata.get("transient"):
            lines += cell.source.splitlines()
        for out in cell.get("outputs", []):
            lines += out.get("text", "").splitlines()
    return [ln for ln in lines if ln.strip()]


def test_no_slide_of_a_lone_status_or_stdout_line():
    """A status line stays with its code (moved with it where it does not fit below); a
    long output is paged without a page that ends on `[stdout:N]` or holds one line."""
    filler = "M:## A section\n\n" + "\n\n".join(["A paragraph of words."] * 13)
    long_out = "".join(f"[stdout:{r}] \n" + "".join(f"rank {r} line {i}\n" for i in range(9))
                       for r in range(4))
    nb = _executed(("M:# 99 · t", []), (filler[2:] and filler, []),
                   ("x = 1\nprint(x)\nprint(x)", ["done: 1\n"]),
                   ("%%px\nprint(rank)", [long_out]))
    for executed in (nb, None):
        deck = layout(_marked(nb, executed))
        for slide in _slides(deck):
            shown = _shown_lines(slide)
            assert not all(STDOUT_HEAD.match(ln) for ln in shown), shown
            assert len(shown) > 1 or slide[0].cell_type == "markdown", shown
    for page in text_pages(long_out, 300):
        assert not STDOUT_HEAD.match(page.rstrip("\n").split("\n")[-1]), page
        assert page.count("\n") > 1


def test_the_packing_leaves_a_margin_for_other_fonts():
    """Packed to SLIDE_PX of content below the 16 px padding: at least 4 % of 720 px free,
    and the browser check holds every slide to 720 − MARGIN_PX."""
    assert 16 + SLIDE_PX <= 0.96 * 720 and MARGIN_PX >= 20 and TITLE_PX < SLIDE_PX


def test_write_twice_changes_nothing_and_check_names_what_is_missing(tmp_path):
    for stem in ("05_all_reduce", "24_pipeline_schedules"):
        shutil.copy(NOTEBOOKS / f"{stem}.ipynb", tmp_path)
    assert slide_marks.main(["--write", str(tmp_path)]) == 0
    written = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert slide_marks.main(["--write", str(tmp_path)]) == 0
    assert written == {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert slide_marks.main(["--check", str(tmp_path)]) == 0
    path = tmp_path / "05_all_reduce.ipynb"
    raw = json.loads(path.read_text())
    raw["cells"].insert(5, {"cell_type": "markdown", "id": "new", "metadata": {},
                            "source": ["A new cell, not yet marked."]})
    path.write_text(json.dumps(raw, indent=1, ensure_ascii=False) + "\n")
    _, wrong = slide_marks.problems(path)
    assert wrong == ["05_all_reduce.ipynb: cells [5] have no slide marks"]
    raw["cells"][3]["source"] = ["\n".join(f"x{i} = {i}" for i in range(40))]
    raw["cells"][5]["metadata"]["slideshow"] = {"slide_type": "-"}
    path.write_text(json.dumps(raw, indent=1, ensure_ascii=False) + "\n")
    _, wrong = slide_marks.problems(path)
    assert len(wrong) == 1 and "stale" in wrong[0] and "05_all_reduce" in wrong[0]
    assert slide_marks.main(["--check", str(tmp_path)]) == 1


def test_every_thumbnail_in_the_table_is_a_code_cell_of_its_notebook():
    assert set(slide_marks.THUMBNAILS) == {p.stem for p in MASTERS}
    for path in MASTERS:
        chosen = slide_marks.THUMBNAILS[path.stem]
        if chosen is None:
            continue
        cells = {c.id: c for c in nbformat.read(path, as_version=4).cells}
        assert chosen in cells and cells[chosen].cell_type == "code", (path.stem, chosen)


@pytest.mark.parametrize("path", MASTERS, ids=lambda p: p.stem)
def test_the_committed_marks_are_present_up_to_date_and_cut_between_statements(path):
    """What CI holds the notebooks to: `python -m tools.slide_marks --check` (a new cell
    without marks fails here), every declared cut of code between whole statements."""
    _, wrong = slide_marks.problems(path)
    assert not wrong, "\n".join(wrong) + "\n(run python -m tools.slide_marks --write)"
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code" and "breaks" in cell.metadata.get("slides", {}):
            _pieces_parse(cell.source, cell.metadata["slides"]["breaks"])


def test_marks_written_from_executed_copies_pass_the_check_without_them(tmp_path,
                                                                         monkeypatch):
    """--check has no executed copies: a cell that printed nothing keeps output_px 0 where
    its code alone would be guessed to print (a `print(`), so the plan is the same."""
    nb = _nb("M:# 99 · tiny\n\n**What you will learn**\n- a line",
             "if False:\n    print('never')")
    executed = nbformat.from_dict(json.loads(json.dumps(nb)))       # ran: no output
    monkeypatch.setitem(slide_marks.THUMBNAILS, "99_tiny", "k1")
    assert slide_marks.guess_output(nb.cells[1].source)[0] > 0
    (tmp_path / "ran").mkdir()
    nbformat.write(nb, tmp_path / "99_tiny.ipynb")
    nbformat.write(executed, tmp_path / "ran" / "99_tiny.ipynb")
    assert slide_marks.main(["--write", str(tmp_path), "--executed", str(tmp_path / "ran")]) == 0
    assert nbformat.read(tmp_path / "99_tiny.ipynb", as_version=4).cells[1].metadata[
        "slides"]["output_px"] == 0
    assert slide_marks.main(["--check", str(tmp_path)]) == 0
