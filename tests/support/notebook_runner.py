"""Execute a notebook with a real kernel (papermill) and read what it printed."""
from __future__ import annotations

from pathlib import Path

import nbformat

from executed_checks import check_executed, checked_here


REHEARSAL = "rehearsal-"     # the id prefix of the cells a rehearsal adds


# The checks may keep what they ran (09's appends its records): the notebook's names are
# put back as they were before the stub (lists, dicts and sets as shallow copies), and the
# names the rehearsal made are dropped, so the master's run goes on as if it had not been.
_KEEP = "{'In', 'Out', 'exit', 'quit', 'get_ipython'}"
_SAVE = ("import copy as _rehearsal_copy\n"
         "_rehearsal_saved = {k: _rehearsal_copy.copy(v) if isinstance(v, (list, dict, set))"
         f" else v for k, v in globals().items() if not k.startswith('_') and k not in {_KEEP}}}")
_RESTORE = ("for _k in [k for k in globals() if not k.startswith('_') and k not in "
            f"_rehearsal_saved and k not in {_KEEP}]:\n"
            "    del globals()[_k]\n"
            "globals().update(_rehearsal_saved)\n"
            "globals().pop('_k', None)\n"
            "del _rehearsal_saved, _rehearsal_copy")


def rehearse(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook as a student first meets each exercise: before every solution cell, the
    student copy's stub (tools.exercises.student_stub) and copies of the cells that check
    it; then the solution and its checks, as the master has them. One execution then shows
    both what the student copy does at the exercise and what the master does."""
    import copy

    from tools.exercises import check_cells, is_solution, student_stub

    def hidden(source: str, name: str, solution_id: str) -> nbformat.NotebookNode:
        cell = nbformat.v4.new_code_cell(source)
        cell.id, cell.metadata["tags"] = f"{REHEARSAL}{name}-{solution_id}", []
        return cell

    cells = []
    for i, cell in enumerate(nb.cells):
        if is_solution(cell):
            cells.append(hidden(_SAVE, "save", cell.id))
            stub = nbformat.v4.new_code_cell(student_stub(cell))
            stub.id = f"{REHEARSAL}{cell.id}"
            stub.metadata["tags"] = ["exercise"]       # as tools.classroom tags it
            cells.append(stub)
            for j in check_cells(nb.cells, i):
                check = copy.deepcopy(nb.cells[j])
                check.id = f"{REHEARSAL}{check.id}"
                cells.append(check)
            cells.append(hidden(_RESTORE, "restore", cell.id))
        cells.append(cell)
    nb.cells = cells
    return nb


def assert_student_copy_behaves(rehearsed: list) -> None:
    """What the stub and its checks showed: the check ran and asked for an answer (✎) or
    marked it ✗; it never passed an empty answer."""
    checks = [c for c in rehearsed if c.cell_type == "code" and c.get("outputs")]
    assert checks, "the exercise check did not run on the student's stub"
    text = "".join(output_text(c) for c in rehearsed)
    assert "✎" in text or "✗" in text, f"the check did not ask for an answer: {text[-800:]}"
    assert "All ranks right!" not in text, "the check passed the student copy's empty answer"


def execute(notebook: Path, out_dir: Path, cell_timeout_s: int = 600,
            **parameters) -> nbformat.NotebookNode:
    """Run `notebook` with papermill, `parameters` injected; return the executed copy.

    At the world size where the series' rules are checked (executed_checks), the run also
    rehearses each exercise as the student copy has it (`rehearse`): the stub and its
    checks run before the solution, are held to `assert_student_copy_behaves`, and are
    left out of the copy returned, which is the master's as it ran."""
    from tools.execute import run_notebook

    import os

    out = out_dir / f"{notebook.stem}-{'-'.join(f'{k}{v}' for k, v in parameters.items()) or 'default'}.ipynb"
    rehearsing = checked_here(notebook, parameters)
    # ipykernel forwards what a process writes to fd 2 (torch's C++ logs) except under
    # pytest: without the variable the kernel and its engines show what a build shows.
    under_test = os.environ.pop("PYTEST_CURRENT_TEST", None)
    try:
        run_notebook(notebook, out, parameters, cell_timeout_s=cell_timeout_s,
                     edit=rehearse if rehearsing else None)
    finally:
        if under_test is not None:
            os.environ["PYTEST_CURRENT_TEST"] = under_test
    executed = nbformat.read(out, as_version=4)
    rehearsed = [c for c in executed.cells if c.get("id", "").startswith(REHEARSAL)]
    if rehearsed:
        executed.cells = [c for c in executed.cells if c not in rehearsed]
        nbformat.write(executed, out)
        assert_student_copy_behaves(rehearsed)
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


def crossed_lines(nb) -> list[tuple[str, str]]:
    """(cell id, line) for every printed or displayed line with a ✗: what a failing
    `assert not crossed_lines(nb)` shows, so a flaky check names itself."""
    return [(c.get("id", "?"), line.strip()[:300]) for c in nb.cells if c.cell_type == "code"
            for line in output_text(c).splitlines() if "✗" in line]


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
