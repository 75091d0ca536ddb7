"""The cells every notebook repeats, written from one template each.

    python -m tools.shared_cells                  # rewrite every marked cell from its template
    python -m tools.shared_cells --check          # exit 1, naming each copy that differs
    python -m tools.shared_cells --adopt NB ...   # mark (or insert) the shared cells of NB

A shared cell is a markdown cell tagged `shared:<name>` (Jupyter cell tags); its text is
tools/shared_cells/<name>.md with `{stem}` replaced by the notebook's file stem. Edit
the template, never the copy: tests/tools/test_shared_cells.py fails when a copy differs.

`--adopt` is for a new notebook with the series' skeleton (a cell tagged `parameters`,
a start cell `cluster = start_cluster(n_ranks, backend)`, `save_results(...)` then
`cluster.stop()` at the end): before the parameters cell it marks the cell that already
is the template or inserts "start-ranks"; before the `save_results(...)` cell the same
for "save-and-tear-down" (never where a markdown cell already introduces it); it marks the "what-every-rank-holds" and "self-check" cells
whose text is already the template's. A cell with the same heading but its own text
(notebook 00's introduction, notebook 11's start without the checks) is left as it is.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

TEMPLATE_DIR = Path(__file__).resolve().parent / "shared_cells"
NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
TAG = "shared:"
# Inserted when missing (by --adopt), before the cell this test finds.
INSERTED = {
    "start-ranks": lambda cell: "parameters" in cell.metadata.get("tags", []),
    "save-and-tear-down": lambda cell: cell.cell_type == "code" and "save_results(" in cell.source,
}


def templates() -> dict[str, str]:
    """name → template text, from tools/shared_cells/*.md."""
    return {p.stem: p.read_text().rstrip("\n") for p in sorted(TEMPLATE_DIR.glob("*.md"))}


def shared_name(cell: nbformat.NotebookNode) -> str | None:
    """The template a cell is written from, or None."""
    for tag in cell.metadata.get("tags", []):
        if tag.startswith(TAG):
            return tag[len(TAG):]
    return None


def render(name: str, notebook: Path, known: dict[str, str] | None = None) -> str:
    known = templates() if known is None else known
    if name not in known:
        raise ValueError(f"{notebook.name}: no template {name!r} in {TEMPLATE_DIR} "
                         f"(known: {', '.join(known)})")
    return known[name].replace("{stem}", notebook.stem)


def differences(notebook: Path) -> list[str]:
    """One line per marked cell of `notebook` whose text is not its template's."""
    known, nb = templates(), nbformat.read(notebook, as_version=4)
    return [f"{notebook.name}: cell {i} ({name}) differs from tools/shared_cells/{name}.md"
            for i, cell in enumerate(nb.cells)
            if (name := shared_name(cell)) and cell.source != render(name, notebook, known)]


def _write(nb: nbformat.NotebookNode, notebook: Path) -> None:
    notebook.write_text(nbformat.writes(nb) + "\n")


def write(notebook: Path) -> bool:
    """Rewrite the marked cells from their templates; True when the file changed."""
    known, nb = templates(), nbformat.read(notebook, as_version=4)
    changed = False
    for cell in nb.cells:
        name = shared_name(cell)
        if name and cell.source != (text := render(name, notebook, known)):
            cell.source, changed = text, True
    if changed:
        _write(nb, notebook)
    return changed


def _mark(cell: nbformat.NotebookNode, name: str) -> None:
    cell.metadata["tags"] = [t for t in cell.metadata.get("tags", []) if not t.startswith(TAG)]
    cell.metadata["tags"].append(TAG + name)


def adopt(notebook: Path) -> list[str]:
    """Mark, or insert, the shared cells of a notebook; returns what was done."""
    known, nb = templates(), nbformat.read(notebook, as_version=4)
    done = []
    for name in known:
        text = render(name, notebook, known)
        if any(shared_name(c) == name for c in nb.cells):
            continue
        same = [c for c in nb.cells if c.cell_type == "markdown" and c.source == text]
        for cell in same:
            _mark(cell, name)
            done.append(f"marked {name}")
        if same or name not in INSERTED:
            continue
        at = next((i for i, c in enumerate(nb.cells) if INSERTED[name](c)), None)
        if at is None:
            continue
        before = nb.cells[at - 1] if at else None
        if before is not None and before.cell_type == "markdown" \
                and before.source.startswith("## "):
            continue                   # a section of its own already introduces that cell
        cell = nbformat.v4.new_markdown_cell(text, id=f"shared-{name}")
        cell.metadata["slideshow"] = {"slide_type": "slide"}
        _mark(cell, name)
        nb.cells.insert(at, cell)
        done.append(f"inserted {name} before cell {at}")
    if done:
        _write(nb, notebook)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.shared_cells",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report differing copies, exit 1")
    parser.add_argument("--adopt", nargs="+", type=Path, metavar="NOTEBOOK",
                        help="mark or insert the shared cells of these notebooks")
    args = parser.parse_args(argv)
    if args.adopt:
        for notebook in args.adopt:
            print(f"{notebook}: {'; '.join(adopt(notebook)) or 'nothing to do'}")
        return 0
    notebooks = sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb"))
    if args.check:
        found = [line for nb in notebooks for line in differences(nb)]
        print("\n".join(found) or f"{len(notebooks)} notebooks: every shared cell is its template")
        return 1 if found else 0
    for notebook in notebooks:
        if write(notebook):
            print(f"rewrote {notebook.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
