"""Slide marks (tools.slide_marks) and the decks built from them (tools.slide_layout):
code cut only between whole top-level statements, a statement taller than a slide named
(never cut), no slide of a lone status or `[stdout:N]` line, the title slide with its
bullets, a packing budget with a margin, and the committed notebooks' marks present and
up to date."""
from __future__ import annotations

import json
import shutil

import nbformat
import pytest

from conftest import NOTEBOOKS
from tools import slide_marks
from tools.slide_layout import (CELL_PAD_PX, MARGIN_PX, PACK_MAX_PX, SLIDE_PX, STDOUT_HEAD,
                                TITLE_PX, TOP_PX, code_height, layout, md_height,
                                source_pieces, text_pages)

MASTERS = sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
TITLE = ("# 99 · A title\n\n**What you will learn**\n\n"
         + "\n".join(f"- point {i}: a bullet long enough to wrap over one line of the slide, "
                     "as the series' bullets do, with more words to say" for i in range(16)))


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


def _kinds(deck) -> list[str]:
    return [c.metadata["slideshow"]["slide_type"] for c in deck.cells]


def _def(name: str, lines: int) -> str:
    return (f"def {name}(order, m):\n    \"\"\"A docstring that must never be cut:\n\n"
            "    it spans lines.\n    \"\"\"\n"
            + "".join(f"    x{i} = order[{i}] * m  # step {i}\n" for i in range(lines))
            + "    return x0\n")


LONG_CELL = "\n\n".join(_def(f"f{n}", 12) for n in range(4)) + "\nz = f0([1], 2)\n"


@pytest.mark.parametrize("magic", ["", "%%px\n"], ids=["python", "px"])
def test_a_long_code_cell_is_cut_between_whole_top_level_statements(magic):
    nb = _marked(_nb("M:# 99 · t", magic + LONG_CELL))
    cell = nb.cells[1]
    breaks = cell.metadata["slides"]["breaks"]
    pieces = source_pieces(cell.source, breaks)
    assert len(pieces) >= 2
    for piece in pieces:                     # each piece runs as it is: whole statements
        assert slide_marks.parses(piece.split("\n")), piece
        assert code_height(piece) + CELL_PAD_PX <= SLIDE_PX
    assert all(p.lstrip("%px\n").startswith(("def ", "z = ")) for p in pieces)
    assert ('"""A docstring that must never be cut:\n\n    it spans lines.\n    """'
            in pieces[0])
    if magic:
        assert pieces[0].startswith("%%px\n") and not any(p.startswith("%%") for p in pieces[1:])
    deck = layout(nb)
    code = [c for c in deck.cells if c.cell_type == "code"]
    assert _kinds(deck)[2:] == ["subslide"] * len(breaks)
    shown = [ln for c in code for ln in c.source.split("\n") if ln.strip()]
    assert shown == [ln for ln in cell.source.split("\n") if ln.strip()]   # nothing dropped


def test_a_statement_taller_than_a_slide_is_never_cut_and_is_named(tmp_path):
    """24's `run` was cut in the middle (its colouring broken after the cut): a single
    statement too tall for a slide is left whole, and --check names its cell."""
    source = "%%px\nimport time\n\n" + _def("run", 30) + "\nrun([1], 2)\n"
    nb = _marked(_nb("M:# 99 · t", source))
    lines = source.split("\n")
    for cut in nb.cells[1].metadata.get("slides", {}).get("breaks", []):
        assert lines[cut].startswith(("def ", "run(")), cut     # only at the top level
    assert slide_marks.tall_cells(nb, slide_marks.plan(nb)) == [
        f"k1 ({code_height(_def('run', 30)) + CELL_PAD_PX} px)"]
    nbformat.write(nb, tmp_path / "99_tall.ipynb")
    _, wrong = slide_marks.problems(tmp_path / "99_tall.ipynb")
    assert any("k1" in w and "rewrite them shorter" in w for w in wrong), wrong
    assert slide_marks.main(["--check", str(tmp_path / "99_tall.ipynb")]) == 1


def test_the_title_slide_carries_its_bullets():
    """Notebook 24's bullets came two slides after its title: the cell was cut in blocks
    for a full slide, not the title's room, and the series' contents came in between."""
    nb = _marked(_nb("M:" + TITLE, "M:## Next"))
    cuts = nb.cells[0].metadata["slides"]["breaks"]
    first = source_pieces(nb.cells[0].source, cuts)[0]
    assert first.startswith("# 99 · A title") and "**What you will learn**" in first
    assert first.count("\n- point") >= 3 and md_height(first) <= TITLE_PX
    deck = layout(nb)
    assert _kinds(deck)[0] == "slide" and deck.cells[0].source == first


@pytest.mark.parametrize("path", MASTERS, ids=lambda p: p.stem)
def test_every_decks_first_slide_is_its_title_and_what_you_will_learn(path):
    nb = nbformat.read(path, as_version=4)
    marks = slide_marks.plan(nb, stem=path.stem)
    first = source_pieces(nb.cells[0].source, marks[0].get("slides", {}).get("breaks", []))[0]
    assert marks[0]["slideshow"]["slide_type"] == "slide"
    assert first.startswith("# ") and "What you will learn" in first and "\n- " in first


def test_a_table_taller_than_a_slide_is_cut_at_its_rows_each_piece_with_its_header():
    rows = "\n".join(f"| row {i} | {'words ' * 12} |" for i in range(40))
    nb = _marked(_nb("M:## A map\n\nThe table:\n\n| name | what |\n|---|---|\n" + rows))
    pieces = source_pieces(nb.cells[0].source, nb.cells[0].metadata["slides"]["breaks"])
    assert len(pieces) >= 2 and all(md_height(p) <= SLIDE_PX for p in pieces)
    assert all(p.startswith("| name | what |\n|---|---|\n| row") for p in pieces[1:])
    assert sum(p.count("| row ") for p in pieces) == 40


def test_the_scheme_cell_shows_its_picture_without_its_code():
    nb = _nb("M:# 99 · t", "draw_scheme()")
    nb.cells[1].metadata["tags"] = ["scheme"]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="a\nb\nc\n")]
    deck = layout(_marked(nb, nb))
    assert [c.source for c in deck.cells if c.cell_type == "code"
            and not c.metadata.get("transient", {}).get("remove_source")] == []
    assert any(c.get("outputs") for c in deck.cells)


def test_the_parameters_and_bookkeeping_are_left_out_answers_go_to_the_notes():
    nb = _nb("M:# 99 · t", "n_ranks = 4", "save_run(records)", "M:Exercise: do it.",
             "answer = 1", "check(answer)")
    nb.cells[1].metadata["tags"] = ["parameters"]
    nb.cells[4].metadata["tags"] = ["solution"]
    kinds = [m["slideshow"]["slide_type"] for m in slide_marks.plan(nb)]
    assert kinds[1:3] == ["skip", "skip"] and kinds[3] == "subslide" and kinds[4] == "notes"


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
    filler = "## A section\n\n" + "\n\n".join(["A paragraph of words."] * 14)
    long_out = "".join(f"[stdout:{r}] \n" + "".join(f"rank {r} line {i}\n" for i in range(9))
                       for r in range(4))
    nb = _executed(("M:# 99 · t", []), ("M:" + filler, []),
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
    """Packed to end by PACK_MAX_PX (≤ 690) of 720; the browser check (tests/support/
    slides.py) holds every measured slide to 720 − MARGIN_PX (≤ 700): on another machine
    13 of 1,051 slides measured 725 px."""
    from slides import MAX_HEIGHT_PX

    assert TOP_PX + SLIDE_PX <= PACK_MAX_PX <= 690 and TITLE_PX < SLIDE_PX
    assert MARGIN_PX >= 20 and MAX_HEIGHT_PX == 720 - MARGIN_PX <= 700


def test_write_twice_changes_nothing_and_check_names_what_is_missing(tmp_path):
    for stem in ("05_all_reduce", "24_pipeline_schedules"):
        shutil.copy(NOTEBOOKS / f"{stem}.ipynb", tmp_path)
    slide_marks.main(["--write", str(tmp_path)])
    written = {p.name: p.read_text() for p in tmp_path.iterdir()}
    slide_marks.main(["--write", str(tmp_path)])
    assert written == {p.name: p.read_text() for p in tmp_path.iterdir()}
    path = tmp_path / "05_all_reduce.ipynb"
    assert slide_marks.problems(path)[1] == []
    raw = json.loads(path.read_text())
    raw["cells"].insert(5, {"cell_type": "markdown", "id": "new", "metadata": {},
                            "source": ["A new cell, not yet marked."]})
    path.write_text(json.dumps(raw, indent=1, ensure_ascii=False) + "\n")
    _, wrong = slide_marks.problems(path)
    assert wrong == ["05_all_reduce.ipynb: cells [5] have no slide marks"]
    raw["cells"][5]["metadata"]["slideshow"] = {"slide_type": "subslide"}
    path.write_text(json.dumps(raw, indent=1, ensure_ascii=False) + "\n")
    _, wrong = slide_marks.problems(path)
    assert len(wrong) == 1 and "stale" in wrong[0] and "05_all_reduce" in wrong[0]
    assert slide_marks.main(["--check", str(path)]) == 1


def test_every_thumbnail_in_the_table_is_a_code_cell_of_its_notebook():
    chosen_by_stem = slide_marks.thumbnails()
    assert set(chosen_by_stem) == {p.stem for p in MASTERS}
    for path in MASTERS:
        chosen = chosen_by_stem[path.stem]
        cells = {c.id: c for c in nbformat.read(path, as_version=4).cells}
        assert chosen in cells and cells[chosen].cell_type == "code", (path.stem, chosen)


@pytest.mark.parametrize("path", MASTERS, ids=lambda p: p.stem)
def test_the_committed_marks_are_present_up_to_date_and_fit(path):
    """What CI holds the notebooks to: `python -m tools.slide_marks --check` (a new cell
    without marks fails here, and so does a statement taller than a slide), every declared
    cut of code between whole statements."""
    _, wrong = slide_marks.problems(path)
    assert not wrong, "\n".join(wrong) + "\n(python -m tools.slide_marks --write)"
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code" and "breaks" in cell.metadata.get("slides", {}):
            for piece in source_pieces(cell.source, cell.metadata["slides"]["breaks"]):
                assert slide_marks.parses(piece.split("\n")), (path.stem, cell.id, piece)


def test_marks_written_from_executed_copies_pass_the_check_without_them(tmp_path,
                                                                         monkeypatch):
    """--check has no executed copies: a cell that printed nothing keeps output_px 0 where
    its code alone would be guessed to print (a `print(`), so the plan is the same."""
    nb = _nb("M:# 99 · tiny\n\n**What you will learn**\n- a line",
             "if False:\n    print('never')")
    executed = nbformat.from_dict(json.loads(json.dumps(nb)))       # ran: no output
    chosen = {**slide_marks.thumbnails(), "99_tiny": "k1"}
    monkeypatch.setattr(slide_marks, "thumbnails", lambda: chosen)
    assert slide_marks.guess_output(nb.cells[1].source)[0] > 0
    (tmp_path / "ran").mkdir()
    nbformat.write(nb, tmp_path / "99_tiny.ipynb")
    nbformat.write(executed, tmp_path / "ran" / "99_tiny.ipynb")
    assert slide_marks.main(["--write", str(tmp_path), "--executed", str(tmp_path / "ran")]) == 0
    assert nbformat.read(tmp_path / "99_tiny.ipynb", as_version=4).cells[1].metadata[
        "slides"]["output_px"] == 0
    assert slide_marks.main(["--check", str(tmp_path)]) == 0


def test_check_reads_the_series_table_once_for_every_notebook(tmp_path, monkeypatch):
    """`--check` over several notebooks reads notebooks/series.toml once (not twice per
    notebook, in `plan` and in `problems`), and still finds each notebook's card."""
    from tools import series

    stems = ("05_all_reduce", "11_bandwidth", "24_pipeline_schedules")
    for stem in stems:
        shutil.copy(NOTEBOOKS / f"{stem}.ipynb", tmp_path)
    loads, load = [], series.load

    def counted(*args, **kwargs):
        loads.append(args)
        return load(*args, **kwargs)

    monkeypatch.setattr(series, "load", counted)
    assert slide_marks.main(["--check", str(tmp_path)]) == 0
    assert len(loads) == 1, f"series.toml read {len(loads)} times for {len(stems)} notebooks"
    cards = slide_marks.thumbnails()
    for stem in stems:
        nb = nbformat.read(tmp_path / f"{stem}.ipynb", as_version=4)
        marks = slide_marks.plan(nb, stem=stem, cards=cards)
        assert [c.id for c, m in zip(nb.cells, marks) if m["thumbnail"]] == [cards[stem]]
