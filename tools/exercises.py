"""Exercises: which cells hold an answer, which check it, and what a reader starts from.

One rule for the student copies (tools.classroom) and the published pages (tools.pages):
a cell tagged `solution` is the worked answer; the code cells after it, up to the next
section heading, check it; a reader starts from `student_stub(solution)`.
"""
from __future__ import annotations

import nbformat

PREDICTION_STUB = ("# ✎ Your prediction: one entry per rank, None where the result is not "
                   "defined.\nprediction = None")
CODE_STUB = "# ✎ Your code here (see the exercise above).\n"


def student_stub(solution: nbformat.NotebookNode) -> str:
    """What replaces a solution: the cell's own `student` metadata, or a generic stub."""
    own = solution.metadata.get("nccl_notebooks", {}).get("student")
    if own:
        return own
    if solution.source.lstrip().startswith("prediction"):
        return PREDICTION_STUB
    return CODE_STUB


def is_solution(cell: nbformat.NotebookNode) -> bool:
    return "solution" in cell.metadata.get("tags", [])


def check_cells(cells: list[nbformat.NotebookNode], solution_at: int) -> list[int]:
    """Indices of the code cells that check the solution at `solution_at`: those after it,
    up to the next section heading ("## ...")."""
    found = []
    for i in range(solution_at + 1, len(cells)):
        cell = cells[i]
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith("## "):
            break
        if cell.cell_type == "code" and not is_solution(cell):
            found.append(i)
    return found
