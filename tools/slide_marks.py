"""Slide marks: `python -m tools.slide_marks --write|--check [notebooks...] [--executed DIR]`.

Where each notebook's deck breaks is decided here, once, and written into the notebook,
where it is reviewed in the diff; tools.slide_layout builds the deck from those marks only.
Per cell: the standard `metadata.slideshow.slide_type` ("slide", "subslide", "-", "skip",
"notes") and, where needed, `metadata.slides`:
- `breaks`: the source lines (0-based) where a cell too tall for its slide is cut, each
  piece a sub-slide. Code is cut only between whole top-level statements (`ast`: every
  piece parses; a `%%px` line stays with the first piece, comments with the statement
  below them); markdown between paragraphs, list items or a table's rows (each piece of
  a table led by its header), a paragraph taller than a slide after a line that ends a
  sentence, else at a line.
- `output: "subslide"`: the cell's outputs start a sub-slide of their own.
- `output_px` (and `plot`): the estimated height of its outputs, from an executed copy
  (`--executed`) or, for a cell without one, from its code (an estimate); kept as written
  when no executed copy is given, so `--check` is the same on every machine.
And the code cell whose first PNG is the page's picture (its index card) is tagged
`thumbnail` (notebooks/series.toml's `thumbnail`).

The rules, packed to tools.slide_layout.SLIDE_PX (TITLE_PX on the title slide):
- a `#`/`##` heading starts a slide; the first cell (the title and "What you will learn")
  is the title slide, whole when it fits, else cut at its list items;
- the rest fills the slide in order; a cell that does not fit starts a sub-slide, and so
  does a lone heading or a text ending with ":" whose next cell would not fit under it;
- an output of a status line or two stays with its code; a longer one goes below its code
  if it fits, else to a sub-slide of its own; after a plot (shown as large as the slide
  allows) the next cell starts a sub-slide;
- the scheme cell (tag `scheme`) shows its picture only (tools.slide_layout);
- left out (`skip`): the parameters cell (tag `parameters`), bookkeeping and self-check
  plumbing: a code cell whose every line saves, records or tears down (`save_run(`,
  `save_results(`, `records.append(`, `records = [...]`, `cluster.stop()`), a code cell that
  builds a self-check (`Report(`, a line starting `report(`), a markdown cell that
  introduces one (tag `shared:self-check` or text starting `**Self-check.**`), and the
  "Save and tear down" section;
- an exercise starts a sub-slide at the markdown cell that asks it; its answer (tagged
  `solution`) and the cells that check it (tools.exercises) go to the speaker notes.

A statement taller than a slide cannot be cut without cutting it: `--write` and `--check`
name its cell, to be rewritten shorter (never split, never scrolled).
`--check` exits 1 naming each notebook whose marks are missing or differ from what
`--write` would write (a second `--write` changes nothing).
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

import nbformat

from tools.exercises import check_cells, is_solution
from tools.slide_layout import (CELL_PAD_PX, LIST_ITEM, PACK_MAX_PX, PLOT_MIN_PX, PLOT_PAD_PX,
                                SCHEME_TAG, SHORT_OUTPUT_PX, SLIDE_PX, TITLE_PX, TOP_PX,
                                code_height,
                                guess_output, md_height, measured_output, source_pieces,
                                table_head)

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
THUMBNAIL_TAG = "thumbnail"
def thumbnails() -> dict[str, str]:
    """The page's picture, per notebook (notebooks/series.toml's `thumbnail`): the id of the
    code cell whose plot shows what each rank holds (or did), normally the result plot."""
    from tools import series

    return {stem: entry.thumbnail for stem, entry in series.load(NOTEBOOK_DIR).items()}

PLUMBING = re.compile(r"(?:save_run\(|save_results\(|records\s*(?:\.append\(|\.extend\(|\+=|"
                      r"=\s*\[)|cluster\.stop\(\))")
SELF_CHECK = re.compile(r"\bReport\(|^report\(", flags=re.M)
HEADING = re.compile(r"^#{1,2} ")


# --------------------------------------------------------------------------- which cells
def is_plumbing(cell) -> bool:
    """Bookkeeping or self-check plumbing (the module's docstring has the rule)."""
    tags = cell.metadata.get("tags", [])
    if cell.cell_type == "markdown":
        return "shared:self-check" in tags or cell.source.lstrip().startswith("**Self-check.**")
    if SELF_CHECK.search(cell.source):
        return True
    try:
        statements = ast.parse(cell.source).body
    except SyntaxError:                 # a cell magic (%%px): taught code, kept
        return False
    return bool(statements) and all(PLUMBING.match(ast.get_source_segment(cell.source, s))
                                    for s in statements)


def roles(cells: list) -> dict[int, str]:
    """Per cell index: "skip", "notes" (an exercise's answer and check) or "ask" (the
    markdown that asks an exercise: it starts a sub-slide)."""
    found: dict[int, str] = {}
    tear_down = False
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown" and HEADING.match(cell.source.lstrip()):
            tear_down = ("shared:save-and-tear-down" in cell.metadata.get("tags", [])
                         or cell.source.lstrip().startswith("## Save and tear down"))
        if tear_down or "parameters" in cell.metadata.get("tags", []) or is_plumbing(cell):
            found[i] = "skip"
    for i, cell in enumerate(cells):
        if is_solution(cell):
            for j in [i, *check_cells(cells, i)]:
                found[j] = "notes"
            ask = next((j for j in range(i - 1, -1, -1) if cells[j].cell_type == "markdown"
                        and found.get(j) != "skip"), None)
            if ask is not None:
                found[ask] = "ask"
    return found


# --------------------------------------------------------------------------- cutting cells
def _magic(lines: list[str]) -> int:
    """1 where a cell magic (`%%px`) is the first line, else 0."""
    return 1 if lines and lines[0].startswith("%%") else 0


def _python(lines: list[str]) -> str:
    """Lines as Python: IPython's %/! lines read as `pass`, `x = %magic` as `x = None`."""
    return "\n".join(re.sub(r"^(\s*[\w, ]+=\s*)[%!].*$", r"\1None",
                            re.sub(r"^(\s*)[%!].*$", r"\1pass", ln)) for ln in lines)


def parses(lines: list[str]) -> bool:
    """Whether `lines` (a cell magic line first, or not) are whole statements."""
    try:
        ast.parse(_python(lines[_magic(lines):]))
    except SyntaxError:
        return False
    return True


def statement_starts(source: str) -> list[int]:
    """The lines (0-based) where a code cell may be cut: where one of its top-level
    statements starts, with the comment lines right above it; [] if it does not parse."""
    lines = source.split("\n")
    skip = _magic(lines)
    try:
        tree = ast.parse(_python(lines[skip:]))
    except SyntaxError:
        return []
    starts = set()
    for node in tree.body:
        at = node.lineno - 1 + skip
        while at - 1 > skip and lines[at - 1].strip().startswith("#"):
            at -= 1
        starts.add(at)
    return sorted(s for s in starts if s > skip)


def _md_starts(source: str, sentences: bool) -> list[int]:
    """The lines where markdown may be cut: a paragraph's or a list item's first line,
    outside code fences; with `sentences`, also a line after one that ends a sentence."""
    starts, fenced, lines = [], False, source.split("\n")
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            if fenced and i and not lines[i - 1].strip():
                starts.append(i)
            continue
        if fenced or not i or not line.strip():
            continue
        before = lines[i - 1].rstrip()
        row = line.lstrip().startswith("|") and bool(table_head(lines, i))
        if not before or LIST_ITEM.match(line) or row or (
                sentences and before.endswith((".", ";", ":")) and not row):
            starts.append(i)
    return starts


def piece_height(cell, text: str) -> int:
    """The estimated height of a piece of `cell`'s source on a slide."""
    if cell.cell_type == "code":
        return code_height(text) + CELL_PAD_PX if text.strip() else 0
    return md_height(text)


def breaks(cell, first_px: int, tail_px: int = 0) -> list[int]:
    """Where to cut `cell` so that each piece fits: the first in `first_px`, the others in
    SLIDE_PX, the last leaving `tail_px` for its short output. Greedy, at the allowed lines
    only (module docstring); a piece that cannot be cut small enough is left whole."""
    lines = cell.source.split("\n")
    if cell.cell_type == "code":
        allowed = statement_starts(cell.source)
        valid = lambda a, b: parses(lines[a:b])
    else:                       # never a piece of headings alone
        allowed = _md_starts(cell.source, sentences=False)
        valid = lambda a, b: any(ln.strip() and not ln.startswith("#") for ln in lines[a:b])
    height = lambda a, b: piece_height(cell, "\n".join(table_head(lines, a) + lines[a:b]))
    cuts, start, room = [], 0, first_px
    while height(start, len(lines)) + tail_px > room:
        ends = [e for e in allowed if e > start and valid(start, e) and valid(e, len(lines))]
        fitting = [e for e in ends if height(start, e) <= room]
        if not fitting and cell.cell_type != "code":     # at a sentence's end, else a line
            for more in (_md_starts(cell.source, sentences=True), range(1, len(lines))):
                more = [e for e in more if e > start and valid(start, e)
                        and valid(e, len(lines)) and lines[e].strip()]
                fitting = [e for e in more if height(start, e) <= room]
                ends = sorted(set(ends) | set(more))
                if fitting:
                    break
        if not ends:
            break
        end = fitting[-1] if fitting else ends[0]
        cuts.append(end)
        start, room = end, SLIDE_PX
    return cuts


def too_tall(cell, cuts: list[int]) -> list[int]:
    """The estimated heights of the pieces of `cell` (cut at `cuts`) taller than a slide:
    alone on its slide, a piece may end at PACK_MAX_PX, a little past the packing's SLIDE_PX."""
    return [h for h in (piece_height(cell, p) for p in source_pieces(cell.source, cuts))
            if h > PACK_MAX_PX - TOP_PX]


# --------------------------------------------------------------------------- the marks
def _outputs(cell, ran: dict, marks: dict) -> tuple[int, bool]:
    """(height, whether a plot) of a code cell's outputs: measured on its executed copy,
    else as written before, else guessed from its code; written into `marks`."""
    if cell.get("id") in ran:
        out_px, plot = measured_output(ran[cell.get("id")])
    elif "output_px" in cell.metadata.get("slides", {}):
        old = cell.metadata["slides"]
        out_px, plot = old["output_px"], bool(old.get("plot"))
    else:
        out_px, plot = guess_output(cell.source)
    if out_px or guess_output(cell.source)[0]:      # 0 kept where a guess is not 0
        marks.update({"output_px": out_px, **({"plot": True} if plot else {})})
    return out_px, plot


def _source_px(cell) -> int:
    """The height of a cell's source on a slide: none for the scheme cell's code."""
    if cell.cell_type == "code" and SCHEME_TAG in cell.metadata.get("tags", []):
        return 0
    return piece_height(cell, cell.source)


def plan(nb: nbformat.NotebookNode, executed: nbformat.NotebookNode | None = None,
         stem: str = "", cards: dict[str, str] | None = None) -> list[dict]:
    """Per cell of `nb`: its marks, {"slideshow": {...}, "slides": {...} or absent,
    "thumbnail": bool} (the module docstring has the rules); `cards`: `thumbnails()`,
    read here when not given."""
    ran = {c.get("id"): c for c in (executed.cells if executed else [])}
    card = (thumbnails() if cards is None else cards).get(stem, "") if stem else ""
    found, marked = roles(nb.cells), []
    sizes: list[tuple[int, int, bool]] = []          # per cell: source px, output px, plot
    for cell in nb.cells:
        slides: dict = {}
        marked.append({"slideshow": {"slide_type": found.get(len(marked), "-")},
                       "slides": slides, "thumbnail": bool(card) and cell.get("id") == card})
        out = _outputs(cell, ran, slides) if cell.cell_type == "code" else (0, False)
        sizes.append((_source_px(cell), *out))
    shown = [i for i in range(len(nb.cells)) if found.get(i) not in ("skip", "notes")]
    glued = lambda i: sizes[i][1] if 0 < sizes[i][1] <= SHORT_OUTPUT_PX and not sizes[i][2] else 0
    used, room = 0, TITLE_PX
    for n, i in enumerate(shown):
        cell, (src_px, out_px, plot), slides = nb.cells[i], sizes[i], marked[i]["slides"]
        whole = src_px + glued(i)
        after = 0
        if _leads(cell) and n + 1 < len(shown):     # keep a lead-in with what it leads to
            j = shown[n + 1]
            after = sizes[j][0] + glued(j) if sizes[j][0] + glued(j) + whole <= SLIDE_PX \
                else min(sizes[j][0], 150)
        if n == 0:
            kind = "slide"
        elif cell.cell_type == "markdown" and HEADING.match(cell.source.lstrip()):
            kind, used, room = "slide", 0, SLIDE_PX
        elif found.get(i) == "ask" or used + whole + after > room:
            kind, used, room = "subslide", 0, SLIDE_PX
        else:
            kind = "-"
        marked[i]["slideshow"]["slide_type"] = kind
        cuts = breaks(cell, room - used, glued(i)) if src_px else []
        if cuts:
            slides["breaks"] = cuts
            last = source_pieces(cell.source, cuts)[-1]
            used, room = piece_height(cell, last), SLIDE_PX
        else:
            used += src_px
        used += glued(i)
        rest = out_px - glued(i)
        if rest:
            needed = PLOT_MIN_PX + PLOT_PAD_PX if plot else min(rest, SLIDE_PX)
            if used + needed > room:
                slides["output"] = "subslide"
                used, room = 0, SLIDE_PX
            used = room if plot or rest > SLIDE_PX else used + rest
    for mark in marked:
        if not mark["slides"]:
            del mark["slides"]
    return marked


def _leads(cell) -> bool:
    """A markdown cell that introduces the next: a lone heading, or text ending with ":"."""
    text = cell.source.strip()
    return cell.cell_type == "markdown" and (text.endswith(":") or (
        text.startswith("#") and "\n" not in text))


def _declared(cell: dict) -> dict:
    meta = cell.get("metadata", {})
    mark = {"slideshow": meta.get("slideshow"), "slides": meta.get("slides"),
            "thumbnail": THUMBNAIL_TAG in meta.get("tags", [])}
    return {k: v for k, v in mark.items() if v is not None}


def apply(raw: dict, marks: list[dict]) -> None:
    """Write `marks` into the notebook `raw` (its JSON, as loaded), other keys untouched."""
    for cell, mark in zip(raw["cells"], marks):
        meta = cell.setdefault("metadata", {})
        meta["slideshow"] = mark["slideshow"]
        if "slides" in mark:
            meta["slides"] = mark["slides"]
        else:
            meta.pop("slides", None)
        tags = [t for t in meta.get("tags", []) if t != THUMBNAIL_TAG]
        tags += [THUMBNAIL_TAG] if mark["thumbnail"] else []
        if tags:
            meta["tags"] = tags
        else:
            meta.pop("tags", None)


def tall_cells(nb: nbformat.NotebookNode, marks: list[dict]) -> list[str]:
    """The shown cells with a piece taller than a slide (a statement or a paragraph that
    cannot be cut): "id (N px)" each, to be rewritten shorter."""
    tall = []
    for cell, mark in zip(nb.cells, marks):
        if mark["slideshow"]["slide_type"] in ("skip", "notes") or not _source_px(cell):
            continue
        over = too_tall(cell, mark.get("slides", {}).get("breaks", []))
        if over:
            tall.append(f"{cell.get('id')} ({max(over)} px)")
    return tall


def problems(path: Path, executed_dir: Path | None = None,
             cards: dict[str, str] | None = None) -> tuple[dict, list[str]]:
    """The notebook at `path` with its marks as `--write` makes them, and what is wrong
    with it: marks missing or stale, a card's cell that is not there, a cell that does not
    fit its slides whatever the cuts. `cards`: `thumbnails()`, read here when not given."""
    cards = thumbnails() if cards is None else cards
    raw = json.loads(path.read_text())
    nb = nbformat.reads(json.dumps(raw), as_version=4)
    executed = None
    if executed_dir is not None and (executed_dir / path.name).is_file():
        executed = nbformat.read(executed_dir / path.name, as_version=4)
    marks = plan(nb, executed, path.stem, cards)
    wrong = []
    card = cards.get(path.stem)
    if card is None:
        wrong.append(f"{path.name}: no figure chosen for its card (notebooks/series.toml)")
    elif not any(m["thumbnail"] for m in marks):
        wrong.append(f"{path.name}: no cell {card!r} for its card (notebooks/series.toml)")
    tall = tall_cells(nb, marks)
    if tall:
        wrong.append(f"{path.name}: cells {', '.join(tall)} are taller than a slide "
                     f"({PACK_MAX_PX - TOP_PX} px) between any two of their statements: "
                     "rewrite them shorter")
    missing = [i for i, c in enumerate(raw["cells"])
               if "slide_type" not in c.get("metadata", {}).get("slideshow", {})]
    if missing:
        wrong.append(f"{path.name}: cells {missing} have no slide marks")
    stale = [i for i, (c, m) in enumerate(zip(raw["cells"], marks))
             if i not in missing and _declared(c) != m]
    if stale:
        wrong.append(f"{path.name}: the marks of cells {stale[:10]} are stale")
    apply(raw, marks)
    return raw, wrong


def notebooks(paths: list[Path]) -> list[Path]:
    """The numbered notebooks named, or in the folders named (by default notebooks/)."""
    found = []
    for path in paths or [NOTEBOOK_DIR]:
        found += sorted(path.glob("[0-9]*.ipynb")) if path.is_dir() else [path]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write the marks")
    mode.add_argument("--check", action="store_true", help="exit 1 if any is missing or stale")
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks or folders "
                        "(default: notebooks/)")
    parser.add_argument("--executed", type=Path, help="executed copies (output sizes)")
    args = parser.parse_args(argv)
    failed = False
    cards = thumbnails()          # series.toml read once for every notebook
    for path in notebooks(args.paths):
        raw, wrong = problems(path, args.executed, cards)
        if args.write:
            text = json.dumps(raw, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
            if text != path.read_text():
                path.write_text(text)
                print(f"{path}: marks written")
            wrong = [w for w in wrong if "stale" not in w and "no slide marks" not in w]
        for line in wrong:
            print(line, file=sys.stderr)
        failed = failed or bool(wrong)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
