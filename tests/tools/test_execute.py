"""tools.execute's kernels: forked from a server that imported torch (torch._dynamo too),
matplotlib, ipyparallel and helpers (helpers/runtime/forkserver.py), and otherwise what a
launched kernel is: in the notebook's folder, with the caller's environment as it is now,
pyplot's figures shown inline, interruptible, and gone after the run."""
from __future__ import annotations

import time
from pathlib import Path

import nbformat
import psutil
import pytest

from helpers.runtime import forkserver
from tools.execute import private_kernel, run_notebook

pytestmark = pytest.mark.skipif(not forkserver.available(), reason="no fork server here")

PROBE = """\
import os, sys, threading
import matplotlib.pyplot as plt
plt.plot([0, 1], [1, 0])
print(os.getppid(), os.getcwd(), os.environ.get("TUTORIAL_PROBE"), sys.path[0],
      threading.main_thread() is threading.current_thread(), sep="|")"""


def _notebook(folder: Path, source: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    path = folder / "probe.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_forked_kernel_runs_in_the_notebooks_folder_and_environment(tmp_path, monkeypatch):
    notebook = _notebook(tmp_path, PROBE)
    kernels = []
    for value in ("first", "second"):      # an environment changed in between reaches it
        monkeypatch.setenv("TUTORIAL_PROBE", value)
        nb = run_notebook(notebook, tmp_path / "out.ipynb")
        outputs = nb.cells[0].outputs
        parent, cwd, probe, path0, main = next(
            o.text for o in outputs if o.output_type == "stream").strip().split("|")
        assert (cwd, probe, path0, main) == (str(tmp_path), value, str(tmp_path), "True")
        assert any("image/png" in o.get("data", {}) for o in outputs), "no inline figure"
        kernels.append(int(parent))
    server = forkserver._servers[next(k for k in forkserver._servers
                                      if k.entry == "tools.execute:forked_kernel")]
    assert kernels == [server.process.pid] * 2, "the kernels were not forked by one server"
    assert not [p for p in psutil.Process(server.process.pid).children()
                if p.status() != psutil.STATUS_ZOMBIE], "a kernel outlived its run"


def test_a_forked_kernel_is_interrupted(tmp_path):
    with private_kernel("python3") as km:
        km.start_kernel(cwd=str(tmp_path))
        client = km.client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=120)
            msg_id = client.execute("import time; time.sleep(60)")
            time.sleep(1)
            start = time.monotonic()
            km.interrupt_kernel()
            # the execute's reply: wait_for_ready asks kernel_info again until IOPub is up
            # too (jupyter_client's client.py), so on a slow start the replies to its other
            # requests are still queued before it (a CI run read one: status "ok")
            reply = client.get_shell_msg(timeout=30)
            while reply["parent_header"].get("msg_id") != msg_id:
                assert reply["msg_type"] == "kernel_info_reply", reply["msg_type"]
                reply = client.get_shell_msg(timeout=max(1.0, 30 - (time.monotonic() - start)))
            assert reply["content"]["status"] == "error"
            assert reply["content"]["ename"] == "KeyboardInterrupt"
            assert time.monotonic() - start < 30
            assert isinstance(km.provisioner.process, forkserver.ForkedChild)
            pid = km.provisioner.pid
        finally:
            client.stop_channels()
    deadline = time.monotonic() + 10     # the server reaps it
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not psutil.pid_exists(pid), "the kernel outlived private_kernel"


def test_a_forked_kernel_runs_its_exit_handlers(tmp_path):
    """helpers.scale.checkpoints.checkpoint_dir removes its folder at the kernel's exit."""
    notebook = _notebook(tmp_path, "import atexit, pathlib\n"
                                   "atexit.register(pathlib.Path('exited').write_text, 'yes')")
    run_notebook(notebook, tmp_path / "out.ipynb")
    deadline = time.monotonic() + 10
    while not (tmp_path / "exited").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "exited").read_text() == "yes"


OPTIMIZER_PROBE = """\
import sys
before = "torch._dynamo" in sys.modules
import torch
torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
print(before, "torch._dynamo" in sys.modules, sep="|")"""


def test_torch_imports_dynamo_at_the_first_optimizer_and_a_forked_kernel_has_it_already(
        tmp_path):
    """Why tools.execute's KERNELS_PRELOAD names torch._dynamo: a fresh process imports it
    at its first optimizer (torch._disable_dynamo, 1.1 CPU-s); a forked kernel has it."""
    import subprocess
    import sys

    fresh = subprocess.run([sys.executable, "-c", OPTIMIZER_PROBE], capture_output=True,
                           text=True, timeout=120)
    assert fresh.stdout.strip() == "False|True", fresh.stdout + fresh.stderr
    nb = run_notebook(_notebook(tmp_path, OPTIMIZER_PROBE), tmp_path / "out.ipynb")
    shown = "".join(o.text for o in nb.cells[0].outputs if o.output_type == "stream")
    assert shown.strip() == "True|True", shown


FIRST_CELL_PROBE = """\
import sys
import helpers
wanted = [*helpers.MODULES, "helpers.figures.animation", "matplotlib.pyplot"]
print(sorted(m for m in wanted if m not in sys.modules))"""


def test_a_forked_kernel_has_imported_what_a_notebooks_first_cell_imports(tmp_path):
    """KERNELS_PRELOAD: what `from helpers import ...` and the animations import (pyplot
    with them, 0.4 CPU-s a kernel) is imported once, in the server."""
    nb = run_notebook(_notebook(tmp_path, FIRST_CELL_PROBE), tmp_path / "out.ipynb")
    shown = "".join(o.text for o in nb.cells[0].outputs if o.output_type == "stream")
    assert shown.strip() == "[]", shown


def test_the_executed_copy_is_written_once_at_the_end_also_after_a_failure(tmp_path):
    """papermill would save the whole notebook at each cell's start and end (O(cells²));
    tools.execute writes it once, when the run ends, with what ran before a failure."""
    from papermill.exceptions import PapermillExecutionError

    out = tmp_path / "out.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in (
        "print('first ran')",
        f"import os; print('written during the run:', os.path.exists({str(out)!r}))",
        "raise ValueError('second cell fails')",
        "print('never runs')")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    notebook = tmp_path / "fails.ipynb"
    nbformat.write(nb, notebook)
    with pytest.raises(PapermillExecutionError, match="second cell fails"):
        run_notebook(notebook, out)
    written = nbformat.read(out, as_version=4)
    texts = ["".join(o.get("text", "") for o in cell.outputs) for cell in written.cells]
    assert texts[:2] == ["first ran\n", "written during the run: False\n"], texts
    assert any(o.output_type == "error" for o in written.cells[2].outputs)
    assert written.cells[3].outputs == []
