"""tools.execute's kernels: started by tools.kernel_provisioner (a jupyter_client kernel
provisioner, installed as an entry point) from the standard library's forkserver, whose
server imported torch (torch._dynamo too), matplotlib, ipyparallel and helpers; otherwise
what a launched kernel is: in the notebook's folder, with the caller's environment as it is
now and its sys.path, pyplot's figures inline, its output on the caller's fd 1 and 2,
interruptible, its exit handlers run, and gone after the run or with its caller. Where the
provisioner cannot be used, jupyter_client's LocalProvisioner launches the kernel."""
from __future__ import annotations

import importlib
import inspect
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from jupyter_client.provisioning import LocalProvisioner

from tools import jupyter_compat, kernel_provisioner
from tools.execute import private_kernel, run_notebook
from tools.kernel_provisioner import ForkserverProvisioner

REPO = Path(__file__).resolve().parents[2]
forks = pytest.mark.skipif(not kernel_provisioner.available(), reason="no forkserver here")

PROBE = """\
import os, sys, threading
import matplotlib.pyplot as plt
plt.plot([0, 1], [1, 0])
print(os.getcwd(), os.environ.get("TUTORIAL_PROBE"), sys.path,
      threading.main_thread() is threading.current_thread(), sep="|")"""


def _notebook(folder: Path, source: str, name: str = "probe.ipynb") -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    path = folder / name
    nbformat.write(nb, path)
    return path


def _shown(nb: nbformat.NotebookNode) -> str:
    return "".join(o.text for o in nb.cells[0].outputs if o.output_type == "stream").strip()


def _probe(notebook: Path) -> tuple[list[str], bool]:
    nb = run_notebook(notebook, notebook.parent / "out.ipynb")
    figure = any("image/png" in o.get("data", {}) for o in nb.cells[0].outputs)
    return _shown(nb).split("|"), figure


@forks
def test_the_provisioner_starts_the_kernel_from_the_forkserver(tmp_path):
    with private_kernel("python3") as km:
        assert km.kernel_spec.metadata["kernel_provisioner"]["provisioner_name"] == \
            kernel_provisioner.NAME
        km.start_kernel(cwd=str(tmp_path))
        assert type(km.provisioner) is ForkserverProvisioner
        assert isinstance(km.provisioner.process, multiprocessing.process.BaseProcess)
        kernel = psutil.Process(km.provisioner.pid)
        assert kernel.ppid() != os.getpid(), "a launched kernel, not a forked one"
        assert "forkserver" in " ".join(psutil.Process(kernel.ppid()).cmdline())


@forks
def test_a_forked_kernel_is_what_a_launched_one_is_and_the_fallback_launches(
        tmp_path, monkeypatch):
    """Same folder, environment now, sys.path, main thread and inline figure as the
    kernel jupyter_client's LocalProvisioner launches (the fallback)."""
    notebook = _notebook(tmp_path, PROBE)
    seen = []
    for value in ("first", "second"):      # an environment changed in between reaches it
        monkeypatch.setenv("TUTORIAL_PROBE", value)
        seen.append(_probe(notebook))
    monkeypatch.setattr(kernel_provisioner, "available", lambda: False)
    with private_kernel("python3") as km:
        km.start_kernel(cwd=str(tmp_path))
        assert type(km.provisioner) is LocalProvisioner
    launched = _probe(notebook)
    assert seen[0][0][:2] == [str(tmp_path), "first"]
    assert seen[1] == launched, "a forked kernel differs from a launched one"
    assert launched[1], "no inline figure"


@forks
def test_without_the_entry_point_the_kernel_is_launched(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_provisioner, "NAME", "nccl-not-installed")
    with private_kernel("python3") as km:
        assert "kernel_provisioner" not in km.kernel_spec.metadata
        km.start_kernel(cwd=str(tmp_path))
        assert type(km.provisioner) is LocalProvisioner


ENV_PROBE = """\
import os, sys
print("torch" in sys.modules, os.environ.get("NCCL_PROBE_READ_AT_IMPORT"), sep="|")"""


@forks
def test_a_setting_the_server_imported_with_otherwise_gives_a_fresh_python(
        tmp_path, monkeypatch):
    """A variable the preloaded modules may have read, set otherwise than in the fork
    server's environment: the child runs a new `python -m ipykernel_launcher` instead."""
    notebook = _notebook(tmp_path, ENV_PROBE)
    assert _shown(run_notebook(notebook)) == "True|None"     # forked: torch preloaded
    monkeypatch.setenv("NCCL_PROBE_READ_AT_IMPORT", "1")
    assert _shown(run_notebook(notebook)) == "False|1"


@pytest.mark.timing
@forks
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
            assert type(km.provisioner) is ForkserverProvisioner
            pid = km.provisioner.pid
        finally:
            client.stop_channels()
    assert not psutil.pid_exists(pid), "the kernel outlived private_kernel"


@forks
def test_a_forked_kernel_runs_its_exit_handlers(tmp_path):
    """helpers.scale.checkpoints.checkpoint_dir removes its folder at the kernel's exit."""
    notebook = _notebook(tmp_path, "import atexit, pathlib\n"
                                   "atexit.register(pathlib.Path('exited').write_text, 'yes')")
    run_notebook(notebook, tmp_path / "out.ipynb")
    deadline = time.monotonic() + 10
    while not (tmp_path / "exited").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "exited").read_text() == "yes"


def _exit_writer(path: str) -> None:
    import atexit
    atexit.register(Path(path).write_text, "ran")


def test_a_forkserver_child_skips_atexit_so_the_compat_entry_is_still_needed(tmp_path):
    """jupyter_compat's atexit-run-exitfuncs: multiprocessing's child ends in os._exit."""
    process = multiprocessing.get_context("forkserver").Process(
        target=_exit_writer, args=(str(tmp_path / "ran"),))
    process.start()
    process.join(120)
    assert process.exitcode == 0
    assert not (tmp_path / "ran").exists(), "atexit ran: drop run_exit_handlers"


@pytest.mark.parametrize("entry", jupyter_compat.ENTRIES, ids=lambda e: e.key)
def test_each_compat_entry_is_present_and_named_beside_its_code(entry):
    assert entry.present(), f"{entry.key} is gone: {entry.why}; {entry.recheck}"
    module_name, _, qualname = entry.where.partition(":")
    target = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    assert f"jupyter_compat: {entry.key}" in inspect.getsource(target)


CALLER = """\
import os, sys, time
sys.path.insert(0, {repo!r})
from tools.execute import private_kernel


def main():
    out = sys.argv[1]
    with private_kernel("python3") as km:       # starts the fork server
        km.start_kernel(cwd=out)
    for fd, name in ((1, "out"), (2, "err")):   # then this process's 1 and 2 move
        os.dup2(os.open(os.path.join(out, name), os.O_WRONLY | os.O_CREAT), fd)
    with private_kernel("python3") as km:
        km.start_kernel(cwd=out)
        client = km.client()
        client.start_channels()
        client.wait_for_ready(timeout=120)
        client.execute_interactive(
            "import os; os.write(1, b'kernel-fd-1'); os.write(2, b'kernel-fd-2')", timeout=60)
        print(km.provisioner.pid, psutil_parent(km.provisioner.pid), file=sys.__stderr__,
              flush=True)
        if sys.argv[2] == "wait":
            os.write(int(sys.argv[3]), f"{{km.provisioner.pid}}\\n".encode())
            time.sleep(600)
        client.stop_channels()


def psutil_parent(pid):
    import psutil
    return psutil.Process(pid).ppid()


if __name__ == "__main__":
    main()
"""


@forks
def test_a_kernels_output_reaches_the_callers_fd_1_and_2_as_they_are_now(tmp_path):
    script = tmp_path / "caller.py"
    script.write_text(CALLER.format(repo=str(REPO)))
    done = subprocess.run([sys.executable, str(script), str(tmp_path), "end"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "kernel-fd-1" in (tmp_path / "out").read_text()
    assert "kernel-fd-2" in (tmp_path / "err").read_text()
    assert "kernel-fd-1" not in done.stdout


REAPER = """\
import ctypes, os, subprocess, sys
ctypes.CDLL(None).prctl(36, 1)      # PR_SET_CHILD_SUBREAPER: orphans come here, not to 1
caller = subprocess.Popen(sys.argv[1:], pass_fds=(int(sys.argv[-1]),))
print(caller.pid, flush=True)
sys.stdin.read()                    # the test's end: reap, then end what is left
while True:
    try:
        pid, _ = os.waitpid(-1, 0)
    except ChildProcessError:
        break
"""


@forks
@pytest.mark.skipif(sys.platform != "linux", reason="a subreaper is Linux's")
def test_a_killed_caller_leaves_no_kernel_behind(tmp_path):
    """SIGKILL the process that started a kernel: the fork server and the kernel end. The
    caller runs under a subreaper, as under systemd --user, so an orphan's parent is not
    pid 1 (where ipykernel's default watch, `parent is init`, would end it anyway)."""
    script = tmp_path / "caller.py"
    script.write_text(CALLER.format(repo=str(REPO)))
    told_r, told_w = os.pipe()
    reaper = subprocess.Popen(
        [sys.executable, "-c", REAPER, sys.executable, str(script), str(tmp_path), "wait",
         str(told_w)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        pass_fds=(told_w,))
    os.close(told_w)
    try:
        caller = int(reaper.stdout.readline())
        with os.fdopen(told_r) as told:
            kernel = int(told.readline())
        server = psutil.Process(kernel).ppid()
        assert server not in (caller, 1)
        os.kill(caller, signal.SIGKILL)
        deadline = time.monotonic() + 15
        left = [server, kernel]
        while time.monotonic() < deadline and (left := [
                p for p in (server, kernel) if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]):
            time.sleep(0.2)
        assert not left, f"left running after their caller was killed: {left}"
    finally:
        for child in psutil.Process(reaper.pid).children(recursive=True):
            child.kill()
        reaper.communicate("", timeout=30)


OPTIMIZER_PROBE = """\
import sys
before = "torch._dynamo" in sys.modules
import torch
torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
print(before, "torch._dynamo" in sys.modules, sep="|")"""


@forks
def test_torch_imports_dynamo_at_the_first_optimizer_and_a_forked_kernel_has_it_already(
        tmp_path):
    """Why KERNELS_PRELOAD names torch._dynamo: a fresh process imports it at its first
    optimizer (torch._disable_dynamo, 1.1 CPU-s); a forked kernel has it."""
    fresh = subprocess.run([sys.executable, "-c", OPTIMIZER_PROBE], capture_output=True,
                           text=True, timeout=120)
    assert fresh.stdout.strip() == "False|True", fresh.stdout + fresh.stderr
    nb = run_notebook(_notebook(tmp_path, OPTIMIZER_PROBE), tmp_path / "out.ipynb")
    assert _shown(nb) == "True|True"


FIRST_CELL_PROBE = """\
import sys
import helpers
wanted = [*helpers.MODULES, "helpers.figures.animation", "matplotlib.pyplot"]
print(sorted(m for m in wanted if m not in sys.modules))"""


@forks
def test_a_forked_kernel_has_imported_what_a_notebooks_first_cell_imports(tmp_path):
    """KERNELS_PRELOAD: what `from helpers import ...` and the animations import (pyplot
    with them, 0.4 CPU-s a kernel) is imported once, in the server."""
    nb = run_notebook(_notebook(tmp_path, FIRST_CELL_PROBE), tmp_path / "out.ipynb")
    assert _shown(nb) == "[]"


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
