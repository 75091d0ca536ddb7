"""The decks: `python -m tools.classroom slides [--language zh_CN]` (`make slides`,
`make slides-zh`).

reveal.js slides of the executed notebooks (build/executed, made by `make html`) in
build/slides/, 1280×720 for a projector. Where the slides break is declared in the
notebooks' cell metadata (written once by `python -m tools.slide_marks --write`, reviewed
in the diff); tools.slide_layout builds the deck from those marks (its docstring has the
few rules it applies to outputs), tools.slide_nav adds the series' navigation. reveal.js,
require.js and jQuery are copied next to the slides (fetched once with npm), so the slides
work offline; without npm they load from a CDN, and we say so.

In another language (build/<language>/slides/): the same executed notebook, its markdown
translated by the page's catalog (tools.i18n.cells.translated_page: a page the catalog does
not cover whole is an error), so every number and plot is the run's own; the navigation's
titles are the translated notebooks', its words the site catalog's, its index link the
site's in that language where `make html` built one. A markdown cell's marks are source
lines of the English: `carried_breaks` puts them at the same places of the translation.
"""
from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import nbformat

from tools import slide_nav
from tools.build import EXECUTED_DIR, NOTEBOOK_DIR
from tools.i18n.cells import translated_page
from tools.i18n.cells import units
from tools.site import Entry, notebook_summary
from tools.slide_layout import layout
from helpers.paths import build_dir
from helpers.runtime.files import atomic_write

TEMPLATES = Path(__file__).resolve().parent / "templates"   # projector: the slides' look
VENDOR = {  # npm package → (file inside the package, where the slides expect it)
    "reveal.js@4.0.2": [("package", "reveal.js")],
    "requirejs@2.3.6": [("package/require.js", "require.js")],
    "jquery@3.5.1": [("package/dist/jquery.min.js", "jquery.min.js")],
}
CDN = {"reveal_url_prefix": "https://unpkg.com/reveal.js@4.0.2",
       "require_js_url": "https://cdnjs.cloudflare.com/ajax/libs/require.js/2.1.10/require.min.js",
       "jquery_url": "https://code.jquery.com/jquery-3.5.1.min.js"}
# Where a translated paragraph may be cut: after a sentence's (or a clause's) end.
SENTENCE_END = re.compile(r"[。；！？]|[.;!?](?= )")


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
def _exporter(urls: tuple[tuple[str, str], ...], language: str | None):
    from nbconvert import SlidesExporter

    # <html lang>: nbconvert takes ISO 639-1 codes only ("zh"; "zh-CN" it replaces by "en")
    code = (language or "en").split("_")[0]
    return SlidesExporter(template_name="projector", extra_template_basedirs=[str(TEMPLATES)],
                          reveal_theme="white", reveal_transition="none", reveal_number="c/t",
                          reveal_width="1280", reveal_height="720", language_code=code,
                          **dict(urls))


def entries_of(notebooks: dict[Path, nbformat.NotebookNode]) -> list[Entry]:
    """The decks' navigation: an entry (stem, title) per notebook, in the given order."""
    return [Entry(path.stem, notebook_summary(nb, path.stem)[0]) for path, nb in notebooks.items()]


@functools.lru_cache(maxsize=2)
def series_entries(language: str | None = None) -> list[Entry]:
    """Every notebook of the series (the masters, in `language`), for the decks' navigation."""
    return entries_of({path: translated_page(nbformat.read(path, as_version=4), path.stem,
                                             language)
                       for path in sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb"))})


def carried_breaks(english: str, translation: str, breaks: list[int]) -> tuple[str, list[int]]:
    """A markdown cell's `breaks` (lines of its `english` source) at the same places of its
    `translation`: a break between blocks at the same block; one inside a paragraph (a
    paragraph taller than a slide, cut after a sentence) after the sentence end of the
    translation nearest the same share of it, the paragraph's line split there (no
    sentence end: the paragraph stays whole). Returns (the translation, its breaks)."""
    ours, theirs = units(english), units(translation)
    if [u.kind for u in ours] != [u.kind for u in theirs]:
        raise ValueError(f"the translation's blocks are not the English ones: {translation!r}")
    lines, total = translation.split("\n"), len(english.split("\n"))
    found, shares = [], {}
    for line in breaks:
        inside = next((k for k, u in enumerate(ours) if u.start < line < u.end), None)
        after = next((k for k, u in enumerate(ours) if u.start >= line), None)
        if inside is not None:
            u = ours[inside]
            shares.setdefault(inside, []).append((line - u.start) / (u.end - u.start))
        elif after is not None:            # the lines between blocks are kept as they are
            found.append(theirs[after].start - (ours[after].start - line))
        else:
            found.append(len(lines) - (total - line))
    for k in sorted(shares, reverse=True):          # a split moves the lines below it
        t = theirs[k]
        text = "\n".join(lines[t.start:t.end])
        ends = [m.end() for m in SENTENCE_END.finditer(text) if text[m.end():].strip()]
        cuts = sorted({min(ends, key=lambda e: abs(e - share * len(text)))
                       for share in shares[k]} if ends else set())
        pieces = [text[a:b].strip() for a, b in zip([0, *cuts], [*cuts, len(text)])]
        new = "\n".join(pieces).split("\n")
        found = [f + len(new) - (t.end - t.start) if f >= t.end else f for f in found]
        found += [t.start + sum(p.count("\n") + 1 for p in pieces[:n])
                  for n in range(1, len(pieces))]
        lines[t.start:t.end] = new
    return "\n".join(lines), sorted(set(found))


def deck_notebook(nb: nbformat.NotebookNode, stem: str, language: str | None
                  ) -> nbformat.NotebookNode:
    """The executed notebook `nb` with its markdown in `language` (translated_page), each
    markdown cell's breaks carried to its translation."""
    translation = translated_page(nb, stem, language)
    if translation is nb:
        return nb
    for english, cell in zip(nb.cells, translation.cells):
        breaks = cell.metadata.get("slides", {}).get("breaks")
        if cell.cell_type == "markdown" and breaks:
            try:
                cell.source, cell.metadata["slides"]["breaks"] = carried_breaks(
                    english.source, cell.source, breaks)
            except ValueError as error:
                raise SystemExit(f"{stem}, cell {english.get('id')}: {error}") from None
    return translation


def _deck(nb: nbformat.NotebookNode, stem: str, urls: dict[str, str], entries: list[Entry],
          language: str | None) -> str:
    """The deck of `nb`, already in `language`."""
    body, _ = _exporter(tuple(sorted(urls.items())), language).from_notebook_node(layout(nb))
    return slide_nav.with_slide_nav(body, entries, stem, index_href(language), language)


def index_href(language: str | None) -> str:
    """The book's index, from build/slides/ (or build/<language>/slides/): the site in
    `language` where `make html` built one (build/html/<language>/), else the English."""
    if language in (None, "en"):
        return "../html/index.html"
    built = (build_dir() / "html" / language / "index.html").is_file()
    return f"../../html/{language}/index.html" if built else "../../html/index.html"


def deck_html(nb: nbformat.NotebookNode, stem: str, urls: dict[str, str],
              entries: list[Entry] | None = None, language: str | None = None) -> str:
    """The deck of the executed notebook `nb`, in `language` (by default as it is): laid
    out from its slide marks (tools.slide_layout), with the series' navigation (`entries`,
    by default every notebook); reveal.js from `urls`."""
    return _deck(deck_notebook(nb, stem, language), stem, urls,
                 entries or series_entries(language), language)


def make_slides(out_dir: Path, language: str | None = None) -> list[Path]:
    """A deck of every executed notebook, in `language`, into `out_dir`."""
    executed = sorted(EXECUTED_DIR.glob("[0-9]*.ipynb"))
    if not executed:
        raise SystemExit(f"no executed notebooks in {EXECUTED_DIR}: run `make html` first")
    english = build_dir() / "slides" / "vendor"       # the English decks' copy, if any
    if not (out_dir / "vendor").exists() and english.is_dir():
        shutil.copytree(english, out_dir / "vendor")
    urls = vendor_reveal(out_dir / "vendor")
    if urls is None:
        urls = CDN
        print("npm not found: the slides will load reveal.js from a CDN when opened",
              file=sys.stderr)
    notebooks = {path: deck_notebook(nbformat.read(path, as_version=4), path.stem, language)
                 for path in executed}
    entries = entries_of(notebooks)
    written = []
    for path, nb in notebooks.items():
        target = out_dir / f"{path.stem}.slides.html"
        atomic_write(target, _deck(nb, path.stem, urls, entries, language))
        written.append(target)
        print(f"{target}")
    return written
