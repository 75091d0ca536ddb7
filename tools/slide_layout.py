"""Where the slides of a deck break, computed from the executed notebook (tools.classroom).

The notebooks' own slideshow metadata is ignored, but for `skip`: a deck is laid out from
the cells themselves, so it stays right as the notebooks change. The rules:

- Every `#`/`##` heading starts a slide; what follows it fills that slide and then
  sub-slides below it, packed in order by an estimate of each piece's height on a
  1280×720 slide (the sizes of tools/templates/projector: text 24 px, code 20 px).
- A code cell is split into its code and each of its outputs, so a long cell's output
  goes to the next sub-slide; code or text output taller than a slide is cut into pages
  of whole lines, a markdown cell into whole paragraphs, each page its own sub-slide.
  Nothing is dropped: every line is on some slide.
- A plot is shown as large as the space left allows (at most PLOT_MAX_SCALE × its own
  size); below PLOT_MIN_PX high it goes to a sub-slide of its own.
- Bookkeeping and self-check plumbing is left out (`skip`): a code cell whose every line
  saves, records or tears down (`save_run(`, `save_results(`, `records.append(`,
  `records = [...]`, `cluster.stop()`), a code cell that builds a self-check (`Report(`,
  a line starting `report(`), a markdown cell that introduces one (tag `shared:self-check`
  or text starting `**Self-check.**`), and the "Save and tear down" section.
- An exercise starts a sub-slide of its own at the markdown cell that asks it; the
  answer (the cell tagged `solution`) and the cells that check it (tools.exercises) go to
  the speaker notes, so the question is projected without its answer.
- `%%px` cells are highlighted as Python.
"""
from __future__ import annotations

import ast
import base64
import copy
import html
import math
import re
import struct

import nbformat

from tools.exercises import check_cells, is_solution

SLIDE_PX = 640            # the height a slide's content may fill (720, less padding)
TITLE_PX = 560            # the title slide, less the series bar above it
TEXT_LINE_PX, TEXT_CHARS = 34, 88     # 24 px text, ~1,190 px wide
CODE_LINE_PX, CODE_CHARS = 27, 90     # 20 px code, wrapped
CELL_PAD_PX = 30
PLOT_MIN_PX, PLOT_MAX_SCALE = 330, 1.25
PLOT_WIDTH_PX = 1180

PLUMBING = re.compile(r"(?:save_run\(|save_results\(|records\s*(?:\.append\(|\.extend\(|\+=|"
                      r"=\s*\[)|cluster\.stop\(\))")
SELF_CHECK = re.compile(r"\bReport\(|^report\(", flags=re.M)
HEADING = re.compile(r"^#{1,2} ")


def _plain(markdown: str) -> str:
    """The text a line of markdown shows: links' text, no emphasis or code marks."""
    return re.sub(r"[*`]", "", re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown)).strip()


def _row_height(cells: list[str], chars: int, line_px: int) -> int:
    """A table row's height: its tallest cell, wrapped in an equal share of the width."""
    share = max(chars // max(len(cells), 1) - 2, 4)
    return max(math.ceil(max(len(c), 1) / share) for c in cells) * line_px + 10


def _md_height(text: str) -> int:
    """Estimated height of rendered markdown: paragraphs wrapped, lists, fences, tables."""
    height, fenced = 0, False
    for block in re.split(r"\n\s*\n", text.strip()):
        for line in block.splitlines():
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
                height += math.ceil(max(len(_plain(line)), 1) / TEXT_CHARS) * TEXT_LINE_PX
        height += 16                                     # the paragraph's margin
    return height


def _code_height(text: str) -> int:
    lines = text.expandtabs(8).rstrip("\n").split("\n")
    return sum(math.ceil(max(len(line), 1) / CODE_CHARS) for line in lines) * CODE_LINE_PX


def _png_size(data: str) -> tuple[int, int]:
    head = base64.b64decode(data[:44])
    return struct.unpack(">II", head[16:24])


def _html_height(markup: str) -> int:
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
    return rows + (_code_height(text) if text.strip() else 0) + 20


def _unbroken(markup: str) -> str:
    """Short table cells kept on one line: a browser breaks "ZeRO-1" at its hyphen."""
    return re.sub(r"<td>([^<]{1,14})</td>", r'<td style="white-space:nowrap">\1</td>', markup)


def _html_pages(markup: str, room_px: int) -> list[str]:
    """An HTML output too tall for `room_px` in pages: a table's rows (each page with the
    table's head), a report's (<pre>) lines; anything else whole."""
    if _html_height(markup) <= room_px:
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
        if group and _html_height(head + "".join(group + [row]) + tail) > room_px:
            pages.append(head + "".join(group) + tail)
            group = []
        group.append(row)
    return pages + [head + "".join(group) + tail]


def _output_text(out: nbformat.NotebookNode) -> str | None:
    """The text an output shows as lines (stream, plain text, traceback); None otherwise."""
    if out.output_type == "stream":
        return out.text
    if out.output_type == "error":
        return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(out.traceback))
    data = out.get("data", {})
    if not {"image/png", "text/html", "text/markdown"} & set(data) and "text/plain" in data:
        return data["text/plain"]
    return None


def _pages(text: str, room_px: int) -> list[str]:
    """`text` in pages of whole lines, each at most `room_px` high as code."""
    pages, page = [], []
    for line in text.rstrip("\n").split("\n"):
        if page and _code_height("\n".join(page + [line])) > room_px:
            pages.append("\n".join(page) + "\n")
            page = []
        page.append(line)
    return pages + ["\n".join(page) + "\n"]


def _fitting(parts: list[str], room_px: int, head: list[str] = ()) -> list[str]:
    """`parts` (lines or list items) grouped greedily into blocks at most `room_px` high,
    each block led by `head` (a table's header)."""
    blocks, group = [], []
    for part in parts:
        if group and _md_height("\n".join([*head, *group, part])) > room_px:
            blocks.append("\n".join([*head, *group]))
            group = []
        group.append(part)
    return blocks + ["\n".join([*head, *group])]


def _md_blocks(text: str) -> list[str]:
    """Markdown's paragraphs, those too tall for a slide cut: a table into pages of rows
    (its header repeated), a list at its items, what is still too tall at its lines."""
    room = SLIDE_PX - 60
    blocks = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = block.split("\n")
        if _md_height(block) <= room:
            blocks.append(block)
        elif block.lstrip().startswith("|"):
            blocks += _fitting(lines[2:], room, lines[:2])
        else:
            items = re.split(r"\n(?=(?:[-*+]|\d+\.) )", block)
            for group in _fitting(items, room):
                blocks += [group] if _md_height(group) <= room else _fitting(
                    group.split("\n"), room)
    return blocks


class _Piece:
    """One thing on a slide: a cell, or part of one, and how high it is."""

    def __init__(self, cell, height: int, plot: tuple[int, int] | None = None) -> None:
        self.cell, self.height, self.plot = cell, height, plot


def _output_cell(cell, outputs: list) -> nbformat.NotebookNode:
    part = copy.deepcopy(cell)
    part.outputs = outputs
    part.metadata.setdefault("transient", {})["remove_source"] = True
    part.pop("id", None)
    return part


def _pieces(cell) -> list[_Piece]:
    """`cell` cut into what can go on different slides: markdown paragraphs, code pages,
    each output (text outputs in pages)."""
    if cell.cell_type != "code":
        if _md_height(cell.source) <= SLIDE_PX:
            return [_Piece(cell, _md_height(cell.source))]
        parts, blocks = [], []
        for block in _md_blocks(cell.source):
            if blocks and _md_height("\n\n".join(blocks + [block])) > SLIDE_PX:
                parts.append("\n\n".join(blocks))
                blocks = []
            blocks.append(block)
        parts.append("\n\n".join(blocks))
        return [_Piece(nbformat.v4.new_markdown_cell(p), _md_height(p)) for p in parts]
    pieces = []
    if cell.source.strip():
        for page in _pages(cell.source, SLIDE_PX - CELL_PAD_PX):
            code = copy.deepcopy(cell)
            code.source, code.outputs = page.rstrip("\n"), []
            code.pop("id", None)
            if cell.source.startswith("%%px"):
                code.metadata["magics_language"] = "python"
            pieces.append(_Piece(code, _code_height(page) + CELL_PAD_PX))
    for out in cell.get("outputs", []):
        text, data = _output_text(out), out.get("data", {})
        if text is not None:
            for page in _pages(text, SLIDE_PX - CELL_PAD_PX):
                part = copy.deepcopy(out)
                if out.output_type == "stream":
                    part.text = page
                elif out.output_type == "error":
                    part.traceback = page.rstrip("\n").split("\n")
                else:
                    part.data = {"text/plain": page}
                pieces.append(_Piece(_output_cell(cell, [part]), _code_height(page) + 20))
        elif "image/png" in data:
            pieces.append(_Piece(_output_cell(cell, [out]), 0, _png_size(data["image/png"])))
        elif "text/html" in data:
            for page in _html_pages(data["text/html"], SLIDE_PX - CELL_PAD_PX):
                part = copy.deepcopy(out)
                part.data = {"text/html": _unbroken(page)}
                pieces.append(_Piece(_output_cell(cell, [part]), _html_height(page)))
        elif "text/markdown" in data:
            pieces.append(_Piece(_output_cell(cell, [out]), _md_height(data["text/markdown"])))
    return pieces


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


def _roles(cells: list) -> dict[int, str]:
    """Per cell index: "skip", "notes" (an exercise's answer and check) or "ask" (the
    markdown that asks an exercise: it starts a sub-slide)."""
    roles: dict[int, str] = {}
    tear_down = False
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown" and HEADING.match(cell.source.lstrip()):
            tear_down = "shared:save-and-tear-down" in cell.metadata.get("tags", [])
        kind = cell.metadata.get("slideshow", {}).get("slide_type")
        if tear_down or kind == "skip" or is_plumbing(cell):
            roles[i] = "skip"
    for i, cell in enumerate(cells):
        if is_solution(cell):
            for j in [i, *check_cells(cells, i)]:
                roles[j] = "notes"
            ask = next((j for j in range(i - 1, -1, -1) if cells[j].cell_type == "markdown"
                        and roles.get(j) != "skip"), None)
            if ask is not None:
                roles[ask] = "ask"
    return roles


def _plot_px(piece: _Piece) -> tuple[int, int]:
    """The smallest and the largest height a plot may be shown at."""
    width, natural = piece.plot
    largest = int(min(natural * PLOT_MAX_SCALE, natural * PLOT_WIDTH_PX / width, SLIDE_PX - 10))
    return min(PLOT_MIN_PX, largest), largest


def layout(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of `nb` cut and marked for reveal.js (slide, subslide, -, notes, skip)."""
    nb = copy.deepcopy(nb)
    roles = _roles(nb.cells)
    cells, used, room, started = [], 0, TITLE_PX, False
    for i, cell in enumerate(nb.cells):
        role = roles.get(i)
        if role in ("skip", "notes"):
            cell.metadata["slideshow"] = {"slide_type": role}
            cells.append(cell)
            continue
        heading = cell.cell_type == "markdown" and HEADING.match(cell.source.lstrip())
        for n, piece in enumerate(_pieces(cell)):
            needed = _plot_px(piece)[0] + 10 if piece.plot else piece.height
            if not started or (heading and n == 0):
                kind, used, room = "slide", 0, TITLE_PX if not started else SLIDE_PX
            elif (role == "ask" and n == 0) or used + needed > room:
                kind, used, room = "subslide", 0, SLIDE_PX
            else:
                kind = "-"
            started = True
            height = piece.height
            if piece.plot:
                width, natural = piece.plot
                height = min(_plot_px(piece)[1], room - used - 10)
                meta = piece.cell.outputs[0].setdefault("metadata", {})
                meta.setdefault("image/png", {})["width"] = int(height * width / natural)
                height += 10
            piece.cell.metadata["slideshow"] = {"slide_type": kind}
            piece.cell.id = f"{cell.get('id', 'cell')}-{n}"
            cells.append(piece.cell)
            used += height
    nb.cells = cells
    return nb
