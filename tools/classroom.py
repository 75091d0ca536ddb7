"""Classroom material: `python -m tools.classroom student|slides`.

- student: copies of the notebooks in build/student/ with every cell tagged
  `solution` replaced by an empty answer cell (tagged `exercise`). The check cell
  that follows stays, so a student can verify an answer without seeing it.
- slides: reveal.js slides of the executed notebooks (build/executed, made by
  `make html`) in build/slides/, 1280×720 for a projector. Where the slides break is
  declared in the notebooks' cell metadata (written once by `python -m tools.slide_marks
  --write`, reviewed in the diff); tools.slide_layout builds the deck from those marks
  (its docstring has the few rules it applies to outputs). reveal.js, require.js and
  jQuery are copied next to the slides (fetched once with npm), so the slides work
  offline; without npm they load from a CDN, and we say so.
"""
from __future__ import annotations

import argparse
import copy
import functools
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import nbformat

from tools import slide_nav
from tools.slide_layout import layout
from tools.build import EXECUTED_DIR, NOTEBOOK_DIR
from tools.exercises import is_solution, student_stub
from tools.i18n.strings import N_, translated
from tools.site import Entry, notebook_summary
from helpers.runtime.files import atomic_write
from helpers.paths import build_dir

STUDENT_NOTE = N_("> **Student copy.** The answers of the exercises are removed: write yours "
                  "in the cells marked ✎, then run the check cell below each one.")
TEMPLATES = Path(__file__).resolve().parent / "templates"   # projector: the slides' look
VENDOR = {  # npm package → (file inside the package, where the slides expect it)
    "reveal.js@4.0.2": [("package", "reveal.js")],
    "requirejs@2.3.6": [("package/require.js", "require.js")],
    "jquery@3.5.1": [("package/dist/jquery.min.js", "jquery.min.js")],
}
CDN = {"reveal_url_prefix": "https://unpkg.com/reveal.js@4.0.2",
       "require_js_url": "https://cdnjs.cloudflare.com/ajax/libs/require.js/2.1.10/require.min.js",
       "jquery_url": "https://code.jquery.com/jquery-3.5.1.min.js"}


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
    """The notebook at `path`, its markdown in `language` (tools/i18n); a page the
    language's catalog does not cover whole is an error naming it."""
    nb = nbformat.read(path, as_version=4)
    if language in (None, "en"):
        return nb
    from tools.i18n import catalogs
    from tools.i18n.cells import translate_notebook

    catalog = catalogs.page_catalog(path.stem, language)
    if catalog is None:
        raise SystemExit(f"{path.stem}: no {language} catalog "
                         f"({catalogs.catalog_dir(language)})")
    translation, _, missing = translate_notebook(nb, catalog, language)
    if missing:
        raise SystemExit(f"{path.stem}: {len(missing)} blocks have no {language} "
                         f"translation, the first: {missing[0]!r} (make i18n-update)")
    return translation


def make_student(out_dir: Path, language: str | None = None) -> list[Path]:
    written = []
    for path in sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb")):
        nb = student_copy(in_language(path, language), language)
        target = out_dir / path.name
        atomic_write(target, nbformat.writes(nb))
        written.append(target)
        print(f"{target}")
    return written


def vendor_reveal(vendor_dir: Path) -> dict[str, str] | None:
    """Local copies of reveal.js, require.js and jQuery (npm pack); None without npm."""
    if all((vendor_dir / dest).exists() for files in VENDOR.values() for _, dest in files):
        return _local_urls(vendor_dir)
    npm = shutil.which("npm")
    if npm is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            subprocess.run([npm, "pack", "--silent", *VENDOR], cwd=tmp, check=True,
                           capture_output=True, timeout=120)
        except (subprocess.SubprocessError, OSError):
            return None
        for spec, files in VENDOR.items():
            name, version = spec.rsplit("@", 1)
            with tarfile.open(Path(tmp) / f"{name}-{version}.tgz") as tar:
                tar.extractall(Path(tmp) / name, filter="data")
            for inside, dest in files:
                target = vendor_dir / dest
                if target.exists():
                    shutil.rmtree(target) if target.is_dir() else target.unlink()
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(Path(tmp) / name / inside), target)
    return _local_urls(vendor_dir)


def _local_urls(vendor_dir: Path) -> dict[str, str]:
    name = vendor_dir.name
    return {"reveal_url_prefix": f"{name}/reveal.js", "require_js_url": f"{name}/require.js",
            "jquery_url": f"{name}/jquery.min.js"}


@functools.lru_cache(maxsize=4)
def _exporter(urls: tuple[tuple[str, str], ...]):
    from nbconvert import SlidesExporter

    return SlidesExporter(template_name="projector", extra_template_basedirs=[str(TEMPLATES)],
                          reveal_theme="white", reveal_transition="none", reveal_number="c/t",
                          reveal_width="1280", reveal_height="720", **dict(urls))


def entries_of(notebooks: dict[Path, nbformat.NotebookNode]) -> list[Entry]:
    """The decks' navigation: an entry (stem, title) per notebook, in the given order."""
    return [Entry(path.stem, notebook_summary(nb, path.stem)[0]) for path, nb in notebooks.items()]


@functools.lru_cache(maxsize=1)
def series_entries() -> list[Entry]:
    """Every notebook of the series (the masters), for the decks' navigation."""
    return entries_of({path: nbformat.read(path, as_version=4)
                       for path in sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb"))})


def deck_html(nb: nbformat.NotebookNode, stem: str, urls: dict[str, str],
              entries: list[Entry] | None = None) -> str:
    """The deck of the executed notebook `nb`: laid out from its slide marks
    (tools.slide_layout), with the series' navigation (`entries`, by default every
    notebook); reveal.js from `urls`."""
    body, _ = _exporter(tuple(sorted(urls.items()))).from_notebook_node(layout(nb))
    return slide_nav.with_slide_nav(body, entries or series_entries(), stem)


def make_slides(out_dir: Path) -> list[Path]:
    executed = sorted(EXECUTED_DIR.glob("[0-9]*.ipynb"))
    if not executed:
        raise SystemExit(f"no executed notebooks in {EXECUTED_DIR}: run `make html` first")
    urls = vendor_reveal(out_dir / "vendor")
    if urls is None:
        urls = CDN
        print("npm not found: the slides will load reveal.js from a CDN when opened",
              file=sys.stderr)
    notebooks = {path: nbformat.read(path, as_version=4) for path in executed}
    entries = entries_of(notebooks)
    written = []
    for path, nb in notebooks.items():
        target = out_dir / f"{path.stem}.slides.html"
        atomic_write(target, deck_html(nb, path.stem, urls, entries))
        written.append(target)
        print(f"{target}")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["student", "slides"])
    parser.add_argument("--out", type=Path, help="output folder (default build/<what>, or "
                        "build/<language>/<what>)")
    parser.add_argument("--language", help="the students' copies in this language (zh_CN)")
    args = parser.parse_args(argv)
    if args.language and args.what != "student":
        parser.error("--language: student copies only, so far")
    out = args.out or build_dir() / (args.language or "") / args.what
    if args.what == "student":
        make_student(out, args.language)
    else:
        make_slides(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
