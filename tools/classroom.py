"""Classroom material: `python -m tools.classroom student|slides [--language zh_CN]`.

- student: copies of the notebooks in build/student/ with every cell tagged
  `solution` replaced by an empty answer cell (tagged `exercise`). The check cell
  that follows stays, so a student can verify an answer without seeing it.
- slides: reveal.js slides of the executed notebooks (build/executed, made by
  `make html`) in build/slides/: tools/slide_deck.py.
- --language: the same, their markdown translated by the pages' catalogs (tools/i18n), in
  build/<language>/student or slides; the code cells (and the decks' outputs) are the
  English ones.
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat

from tools.build import NOTEBOOK_DIR
from tools.exercises import is_solution, student_stub
from tools.i18n.cells import translated_page
from tools.i18n.strings import N_, translated
from helpers.runtime.files import atomic_write
from helpers.paths import build_dir

STUDENT_NOTE = N_("> **Student copy.** The answers of the exercises are removed: write yours "
                  "in the cells marked ✎, then run the check cell below each one.")


def student_copy(nb: nbformat.NotebookNode, language: str | None = None
                 ) -> nbformat.NotebookNode:
    """The notebook with solution cells replaced by exercise cells, outputs cleared; its
    note in `language` (the notebook's own text is the caller's: `in_language`)."""
    nb = copy.deepcopy(nb)  # the master stays as it was
    cells = []
    for cell in nb.cells:
        if is_solution(cell):
            stub = nbformat.v4.new_code_cell(student_stub(cell))
            stub.metadata["tags"] = ["exercise"]
            stub.metadata["slideshow"] = cell.metadata.get("slideshow", {"slide_type": "-"})
            stub.id = cell.id
            cell = stub
        elif cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        cells.append(cell)
    note = nbformat.v4.new_markdown_cell(translated(STUDENT_NOTE, language))
    note.id = "student-note"
    nb.cells = cells[:1] + [note] + cells[1:]
    return nb


def in_language(path: Path, language: str | None) -> nbformat.NotebookNode:
    """The notebook at `path` (a master, or its executed copy), its markdown in
    `language`: `tools.i18n.cells.translated_page`."""
    return translated_page(nbformat.read(path, as_version=4), path.stem, language)


def make_student(out_dir: Path, language: str | None = None) -> list[Path]:
    written = []
    for path in sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb")):
        nb = student_copy(in_language(path, language), language)
        target = out_dir / path.name
        atomic_write(target, nbformat.writes(nb))
        written.append(target)
        print(f"{target}")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["student", "slides"])
    parser.add_argument("--out", type=Path, help="output folder (default build/<what>, or "
                        "build/<language>/<what>)")
    parser.add_argument("--language", help="the copies or decks in this language (zh_CN)")
    args = parser.parse_args(argv)
    out = args.out or build_dir() / (args.language or "") / args.what
    if args.what == "student":
        make_student(out, args.language)
    else:
        from tools.slide_deck import make_slides

        make_slides(out, args.language)
    return 0


if __name__ == "__main__":
    sys.exit(main())
