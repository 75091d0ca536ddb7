"""Execute a notebook with a real kernel (papermill) and read what it printed."""
from __future__ import annotations

from pathlib import Path

import nbformat

from executed_checks import check_executed


def execute(notebook: Path, out_dir: Path, cell_timeout_s: int = 600,
            **parameters) -> nbformat.NotebookNode:
    """Run `notebook` with papermill, `parameters` injected; return the executed copy."""
    from tools.execute import run_notebook

    import os

    out = out_dir / f"{notebook.stem}-{'-'.join(f'{k}{v}' for k, v in parameters.items()) or 'default'}.ipynb"
    # ipykernel forwards what a process writes to fd 2 (torch's C++ logs) except under
    # pytest: without the variable the kernel and its engines show what a build shows.
    under_test = os.environ.pop("PYTEST_CURRENT_TEST", None)
    try:
        run_notebook(notebook, out, parameters, cell_timeout_s=cell_timeout_s)
    finally:
        if under_test is not None:
            os.environ["PYTEST_CURRENT_TEST"] = under_test
    executed = nbformat.read(out, as_version=4)
    check_executed(notebook, executed, parameters)
    return executed


def output_text(cell) -> str:
    """All text a code cell produced: streams, text/plain and text/html."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        data = out.get("data", {})
        parts.extend(str(data[m]) for m in ("text/plain", "text/html") if m in data)
    return "".join(parts)


def notebook_text(nb) -> str:
    """Everything the notebook's code cells printed or displayed as text."""
    return "".join(output_text(c) for c in nb.cells if c.cell_type == "code")


def png_count(nb) -> int:
    """How many images the notebook shows (diagrams and plots)."""
    return sum("image/png" in out.get("data", {}) for c in nb.cells
               for out in c.get("outputs", []))


def assert_records_match_model(records: list[dict], n_ranks: int) -> None:
    """Every record: gloo, this world size, ranks in order, and what the model says."""
    from helpers.collectives.model_check import check

    assert records, "no record saved"
    for record in records:
        assert record["backend"] == "gloo" and record["world_size"] == n_ranks
        assert [r["rank"] for r in record["ranks"]] == list(range(n_ranks))
        assert all(r.get("device", "cpu") == "cpu" for r in record["ranks"])
        assert all(check(record)), (record["collective"], record.get("dtype"),
                                    record["params"], check(record))


def run_bounded(cmd: list[str], cwd: Path, env: dict, timeout_s: float) -> tuple[int, str]:
    """Run a command in its own process session; kill the whole session past the timeout.

    Returns (exit code, stdout and stderr together); fails the test on a timeout.
    """
    import os
    import signal
    import subprocess

    import pytest

    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        pytest.fail(f"`{' '.join(map(str, cmd))}` ran over {timeout_s} s:\n{out[-4000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    return proc.returncode, out


def printed(checker, verdict: bool = False):
    """`checker` as a notebook cell shows it: its Report printed (for capsys), then returned.

    With `verdict`, the call returns True/False (every rank ✓ or not) instead of the Report.
    """
    def shown(*args, **kwargs):
        report = checker(*args, **kwargs)
        print(report)
        return bool(report) if verdict else report
    return shown


def execute_with_results(stem: str, out_dir: Path, monkeypatch,
                         **parameters) -> tuple[nbformat.NotebookNode, list[dict]]:
    """Execute notebooks/<stem>.ipynb with its results in out_dir/results; return the
    executed copy and the records it saved (a single record comes back as a list of one)."""
    import json

    from conftest import NOTEBOOKS

    results = out_dir / "results"
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(results))
    nb = execute(NOTEBOOKS / f"{stem}.ipynb", out_dir, **parameters)
    records = json.loads((results / f"{stem}.json").read_text())
    return nb, records if isinstance(records, list) else [records]


def cell_script(notebook: Path, cell_id: str) -> str:
    """The `script` that a notebook's cell defines and prints (00's torchrun-script cell),
    run here as the notebook runs it."""
    import contextlib
    import io

    [source] = [c.source for c in nbformat.read(notebook, as_version=4).cells
                if c.get("id") == cell_id]
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(source, namespace)
    return namespace["script"]
