"""An executed notebook as the book shows it (tools.site): the same cells and outputs,
with what a reader should not meet first folded away.

- The scheme cell (tag `scheme`, right under the title) shows its picture without its code,
  so the first screen is the title, what you will learn and the picture.
- Plumbing (a code cell tagged `plumbing`: start the ranks, pull, plot, save) shows its
  outputs and folds its code under one line that names what it calls ("Show code: pull,
  plot_per_rank"). The taught code (every cell that calls a collective, `dist.…`) is
  never tagged (tests/tools/test_first_screen.py).
- "## In detail" (the long explanation under the picture) is folded under its heading,
  a sphinx-design dropdown the reader opens.
- Exercises: the worked answer (a cell tagged `solution`) and the outputs of the cells
  that check it are folded ("Show answer", "Show the check"); in the answer's place the
  reader sees the same empty cell the student copies have (tools.exercises).
- `%%px` output where every line an engine printed names its own rank ("rank 2 …", or
  continues such a line, indented): ipyparallel's `[stdout:N]` headers are dropped, the
  lines kept in engine order.
- torch's C++ log lines on the engines' stderr (`[rank0]:[E1201 … ProcessGroupGloo.cpp…]`,
  the errors the engines still log: helpers.runtime.launchers silences the warnings) are
  folded under one line that says how many there are.
- A text table (columns aligned with spaces) keeps its lines whole, in a box that scrolls
  sideways; any text output over LONG_LINES lines is folded under its first line and its
  number of lines.
The executed notebook itself is not changed: it stays the record of the run (and the
page's download).
"""
from __future__ import annotations

import ast
import copy
import html
import re

import nbformat

from helpers.runtime.folded import Folded
from tools.exercises import check_cells, is_solution, student_stub
from tools.i18n.strings import N_, fold_line, translated

ANSWER_PROMPTS = {"code_prompt_show": N_("Show answer"), "code_prompt_hide": N_("Hide answer")}
CHECK_PROMPTS = {"code_prompt_show": N_("Show the check"),
                 "code_prompt_hide": N_("Hide the check")}
SHOW_CODE, HIDE_CODE = N_("Show code: {summary}"), N_("Hide code")
CPP_LOG_LINE = N_("torch's C++ log on the engines: 1 line")
CPP_LOG_LINES = N_("torch's C++ log on the engines: {n} lines")
LONG_OUTPUT = N_("{first} … ({n} lines)")
PLUMBING = N_("plumbing")     # the fold line of a plumbing cell that calls nothing
# ipyparallel's stream of one %%px cell, sorted by engine: "[stdout:N] \n<lines>" per engine
_ENGINE_BLOCK = re.compile(r"^\[stdout:(\d+)\] \n(.*?)(?=^\[stdout:\d+\] \n|\Z)",
                           flags=re.M | re.S)
_ENGINE_HEADER = re.compile(r"^\[std(?:out|err):\d+\] $")
_CPP_LOG = re.compile(r"^(?:\[rank\d+\]:)?\[[EWIF]\d{4} ")   # glog: [E1201 16:42:58.2 file:line]
PLUMBING_TAG = "plumbing"  # a code cell whose code the page folds (its outputs stay)
DETAIL_HEADING = "## In detail"
SCHEME_TAG = "scheme"      # the cell that draws the page's scheme, right under its title
LONG_LINES = 12           # a text output longer than this is folded under its first line
_COLUMNS = re.compile(r"\S {2,}\S.*\S {2,}\S")    # a row: two gaps of 2+ spaces


def _tagged(cell: nbformat.NotebookNode, tag: str, prompts: dict[str, str],
            language: str | None = None) -> None:
    tags = cell.metadata.setdefault("tags", [])
    if tag not in tags:
        tags.append(tag)
    prompts = {key: translated(text, language) for key, text in prompts.items()}
    cell.metadata["mystnb"] = {**cell.metadata.get("mystnb", {}), **prompts}


def fold_exercises(nb: nbformat.NotebookNode, language: str | None = None) -> int:
    """Fold every exercise's answer and check (their prompts in `language`, None: English);
    returns how many exercises were folded."""
    cells, folded = [], 0
    for i, cell in enumerate(nb.cells):
        if is_solution(cell):
            folded += 1
            for j in check_cells(nb.cells, i):
                if nb.cells[j].get("outputs"):
                    _tagged(nb.cells[j], "hide-output", CHECK_PROMPTS, language)
            _tagged(cell, "hide-cell", ANSWER_PROMPTS, language)
            blank = nbformat.v4.new_code_cell(student_stub(cell))   # a fresh cell id
            blank.metadata["tags"] = ["exercise"]
            cells.append(blank)
        cells.append(cell)
    nb.cells = cells
    return folded


def one_line_per_rank(text: str) -> str | None:
    """`text` without its `[stdout:N]` headers when every line engine N printed starts
    with "rank N" or continues such a line (indented); None when the headers carry
    information."""
    blocks = _ENGINE_BLOCK.findall(text)
    if not blocks or "".join(f"[stdout:{n}] \n{body}" for n, body in blocks) != text:
        return None
    lines = []
    for n, body in blocks:
        own = body.rstrip("\n").split("\n")
        if not re.match(rf"rank {n}\b", own[0]) or not all(
                re.match(rf"rank {n}\b", line) or line.startswith((" ", "\t"))
                for line in own[1:]):
            return None
        lines += own
    return "\n".join(lines) + "\n"


def quiet_engine_headers(nb: nbformat.NotebookNode) -> int:
    """Drop the headers of one-line-per-rank `%%px` outputs; returns how many."""
    dropped = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.get("output_type") == "stream" and out.get("name") == "stdout":
                quiet = one_line_per_rank(out["text"])
                if quiet is not None:
                    out["text"], dropped = quiet, dropped + 1
    return dropped


def cpp_log(text: str) -> bool:
    """Is this stderr text nothing but torch's C++ log lines (and engine headers)?"""
    lines = [line for line in text.splitlines() if line.strip()]
    return bool(lines) and all(_CPP_LOG.match(line) or _ENGINE_HEADER.match(line)
                               for line in lines) and any(_CPP_LOG.match(line) for line in lines)


def fold_cpp_logs(nb: nbformat.NotebookNode, language: str | None = None) -> int:
    """Fold every stderr output that is only C++ log lines, under a line in `language`;
    returns how many."""
    folded = 0
    for cell in nb.cells:
        outputs = cell.get("outputs", []) if cell.cell_type == "code" else []
        for i, out in enumerate(outputs):
            if out.get("output_type") == "stream" and out.get("name") == "stderr" \
                    and cpp_log(out["text"]):
                # every line names its rank ("[rank0]:…"): the engine headers go
                lines = [line for line in out["text"].splitlines()
                         if line.strip() and not _ENGINE_HEADER.match(line)]
                n, text = len(lines), "\n".join(lines) + "\n"
                summary = (translated(CPP_LOG_LINE, language) if n == 1
                           else translated(CPP_LOG_LINES, language).format(n=n))
                outputs[i] = nbformat.v4.new_output("display_data", data={
                    "text/plain": text, "text/html": Folded(summary, text).html()})
                folded += 1
    return folded


def shown_text(out: nbformat.NotebookNode) -> str | None:
    """The text of an output a page shows as text: a stream, or a display with no HTML and
    no image; else None."""
    if out.get("output_type") == "stream":
        text = out.get("text", "")
    elif out.get("output_type") in ("display_data", "execute_result") and not any(
            key in out.get("data", {}) for key in ("text/html", "image/png", "image/svg+xml")):
        text = str(out.get("data", {}).get("text/plain", ""))
    else:
        return None
    return text


def is_text_table(text: str) -> bool:
    """Three consecutive lines or more with columns: two gaps of 2+ spaces each."""
    run = best = 0
    for line in text.splitlines():
        run = run + 1 if _COLUMNS.search(line) else 0
        best = max(best, run)
    return best >= 3


def shape_text_outputs(nb: nbformat.NotebookNode, language: str | None = None) -> int:
    """Text outputs as a page shows them; returns how many were changed.

    A text table keeps its columns: one line per row in a box that scrolls sideways
    (`<pre class="series-text-table">`, book/_static/series.css), where other outputs wrap.
    A text output over LONG_LINES lines is folded under its first line (what the cell
    prints first: a title or a header row) and its number of lines."""
    changed = 0
    for cell in nb.cells:
        outputs = cell.get("outputs", []) if cell.cell_type == "code" else []
        for i, out in enumerate(outputs):
            text = shown_text(out)
            if text is None:
                continue
            lines = text.rstrip("\n").splitlines()
            table = is_text_table(text)
            body = (f'<pre class="series-text-table">{html.escape(text, quote=False)}</pre>'
                    if table else None)
            if len(lines) > LONG_LINES:
                first = next(line for line in lines if line.strip()).strip()
                line = translated(LONG_OUTPUT, language).format(first=first, n=len(lines))
                markup = Folded(line, text, body).html()
            elif table:
                markup = body
            else:
                continue
            outputs[i] = nbformat.v4.new_output("display_data", data={
                "text/plain": text, "text/html": markup})
            changed += 1
    return changed


def hide_scheme_code(nb: nbformat.NotebookNode) -> int:
    """MyST-NB's `remove-input` on the scheme cell (tag `scheme`: the picture right under
    the title, drawn without the ranks), so the page's first screen is the title, what you
    will learn and the picture; returns how many. The notebook shows the code."""
    hidden = 0
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if cell.cell_type == "code" and SCHEME_TAG in tags and "remove-input" not in tags:
            cell.metadata["tags"] = [*tags, "remove-input"]
            hidden += 1
    return hidden


def called_names(source: str, most: int = 4) -> list[str]:
    """The functions and methods a cell calls, in order, without repeats (`cluster.pull(…)`
    gives "pull"); magics and comments are left out."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("%"))
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)),
                   key=lambda n: (n.lineno, n.col_offset))
    names: list[str] = []
    for call in calls:
        f = call.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
        if name and name not in names and name not in ("print", "len", "range", "list"):
            names.append(name)
    return names[:most]


def plumbing_summary(source: str, language: str | None = None,
                     page: str | None = None) -> str:
    """The line a folded plumbing cell shows: its first comment (in `language`: its entry
    of the catalog of `page`), else what it calls (names, as they are)."""
    comment = _first_comment(source)
    if comment:
        return fold_line(comment, page, language)
    names = called_names(source)
    return ", ".join(names) if names else translated(PLUMBING, language)


def comment_summaries(nb: nbformat.NotebookNode) -> list[str]:
    """The fold lines of `nb`'s plumbing cells that are prose (a cell's first comment), in
    order: what the pages' catalogs hold for them (tools.i18n.catalogs.extract)."""
    found = []
    for cell in nb.cells:
        if cell.cell_type == "code" and PLUMBING_TAG in cell.metadata.get("tags", []):
            comment = _first_comment(cell.source)
            if comment and comment not in found:
                found.append(comment)
    return found


def _first_comment(source: str) -> str | None:
    first = source.lstrip().split("\n", 1)[0].strip()
    if first.startswith("# ") and not first.startswith("# ✎"):
        return first[2:].strip()
    return None


def fold_plumbing(nb: nbformat.NotebookNode, language: str | None = None,
                  page: str | None = None) -> int:
    """MyST-NB's `hide-input` on every code cell tagged `plumbing`, under a one-line
    summary (in `language`: a comment's line from the catalog of `page`, names as they
    are); returns how many."""
    folded = 0
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        shown = not {"hide-input", "hide-cell", "hide-output"} & set(tags)   # an exercise's
        if cell.cell_type == "code" and PLUMBING_TAG in tags and shown:    # check keeps its own
            summary = plumbing_summary(cell.source, language, page)
            show = translated(SHOW_CODE, language).format(summary=summary)
            _tagged(cell, "hide-input", {"code_prompt_show": show,
                                         "code_prompt_hide": translated(HIDE_CODE, language)})
            folded += 1
    return folded


def fold_details(nb: nbformat.NotebookNode) -> int:
    """Each markdown cell that opens with "## In detail" as a closed dropdown of the same
    text (sphinx-design); returns how many."""
    folded = 0
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.startswith(DETAIL_HEADING + "\n"):
            body = cell.source[len(DETAIL_HEADING):].strip("\n")
            fence = ":" * max(4, 1 + max((len(m) for m in re.findall(r"^:{3,}", body,
                                                                      flags=re.M)), default=0))
            cell.source = (f"{fence}{{dropdown}} {DETAIL_HEADING[3:]}\n:class-container: "
                           f"series-in-detail\n\n{body}\n{fence}\n")
            folded += 1
    return folded


def as_page(nb: nbformat.NotebookNode, language: str | None = None,
            page: str | None = None) -> nbformat.NotebookNode:
    """A copy of the executed notebook `page` (its stem), ready for MyST-NB, the lines the
    folds show in `language` (None: English; Sphinx translates the markdown)."""
    shown = copy.deepcopy(nb)
    hide_scheme_code(shown)
    fold_exercises(shown, language)
    fold_plumbing(shown, language, page)
    fold_details(shown)
    quiet_engine_headers(shown)
    fold_cpp_logs(shown, language)
    shape_text_outputs(shown, language)
    return shown
