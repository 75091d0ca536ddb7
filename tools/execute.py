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
    silences ipykernel's "running over TCP without encryption" warning. Where it can, the
    kernel is forked from a server that imported torch and the rest already
    (tools/kernel_provisioner.py, `use_forkserver`).
    """
    from jupyter_client.manager import KernelManager

    folder = Path(tempfile.mkdtemp(prefix="nccl-kernel-"))   # mkdtemp: mode 0700
    km = KernelManager(kernel_name=kernel_name, transport="ipc", ip=str(folder / "k"))
    use_forkserver(km)
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


def use_forkserver(km: KernelManager) -> bool:
    """Have `km` start its kernel with tools.kernel_provisioner (the kernel spec's
    `kernel_provisioner` metadata, read by jupyter_client's KernelProvisionerFactory) where
    the platform allows it and its entry point is installed (`pip install -e .`); else
    leave jupyter_client's LocalProvisioner. Whether it did."""
    from jupyter_client.provisioning import KernelProvisionerFactory

    from tools import kernel_provisioner

    installed = KernelProvisionerFactory.instance().get_provisioner_entries()
    if not kernel_provisioner.available() or kernel_provisioner.NAME not in installed:
        return False
    km.kernel_spec.metadata["kernel_provisioner"] = {"provisioner_name": kernel_provisioner.NAME}
    return True


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
    # papermill runs the cells of `nb` in place. Given an output path it would save the
    # whole notebook (validated) at each cell's start and end: O(cells²), 0.4 CPU-s for one
    # of ours. The copy is written once here instead, also when the run fails.
    try:
        with chdir(str(notebook.parent)):
            nb = papermill_engines.execute_notebook_with_engine(
                None, nb, kernel_name, input_path=str(notebook), output_path=None,
                progress_bar=False, log_output=False, start_timeout=120,
                execution_timeout=cell_timeout_s, km=km, extra_arguments=AUDIT_ARGUMENTS)
    finally:
        if output is not None:
            write_ipynb(nb, str(output))
    return nb


# Every figure a kernel shows carries its readability audit (helpers.figures.audit), from
# the kernel's start: IPython's exec_lines, given by nbclient's `extra_arguments`. A scheme
# cell runs before any `from helpers import ...` (issue 50: the picture comes first).
AUDIT_ARGUMENTS = ["--IPKernelApp.exec_lines=import helpers.figures.audit as _audit; "
                   "_audit.install(); del _audit"]


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
