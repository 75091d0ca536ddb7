"""Execute a notebook with a real kernel: papermill's parameters and timing, Jupyter's rules.

papermill injects the parameters and records each cell's duration, but fails a run on
*any* error output. Notebook 13 raises errors on purpose in cells tagged
`raises-exception` (the tag Jupyter's own executor honours), so here only an error in
an untagged cell fails the run.
"""
from __future__ import annotations

from pathlib import Path

import nbformat


def run_notebook(notebook: Path, output: Path | None = None, parameters: dict | None = None,
                 cell_timeout_s: int = 600, kernel_name: str = "python3") -> nbformat.NotebookNode:
    """Run `notebook` in its own folder; write the executed copy to `output`; return it.

    Raises papermill's PapermillExecutionError (naming the cell) for an error in a cell
    that is not tagged `raises-exception`.
    """
    from papermill.engines import papermill_engines
    from papermill.execute import prepare_notebook_metadata
    from papermill.iorw import load_notebook_node, write_ipynb
    from papermill.parameterize import parameterize_notebook
    from papermill.utils import chdir

    notebook = Path(notebook)
    nb = load_notebook_node(str(notebook))
    if parameters:
        nb = parameterize_notebook(nb, parameters, kernel_name=kernel_name)
    nb = prepare_notebook_metadata(nb, str(notebook), str(output or ""))
    with chdir(str(notebook.parent)):
        nb = papermill_engines.execute_notebook_with_engine(
            None, nb, kernel_name, input_path=str(notebook),
            output_path=str(output) if output else None, progress_bar=False,
            log_output=False, start_timeout=120, execution_timeout=cell_timeout_s)
    if output is not None:
        write_ipynb(nb, str(output))
    failure = unexpected_error(nb)
    if failure is not None:
        raise failure
    return nb


def unexpected_error(nb: nbformat.NotebookNode) -> Exception | None:
    """The first error output of a cell not tagged `raises-exception`, as papermill's error."""
    from papermill.exceptions import PapermillExecutionError

    for index, cell in enumerate(nb.cells):
        if "raises-exception" in cell.get("metadata", {}).get("tags", []):
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                return PapermillExecutionError(
                    cell_index=index, exec_count=cell.get("execution_count"),
                    source=cell.source, ename=out.ename, evalue=out.evalue,
                    traceback=out.traceback)
    return None
