"""Slide marks: `python -m tools.slide_marks --write|--check [folder] [--executed DIR]`.

Where each notebook's deck breaks is decided here, once, and written into the notebook,
where it is reviewed in the diff; tools.slide_layout builds the deck from those marks only.
Per cell: the standard `metadata.slideshow.slide_type` ("slide", "subslide", "-", "skip",
"notes") and, where needed, `metadata.slides`:
- `breaks`: the source lines (0-based) where a cell too tall for its slide is cut, each
  piece a sub-slide. Code is cut only between whole statements (`ast`: every piece, once
  dedented, parses; a `%%px` line stays with the first piece); markdown between paragraphs
  or list items.
- `output: "subslide"`: the cell's outputs start a sub-slide of their own.
- `output_px` (and `plot`): the estimated height of its outputs, from an executed copy
  (`--executed`) or, for a cell without one, from its code (an estimate); kept as written
  when no executed copy is given, so `--check` is the same on every machine.
And the code cell whose first PNG is the page's picture (its index card) is tagged
`thumbnail` (THUMBNAILS).

The rules, packed to tools.slide_layout.SLIDE_PX (TITLE_PX on the title slide):
- a `#`/`##` heading starts a slide; the first cell is the title slide, its "What you will
  learn" bullets on it (as many as fit; the rest on the sub-slide below);
- the rest fills the slide in order; a cell that does not fit starts a sub-slide;
- an output (a status line or two) that is short stays with its code; a longer one goes
  below its code if it fits, else to a sub-slide of its own; after a plot (shown as large
  as the slide allows) the next cell starts a sub-slide;
- bookkeeping and self-check plumbing is left out (`skip`): a code cell whose every line
  saves, records or tears down (`save_run(`, `save_results(`, `records.append(`,
  `records = [...]`, `cluster.stop()`), a code cell that builds a self-check (`Report(`,
  a line starting `report(`), a markdown cell that introduces one (tag `shared:self-check`
  or text starting `**Self-check.**`), the "Save and tear down" section, and a cell an
  author marked `skip`;
- an exercise starts a sub-slide at the markdown cell that asks it; its answer (tagged
  `solution`) and the cells that check it (tools.exercises) go to the speaker notes.

`--check` exits 1 naming each notebook whose marks are missing or differ from what
`--write` would write (a second `--write` changes nothing).
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import textwrap
from pathlib import Path

import nbformat

from tools.exercises import check_cells, is_solution
from tools.slide_layout import (CELL_PAD_PX, PLOT_MIN_PX, SHORT_OUTPUT_PX,
                                SLIDE_PX, TITLE_PX, code_height, md_height, output_pieces)

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
THUMBNAIL_TAG = "thumbnail"
# The page's picture, per notebook: the id of the code cell whose plot shows what each rank
# holds (or did), normally the result plot. None: the notebook has no such figure yet.
THUMBNAILS: dict[str, str | None] = {
    "00_ranks_and_world": "c16", "01_scatter": "c09", "02_gather": "c09",
    "03_broadcast": "c09", "04_reduce": "c09", "05_all_reduce": "c09",
    "06_all_gather": "c09", "07_reduce_scatter": "c09", "08_all_to_all": "c09",
    "09_send_recv": "c09", "10_ring_all_reduce": "c20", "11_bandwidth": "c13",
    "12_backend_support": "c16", "13_debugging": "c37b", "14_groups_and_meshes": "c15",
    "15_data_parallel": "c10", "16_zero_fsdp": "c26", "17_tensor_parallel": "cell-12",
    "18_pipeline_parallel": "cell-16", "19_two_d_parallel": "cell-19",
    "20_tensor_sequence_parallel": "c18", "21_context_parallel": "cell-25",
    "22_expert_parallel": "cell-24", "23_accumulation_compression": "cell-16",
    "24_pipeline_schedules": "timelines", "25_algorithms": "c27",
    "26_checkpoints_failures": "cell-21", "27_planning": "p27-per-rank-code",
}

PLUMBING = re.compile(r"(?:save_run\(|save_results\(|records\s*(?:\.append\(|\.extend\(|\+=|"
                      r"=\s*\[)|cluster\.stop\(\))")
SELF_CHECK = re.compile(r"\bReport\(|^report\(", flags=re.M)
HEADING = re.compile(r"^#{1,2} ")
PLOTS = re.compile(r"\b(?:plot_\w*|draw_\w*|show_animation|animate_\w*)\(|^diagram\s*$", re.M)
LIST_ITEM = re.compile(r"^(?:[-*+]|\d+\.) ")


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
        kind = cell.metadata.get("slideshow", {}).get("slide_type")
        if tear_down or kind == "skip" or is_plumbing(cell):
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
def _parses(lines: list[str]) -> bool:
    """Whether `lines` are whole statements: dedented, IPython's %/! lines read as `pass`."""
    text = "\n".join(re.sub(r"^(\s*)[%!].*$", r"\1pass", ln) for ln in lines)
    try:
        ast.parse(textwrap.dedent(text))
    except SyntaxError:
        return False
    return True


def statement_starts(source: str, top: bool = False) -> list[int]:
    """The lines (0-based) where a code cell may be cut: where a statement starts, at any
    depth (`top`: of the cell itself only), together with the comment lines right above
    it; [] if it does not parse."""
    lines = source.split("\n")
    skip = 1 if lines[0].startswith("%%") else 0
    body = [re.sub(r"^(\s*)[%!].*$", r"\1pass", ln) for ln in lines[skip:]]
    try:
        tree = ast.parse("\n".join(body))
    except SyntaxError:
        return []
    starts = set()
    for node in (tree.body if top else ast.walk(tree)):
        if isinstance(node, ast.stmt):
            at = node.lineno - 1 + skip
            while at - 1 > skip and lines[at - 1].strip().startswith("#"):
                at -= 1
            starts.add(at)
    return sorted(s for s in starts if s > skip)


def _md_starts(source: str) -> list[int]:
    """The lines where markdown may be cut: a paragraph's or a list item's first line,
    outside code fences."""
    starts, fenced, lines = [], False, source.split("\n")
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            if fenced and i and not lines[i - 1].strip():
                starts.append(i)
            continue
        if not fenced and i and line.strip() and (not lines[i - 1].strip()
                                                  or LIST_ITEM.match(line)):
            starts.append(i)
    return starts


def breaks(cell, first_px: int, tail_px: int = 0) -> list[int]:
    """Where to cut `cell` so that each piece fits: the first in `first_px`, the others in
    SLIDE_PX, the last leaving `tail_px` for its short output. Greedy, at the allowed lines
    only; a piece that cannot be cut small enough is left whole (too tall). Code: every
    piece must be whole statements; if cutting inside bodies cannot give that, only
    between the cell's top-level statements, else not at all."""
    if cell.cell_type != "code":
        return _greedy(cell, _md_starts(cell.source), first_px, tail_px)
    lines = cell.source.split("\n")
    skip = 1 if lines[0].startswith("%%") else 0
    for allowed in (statement_starts(cell.source), statement_starts(cell.source, top=True)):
        cuts = _greedy(cell, allowed, first_px, tail_px)
        ends = [*cuts, len(lines)]
        if all(_parses(lines[max(a, skip):b]) for a, b in zip([0, *cuts], ends)):
            return cuts
    return []


def _greedy(cell, allowed: list[int], first_px: int, tail_px: int) -> list[int]:
    """`breaks` at the `allowed` lines: each piece as tall as fits."""
    lines = cell.source.split("\n")
    code = cell.cell_type == "code"
    if code:
        skip = 1 if lines[0].startswith("%%") else 0
        valid = lambda a, b: _parses(lines[max(a, skip):b])
        height = lambda a, b: code_height("\n".join(lines[a:b]).strip("\n")) + CELL_PAD_PX
    else:                       # never a piece of headings alone
        valid = lambda a, b: any(ln.strip() and not ln.startswith("#") for ln in lines[a:b])
        height = lambda a, b: md_height("\n".join(lines[a:b]))
        sentences = [i for i in range(1, len(lines)) if lines[i - 1].rstrip().endswith(".")
                     and lines[i].strip() and i not in allowed]
    cuts, start, room = [], 0, first_px
    while height(start, len(lines)) + tail_px > room:
        ends = [e for e in allowed if e > start and valid(start, e) and any(
            valid(e, f) for f in [*allowed, len(lines)] if f > e)]
        fitting = [e for e in ends if height(start, e) <= room]
        if not fitting and not code:     # a paragraph taller than a slide: at a sentence
            ends = sorted(ends + [e for e in sentences if e > start and valid(start, e)])
            fitting = [e for e in ends if height(start, e) <= room]
        if not ends:
            break
        end = fitting[-1] if fitting else ends[0]
        cuts.append(end)
        start, room = end, SLIDE_PX
    return cuts


# --------------------------------------------------------------------------- outputs
def guess_output(source: str) -> tuple[int, bool]:
    """An estimate of a code cell's outputs from its code, where no executed copy says:
    (height in px, whether a plot)."""
    if PLOTS.search(source):
        return PLOT_MIN_PX + 10, True
    ranks = 4 if source.startswith("%%px") else 1
    lines = ranks * len(re.findall(r"\bprint\(", source)) + (ranks if ranks > 1 else 0)
    lines += 6 * len(re.findall(r"\b(?:report|grade|show)\(", source))
    try:
        body = ast.parse(re.sub(r"^%.*$", "", source, flags=re.M)).body
    except SyntaxError:
        body = []
    if body and isinstance(body[-1], ast.Expr) and not (
            isinstance(body[-1].value, ast.Call) and getattr(body[-1].value.func, "id", "")
            == "print"):
        lines += 3
    return (code_height("\n" * (lines - 1)) + 20 if lines else 0), False


def measured_output(cell) -> tuple[int, bool]:
    """(estimated height, whether a plot) of an executed cell's outputs."""
    pieces = output_pieces(cell)
    return sum(p.height for p in pieces), any(p.plot for p in pieces)


# --------------------------------------------------------------------------- the marks
def plan(nb: nbformat.NotebookNode, executed: nbformat.NotebookNode | None = None,
         stem: str = "") -> list[dict]:
    """Per cell of `nb`: its marks, {"slideshow": {...}, "slides": {...} or absent,
    "thumbnail": bool}."""
    ran = {c.get("id"): c for c in (executed.cells if executed else [])}
    found, marked = roles(nb.cells), []
    used, room, started = 0, TITLE_PX, False
    for i, cell in enumerate(nb.cells):
        role, slides = found.get(i), {}
        mark = {"slideshow": {"slide_type": role}, "slides": slides,
                "thumbnail": cell.get("id") == THUMBNAILS.get(stem, "") and bool(stem)}
        marked.append(mark)
        if cell.cell_type == "code":
            if cell.get("id") in ran:
                out_px, plot = measured_output(ran[cell.get("id")])
            elif "output_px" in cell.metadata.get("slides", {}):
                old = cell.metadata["slides"]
                out_px, plot = old["output_px"], bool(old.get("plot"))
            else:
                out_px, plot = guess_output(cell.source)
            if out_px or guess_output(cell.source)[0]:   # 0 kept where a guess is not 0
                slides.update({"output_px": out_px, **({"plot": True} if plot else {})})
        else:
            out_px, plot = 0, False
        if role in ("skip", "notes"):
            continue
        heading = cell.cell_type == "markdown" and HEADING.match(cell.source.lstrip())
        glued = out_px if out_px <= SHORT_OUTPUT_PX and not plot else 0
        whole = (code_height(cell.source) + CELL_PAD_PX if cell.cell_type == "code"
                 else md_height(cell.source)) if cell.source.strip() else 0
        if _leads(cell):                # a lone heading, or "...:": kept with what follows
            later = [c for j, c in enumerate(nb.cells[i + 1:], i + 1)
                     if found.get(j) not in ("skip", "notes")][:1]
            glued += min(sum(md_height(c.source) if c.cell_type == "markdown"
                             else code_height(c.source) + CELL_PAD_PX for c in later), 150)
        if not started or heading:
            kind, room, used = "slide", SLIDE_PX if started else TITLE_PX, 0
        elif role == "ask" or used + whole + glued > room and (
                whole + glued <= SLIDE_PX or room - used < SLIDE_PX // 3):
            kind, room, used = "subslide", SLIDE_PX, 0
        else:
            kind = "-"
        started = True
        cuts = breaks(cell, room - used, glued)
        if cuts:
            slides["breaks"] = cuts
            last = "\n".join(cell.source.split("\n")[cuts[-1]:])
            used, room = (code_height(last) + CELL_PAD_PX if cell.cell_type == "code"
                          else md_height(last)), SLIDE_PX
        else:
            used += whole
        used += glued if not _leads(cell) else 0
        mark["slideshow"]["slide_type"] = kind
        rest = out_px - glued
        if rest:
            needed = PLOT_MIN_PX + 10 if plot else min(rest, SLIDE_PX)
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


def problems(path: Path, executed_dir: Path | None = None) -> tuple[dict, list[str]]:
    """The notebook at `path` with its marks as `--write` makes them, and what is wrong
    with the marks it has now (missing, stale, a thumbnail cell that is not there)."""
    raw = json.loads(path.read_text())
    nb = nbformat.reads(json.dumps(raw), as_version=4)
    executed = None
    if executed_dir is not None and (executed_dir / path.name).is_file():
        executed = nbformat.read(executed_dir / path.name, as_version=4)
    marks = plan(nb, executed, path.stem)
    wrong = []
    if path.stem not in THUMBNAILS or THUMBNAILS[path.stem] is None:
        wrong.append(f"{path.name}: no figure chosen for its card (THUMBNAILS)")
    elif not any(m["thumbnail"] for m in marks):
        wrong.append(f"{path.name}: no cell {THUMBNAILS[path.stem]!r} for its card")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write the marks")
    mode.add_argument("--check", action="store_true", help="exit 1 if any is missing or stale")
    parser.add_argument("folder", nargs="?", type=Path, default=NOTEBOOK_DIR)
    parser.add_argument("--executed", type=Path, help="executed copies (output sizes)")
    args = parser.parse_args(argv)
    failed = False
    for path in sorted(args.folder.glob("[0-9]*.ipynb")):
        raw, wrong = problems(path, args.executed)
        if args.write:
            text = json.dumps(raw, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
            if text != path.read_text():
                path.write_text(text)
                print(f"{path}: marks written")
            wrong = [w for w in wrong if "THUMBNAILS" in w or "for its card" in w]
        for line in wrong:
            print(line, file=sys.stderr)
        failed = failed or bool(wrong)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
