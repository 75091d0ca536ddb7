"""A deck laid out from the slide marks its notebook declares (tools.slide_marks writes them).

Nothing here decides from the cells' text where a slide breaks: each cell's standard
`metadata.slideshow.slide_type` ("slide", "subslide", "-", "skip", "notes") and, where a
cell is cut, its `metadata.slides`: `breaks` (the source lines where a sub-slide starts:
between whole top-level statements in code, between paragraphs or list items in markdown)
and `output: "subslide"` (its outputs start a sub-slide of their own). The scheme cell (tag
`scheme`) shows its picture without its code, as the page does. The build applies the
marks to the executed notebook and measures only what the committed notebook cannot
declare, its outputs, by plain rules:

- a plot is shown as large as the room left on its slide allows (at most PLOT_MAX_SCALE ×
  its own size);
- text taller than a slide is cut into pages of whole lines, each its own sub-slide; a page
  never ends on a lone `[stdout:N]` line and the last page is never a lone line;
- an output that does not fit the room left below its code goes to a sub-slide of its own,
  and a short one (a status line) takes its code's last piece with it; a cell's piece
  that no longer fits because an output above it ran taller than its marks declared
  (`output_px`) starts a sub-slide too.

The heights are estimates on a 1280×720 slide (tools/templates/projector: text 24 px, code
20 px), packed to TOP_PX + SLIDE_PX (≤ PACK_MAX_PX of 720), so that another machine's
fonts still fit (tests/support/slides.py holds every measured slide to 720 − MARGIN_PX).
"""
from __future__ import annotations

import ast
import base64
import copy
import html
import math
import re
import struct
import unicodedata

import nbformat

TOP_PX = 16               # the slide's padding above its content (templates/projector)
SLIDE_PX = 650            # what a slide's content is packed to: it ends by TOP_PX + SLIDE_PX
TITLE_PX = 590            # the title slide, less the series bar above it
PACK_MAX_PX = 690         # the packing's bottom: at most this of the slide's 720 px
MARGIN_PX = 20            # a slide measured in Chromium ends at most 720 − MARGIN_PX
TEXT_LINE_PX, TEXT_CHARS = 34, 92     # 24 px text, ~1,200 px wide (~105 characters)
CODE_LINE_PX, CODE_CHARS = 26, 90     # 20 px code at line height 1.3: 26 px exactly, wrapped
CELL_PAD_PX = 28        # a code cell's padding and border (27 px measured)
PLOT_MIN_PX, PLOT_MAX_SCALE = 330, 1.25
PLOT_PAD_PX = 70          # a plot's output area around its image (68 px measured)
PLOT_WIDTH_PX = 1180
SHORT_OUTPUT_PX = 2 * CODE_LINE_PX + 20   # a status line or two: never a slide of its own
STDOUT_HEAD = re.compile(r"^\[(?:stdout|stderr|output|error):\d+\]\s*$")
SCHEME_TAG = "scheme"     # tools.pages: the picture under the title, shown without its code
PLOTS = re.compile(   # a cell that draws (guess_output)
    r"\b(?:plot_\w*|draw_\w*|show_animation|animate_\w*)\(|^diagram\s*$", re.M)
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.) ")


def _plain(markdown: str) -> str:
    """The text a line of markdown shows: links' text, no emphasis or code marks."""
    return re.sub(r"[*`]", "", re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown)).strip()


def columns(text: str) -> int:
    """How many characters wide `text` is: a Chinese character (East Asian wide or full
    width) takes two, as it does in the slides' fonts."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _row_height(cells: list[str], chars: int, line_px: int) -> int:
    """A table row's height: its tallest cell, wrapped in an equal share of the width."""
    share = max(chars // max(len(cells), 1) - 2, 4)
    return max(math.ceil(max(columns(c), 1) / share) for c in cells) * line_px + 10


def _md_lines(block: str) -> list[str]:
    """A markdown block's rendered lines before wrapping: a paragraph's or a list item's
    source lines joined (authors wrap them at 90 characters; the slide rewraps them)."""
    joined: list[str] = []
    for line in block.splitlines():
        alone = (line.lstrip().startswith(("#", "|", "```")) or LIST_ITEM.match(line)
                 or not joined or joined[-1].lstrip().startswith(("#", "|", "```")))
        if alone:
            joined.append(line)
        else:
            joined[-1] += " " + line.strip()
    return joined


def md_height(text: str) -> int:
    """Estimated height of rendered markdown: paragraphs wrapped, lists, fences, tables."""
    height, fenced = 0, False
    for block in re.split(r"\n\s*\n", text.strip()):
        for line in (block.splitlines() if "```" in block else _md_lines(block)):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                height += 8
                continue
            if fenced:
                height += CODE_LINE_PX
            elif line.startswith("#"):
                height += 70 if line.startswith("# ") else 58
            elif line.lstrip().startswith("|"):
                if not re.match(r"^\s*\|[\s:|-]+\|\s*$", line):
                    cells = [_plain(c) for c in line.strip().strip("|").split("|")]
                    height += _row_height(cells, TEXT_CHARS, TEXT_LINE_PX)
            else:
                height += math.ceil(max(columns(_plain(line)), 1) / TEXT_CHARS) * TEXT_LINE_PX
        height += 16                                     # the paragraph's margin
    return height


def code_height(text: str) -> int:
    """Estimated height of `text` as code: its lines, wrapped."""
    lines = text.expandtabs(8).rstrip("\n").split("\n")
    return sum(math.ceil(max(len(line), 1) / CODE_CHARS) for line in lines) * CODE_LINE_PX


def png_size(data: str) -> tuple[int, int]:
    """(width, height) of a base64 PNG, from its header."""
    head = base64.b64decode(data[:44])
    return struct.unpack(">II", head[16:24])


def html_height(markup: str) -> int:
    """Estimated height of an HTML output (tables, reports): its lines as code, the lines
    taller by a table row's padding."""
    rows = 0
    for row in re.findall(r"<tr\b.*?</tr>", markup, flags=re.S):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
                 for c in re.findall(r"<t[dh]\b[^>]*>(.*?)</t[dh]>", row, flags=re.S)]
        # short cells do not wrap (_unbroken), so a header shares what is left: half, say
        rows += _row_height(cells, CODE_CHARS // (2 if "<th" in row else 1), CODE_LINE_PX)
    rest = re.sub(r"<table\b.*?</table>", "", markup, flags=re.S)
    text = re.sub(r"<br\s*/?>|</(?:p|li|h\d|summary|div|caption)>", "\n", rest)
    text = html.unescape(re.sub(r"<[^>]+>", "", text)).strip("\n")
    return rows + (code_height(text) if text.strip() else 0) + 20


def _unbroken(markup: str) -> str:
    """Short table cells kept on one line: a browser breaks "ZeRO-1" at its hyphen."""
    return re.sub(r"<td>([^<]{1,14})</td>", r'<td style="white-space:nowrap">\1</td>', markup)


def _html_pages(markup: str, room_px: int) -> list[str]:
    """An HTML output too tall for `room_px` in pages: a table's rows (each page with the
    table's head), a report's (<pre>) lines; anything else whole."""
    if html_height(markup) <= room_px:
        return [markup]
    body = re.search(r"(<tbody[^>]*>)(.*?)(</tbody>)", markup, flags=re.S)
    report = re.fullmatch(r"(<pre[^>]*>)(.*)(</pre>)\s*", markup, flags=re.S)
    if body is not None and markup.count("<table") == 1:
        head, tail = markup[:body.end(1)], markup[body.start(3):]
        rows = re.findall(r"<tr\b.*?</tr>", body.group(2), flags=re.S)
    elif report is not None:
        head, tail = report.group(1), report.group(3)
        rows = [line for line in re.split(r"(?<=</span>)|(?<=\n)(?!</span>)", report.group(2))
                if line]
    else:
        return [markup]
    pages, group = [], []
    for row in rows:
        if group and html_height(head + "".join(group + [row]) + tail) > room_px:
            pages.append(head + "".join(group) + tail)
            group = []
        group.append(row)
    return pages + [head + "".join(group) + tail]


def output_text(out: nbformat.NotebookNode) -> str | None:
    """The text an output shows as lines (stream, plain text, traceback); None otherwise."""
    if out.output_type == "stream":
        return out.text
    if out.output_type == "error":
        return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(out.traceback))
    data = out.get("data", {})
    if not {"image/png", "text/html", "text/markdown"} & set(data) and "text/plain" in data:
        return data["text/plain"]
    return None


def table_head(lines: list[str], at: int) -> list[str]:
    """A markdown table's header and rule lines, where line `at` is a row of its body;
    else []."""
    top = at
    while top > 0 and lines[top - 1].lstrip().startswith("|"):
        top -= 1
    return lines[top:top + 2] if at >= top + 2 and lines[at].lstrip().startswith("|") else []


def source_pieces(source: str, breaks: list[int]) -> list[str]:
    """`source` cut before each line in `breaks` (0-based line numbers); a piece that starts
    inside a markdown table is led by the table's header."""
    lines = source.split("\n")
    cuts = [0, *sorted(b for b in breaks if 0 < b < len(lines)), len(lines)]
    return ["\n".join(table_head(lines, a) + lines[a:b]).strip("\n")
            for a, b in zip(cuts, cuts[1:])]


def text_pages(text: str, room_px: int) -> list[str]:
    """`text` in pages of whole lines, each at most `room_px` high as code; no page ends on
    a lone `[stdout:N]` line, and a last page of one line takes a line from the page
    before (no slide of a lone status line)."""
    pages: list[list[str]] = [[]]
    for line in text.rstrip("\n").split("\n"):
        page = pages[-1]
        if page and code_height("\n".join(page + [line])) > room_px:
            carried = []
            while len(page) > 1 and STDOUT_HEAD.match(page[-1]):
                carried.insert(0, page.pop())
            pages.append(carried)
        pages[-1].append(line)
    if len(pages) > 1 and len([ln for ln in pages[-1] if not STDOUT_HEAD.match(ln)]) <= 1:
        while len(pages[-2]) > 1 and len(pages[-1]) < 3:
            pages[-1].insert(0, pages[-2].pop())
    return ["\n".join(page) + "\n" for page in pages]


class Piece:
    """One thing on a slide: a cell, or part of one; its height, its slide type, and for a
    plot its PNG's (width, height)."""

    def __init__(self, cell, height: int, kind: str = "-",
                 plot: tuple[int, int] | None = None) -> None:
        self.cell, self.height, self.kind, self.plot = cell, height, kind, plot


def _output_cell(cell, outputs: list) -> nbformat.NotebookNode:
    part = copy.deepcopy(cell)
    part.outputs = outputs
    part.metadata.setdefault("transient", {})["remove_source"] = True
    part.metadata.pop("slides", None)
    part.pop("id", None)
    return part


def output_pieces(cell, room_px: int = SLIDE_PX - CELL_PAD_PX) -> list[Piece]:
    """A code cell's outputs as pieces: text and tables in pages (each page after the first
    a sub-slide), plots, markdown; each with its estimated height."""
    pieces = []
    for out in cell.get("outputs", []):
        text, data = output_text(out), out.get("data", {})
        pages: list[tuple[nbformat.NotebookNode, int]] = []
        if text is not None:
            for page in text_pages(text, room_px):
                part = copy.deepcopy(out)
                if out.output_type == "stream":
                    part.text = page
                elif out.output_type == "error":
                    part.traceback = page.rstrip("\n").split("\n")
                else:
                    part.data = {"text/plain": page}
                pages.append((part, code_height(page) + 20))
        elif "image/png" in data:
            pieces.append(Piece(_output_cell(cell, [out]), PLOT_MIN_PX + PLOT_PAD_PX, "-",
                                png_size(data["image/png"])))
        elif "text/html" in data:
            for page in _html_pages(data["text/html"], room_px):
                part = copy.deepcopy(out)
                part.data = {"text/html": _unbroken(page)}
                pages.append((part, html_height(page)))
        elif "text/markdown" in data:
            pages.append((out, md_height(data["text/markdown"])))
        pieces += [Piece(_output_cell(cell, [part]), height, "subslide" if n else "-")
                   for n, (part, height) in enumerate(pages)]
    return pieces


def cell_pieces(cell) -> list[Piece]:
    """`cell` cut where its marks say: its source at `slides.breaks` (each later piece a
    sub-slide; none for the scheme cell), then its outputs (the first a sub-slide with
    `slides.output`)."""
    kind = cell.metadata.get("slideshow", {}).get("slide_type", "-")
    marks = cell.metadata.get("slides", {})
    pieces = []
    hidden = cell.cell_type == "code" and SCHEME_TAG in cell.metadata.get("tags", [])
    for n, text in enumerate([] if hidden else source_pieces(cell.source,
                                                             marks.get("breaks", []))):
        part = copy.deepcopy(cell)
        part.source = text
        part.metadata.pop("slides", None)
        part.pop("id", None)
        if cell.cell_type == "code":
            part.outputs = []
            if cell.source.startswith("%%px"):
                part.metadata["magics_language"] = "python"
            height = code_height(text) + CELL_PAD_PX
        else:
            height = md_height(text)
        if text.strip() or cell.cell_type == "markdown":
            pieces.append(Piece(part, height, kind if n == 0 else "subslide"))
    if cell.cell_type == "code":
        outputs = output_pieces(cell)
        if outputs and marks.get("output") == "subslide":
            outputs[0].kind = "subslide"
        if not pieces and outputs:
            outputs[0].kind = kind if outputs[0].kind == "-" else outputs[0].kind
        pieces += outputs
    return pieces


def _plot_px(piece: Piece, room_left: int) -> int:
    """The height a plot is shown at: as large as the room left allows, up to its own size
    × PLOT_MAX_SCALE and the slide's width."""
    width, natural = piece.plot
    largest = natural * PLOT_MAX_SCALE, natural * PLOT_WIDTH_PX / width, SLIDE_PX - PLOT_PAD_PX
    return max(int(min(*largest, room_left - PLOT_PAD_PX)), 120)


def _tail(pieces: list[Piece], n: int) -> int:
    """The room a plot leaves for what follows it in its cell, when that is short (its
    caption, say)."""
    after = sum(p.height for p in pieces[n + 1:])
    return after if after <= 2 * SHORT_OUTPUT_PX else 0


def layout(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of `nb` cut as its marks declare, for reveal.js: one cell per piece, each with
    its slide type; the speaker notes and skipped cells as they are."""
    nb = copy.deepcopy(nb)
    cells, used, room, title, started = [], 0, TITLE_PX, True, False
    for cell in nb.cells:
        kind = cell.metadata.get("slideshow", {}).get("slide_type", "-")
        if kind in ("skip", "notes"):
            cells.append(cell)
            continue
        pieces = cell_pieces(cell)
        for n, piece in enumerate(pieces):
            if not started:
                piece.kind, started = "slide", True
            is_output = piece.cell.metadata.get("transient", {}).get("remove_source")
            needed = piece.height + (_tail(pieces, n) if piece.plot else 0)
            if piece.kind == "-" and used + needed > room:
                piece.kind = "subslide"          # measured: it does not fit below its code
                if is_output and piece.height <= SHORT_OUTPUT_PX and n \
                        and pieces[n - 1].kind == "-" \
                        and not pieces[n - 1].cell.metadata.get("transient"):
                    pieces[n - 1].kind = "subslide"   # a status line keeps its code
                    pieces[n - 1].cell.metadata["slideshow"] = {"slide_type": "subslide"}
                    piece.kind = "-"
                    used, room, title = pieces[n - 1].height, SLIDE_PX, False
            if piece.kind in ("slide", "subslide"):
                room = TITLE_PX if title and piece.kind == "slide" else SLIDE_PX
                title, used = False, 0
            height = piece.height
            if piece.plot:
                width, natural = piece.plot
                height = _plot_px(piece, room - used - _tail(pieces, n))
                meta = piece.cell.outputs[0].setdefault("metadata", {})
                meta.setdefault("image/png", {})["width"] = int(height * width / natural)
                height += PLOT_PAD_PX
            piece.cell.metadata["slideshow"] = {"slide_type": piece.kind}
            piece.cell.id = f"{cell.get('id', 'cell')}-{n}"
            cells.append(piece.cell)
            used += height
    nb.cells = cells
    return nb


# ------------------------------------------------ output sizes, for tools.slide_marks
def guess_output(source: str) -> tuple[int, bool]:
    """An estimate of a code cell's outputs from its code, where no executed copy says:
    (height in px, whether a plot)."""
    if PLOTS.search(source):
        return PLOT_MIN_PX + PLOT_PAD_PX, True
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
