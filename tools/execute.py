"""Execute a notebook with a real kernel: papermill's parameters and timing, Jupyter's rules.

papermill injects the parameters and records each cell's duration, but fails a run on
*any* error output. Notebook 13 raises errors on purpose in cells tagged
`raises-exception` (the tag Jupyter's own executor honours), so here only an error in
an untagged cell fails the run.
"""
from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import nbformat

if TYPE_CHECKING:
    from jupyter_client.manager import KernelManager


Edit = Callable[[nbformat.NotebookNode], nbformat.NotebookNode]


def run_notebook(notebook: Path, output: Path | None = None, parameters: dict | None = None,
                 cell_timeout_s: int = 600, kernel_name: str = "python3",
                 edit: Edit | None = None) -> nbformat.NotebookNode:
    """Run `notebook` in its own folder; write the executed copy to `output`; return it.

    `edit` changes the cells before they run (the tests' rehearsal of an exercise), the
    notebook's folder staying the working directory. Raises papermill's
    PapermillExecutionError (naming the cell) for an error in a cell that is not tagged
    `raises-exception`.
    """
    notebook = Path(notebook)
    with private_kernel(kernel_name) as km:
        nb = _run(notebook, km, output, parameters, cell_timeout_s, kernel_name, edit)
    failure = unexpected_error(nb)
    if failure is not None:
        raise failure
    return nb


@contextlib.contextmanager
def private_kernel(kernel_name: str) -> Iterator[KernelManager]:
    """A kernel manager whose kernel listens on unix sockets in a fresh owner-only folder.

    Over loopback TCP any local user could reach the kernel's ports (a shared classroom
    server); a unix socket in a 0700 folder only its owner can open. It is also what
    silences ipykernel's "running over TCP without encryption" warning.
    """
    from jupyter_client.manager import KernelManager

    folder = Path(tempfile.mkdtemp(prefix="nccl-kernel-"))   # mkdtemp: mode 0700
    km = KernelManager(kernel_name=kernel_name, transport="ipc", ip=str(folder / "k"))
    try:
        yield km
    finally:
        # nbclient leaves a kernel manager it was given running: shut the kernel down here,
        # without the interrupt km.shutdown_kernel sends first (the kernel would log
        # "KeyboardInterrupt caught in kernel" into make html's output).
        if km.has_kernel:
            km.request_shutdown()
            km.finish_shutdown()      # waits shutdown_wait_time, then kills
            km.cleanup_resources()
        shutil.rmtree(folder, ignore_errors=True)


def _run(notebook: Path, km: KernelManager, output: Path | None, parameters: dict | None,
         cell_timeout_s: int, kernel_name: str, edit: Edit | None) -> nbformat.NotebookNode:
    from papermill.engines import papermill_engines
    from papermill.execute import prepare_notebook_metadata
    from papermill.iorw import load_notebook_node, write_ipynb
    from papermill.parameterize import parameterize_notebook
    from papermill.utils import chdir

    nb = load_notebook_node(str(notebook))
    if edit is not None:
        nb = edit(nb)
    if parameters:
        nb = parameterize_notebook(nb, parameters, kernel_name=kernel_name)
    nb = prepare_notebook_metadata(nb, str(notebook), str(output or ""))
    with chdir(str(notebook.parent)):
        nb = papermill_engines.execute_notebook_with_engine(
            None, nb, kernel_name, input_path=str(notebook),
            output_path=str(output) if output else None, progress_bar=False,
            log_output=False, start_timeout=120, execution_timeout=cell_timeout_s, km=km)
    if output is not None:
        write_ipynb(nb, str(output))
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
