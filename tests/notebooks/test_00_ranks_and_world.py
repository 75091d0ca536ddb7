"""Notebook 00 runs headless with real engines and reports each rank exactly once; the
names it lists are the engines' and its barrier cell runs as a torchrun script."""
from __future__ import annotations

import ast
import json
import os
import re
import sys
from pathlib import Path

import nbformat
import pytest

from animation_checks import only_animation
from conftest import NOTEBOOKS
from notebook_runner import cell_script, execute, notebook_text, output_text, run_bounded
from reports import shown_reports

NB = NOTEBOOKS / "00_ranks_and_world.ipynb"


def _ranks_reported(nb) -> list[int]:
    text = notebook_text(nb)
    return [int(r) for r in re.findall(r"^rank (\d+) of \d+:", text, flags=re.M)]


@pytest.mark.notebook
def test_notebook00_default_reports_each_of_4_ranks_once(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(tmp_path / "results"))
    nb = execute(NB, tmp_path)
    assert sorted(_ranks_reported(nb)) == [0, 1, 2, 3]
    text = notebook_text(nb)
    every_rank = {r: True for r in range(4)}
    [names] = shown_reports(nb, "engine-names-check")   # the six names, on every engine
    assert names.by_rank() == every_rank and names.oks == [True] * 4
    assert names.texts() == {r: ", ".join(_listed()) for r in range(4)}
    [barrier] = shown_reports(nb, "c17")                # no rank left before the last arrived
    assert barrier.by_rank() == every_rank and barrier.oks == [True] * 4
    assert len(shown_reports(nb)) == 2
    assert "✗" not in text
    script = [c for c in nb.cells if c.get("id") == "torchrun-script"][0]
    assert output_text(script).rstrip("\n") == _script().rstrip("\n")   # printed as it is
    assert "4 rank(s) · backend gloo" in text
    assert "only rank 0 runs this cell" in text
    pngs = [(c.id, o) for c in nb.cells for o in c.get("outputs", [])
            if "image/png" in o.get("data", {})]
    assert [cid for cid, _ in pngs] == ["scheme", "c10", "c16"], (
        "the scheme, each rank's box, then the barrier plot")
    assert nb.cells[1].id == "scheme" and nb.cells[1].execution_count == 1   # before the ranks
    # the barrier animation ends with each rank's recorded arrival and departure
    spans = only_animation(nb, "spans")["last"]["spans"]["dist.barrier()"]
    printed = re.findall(r"rank (\d): arrived after ([\d.]+) s, left the barrier after "
                         r"([\d.]+) s", text)
    assert len(printed) == 4
    for r, arrived, left in printed:
        ends = {kind: x1 for kind, _, x1 in spans[int(r)]}
        assert abs(ends["waiting in dist.barrier()"] - float(left)) <= 0.005
        assert abs(ends.get("working", 0.0) - float(arrived)) <= 0.005
    # the timings the index card draws are the ones printed
    saved = json.loads((tmp_path / "results" / "00_ranks_and_world.json").read_text())
    assert saved["kind"] == "00_ranks_and_world"
    assert sorted((t["rank"], round(t["arrived"], 2), round(t["left"], 2))
                  for t in saved["timings"]) == \
        sorted((int(r), float(a), float(lft)) for r, a, lft in printed)


@pytest.mark.notebook
def test_notebook00_papermill_parameter_sets_the_world_size(tmp_path):
    nb = execute(NB, tmp_path, n_ranks=3)
    assert sorted(_ranks_reported(nb)) == [0, 1, 2]


@pytest.mark.notebook
def test_notebook00_environment_sets_the_world_size(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_RANKS", "2")
    nb = execute(NB, tmp_path)
    assert sorted(_ranks_reported(nb)) == [0, 1]


# ------------------------------------------------------------------ without engines

def _cells() -> dict[str, str]:
    return {c.id: c.source for c in nbformat.read(NB, as_version=4).cells}


def _listed() -> list[str]:
    """The names of the check cell's `listed = [...]`."""
    [line] = [ln for ln in _cells()["engine-names-check"].splitlines() if ln.startswith("listed")]
    return ast.literal_eval(line.split("=", 1)[1].split("#")[0].strip())


def _script() -> str:
    """The script the torchrun cell prints."""
    return cell_script(NB, "torchrun-script")


def test_the_names_listed_are_the_ones_an_engine_gets():
    from tools.lint import engine_names

    listed = _listed()
    assert listed == sorted(listed) == sorted(engine_names())   # helpers/runtime/engine.py
    bullets = [ln for ln in _cells()["c05"].splitlines() if ln.startswith("- `")]
    described = [name for ln in bullets for name in re.findall(r"`(\w+)`", ln.split(":")[0])]
    assert sorted(described) == listed and len(described) == len(set(described)) == 6
    assert "six" in _cells()["c05"] and "six" in _cells()["engine-names-check"]


def test_the_barrier_cell_runs_as_a_torchrun_script(tmp_path):
    script = _script()
    body = _cells()["c14"].split("\n", 1)[1]             # the %%px cell without its first line
    assert _cells()["c14"].startswith("%%px\n") and body in script
    path = tmp_path / "barrier.py"
    path.write_text(script)
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    code, out = run_bounded([str(torchrun), "--standalone", "--nproc_per_node=2",
                             "--log-dir", str(tmp_path / "logs"), str(path)],
                            tmp_path, env, timeout_s=180)
    assert code == 0, out
    # not anchored to line starts: the two processes share one pipe, and a line of one
    # can land right after the other's, before its newline
    lines = re.findall(r"rank (\d): arrived after ([\d.]+) s, left the barrier after ([\d.]+) s",
                       out)
    assert sorted(int(r) for r, _, _ in lines) == [0, 1], out
    last_arrival = max(float(arrived) for _, arrived, _ in lines)
    assert last_arrival >= 0.19                               # rank 1 slept 0.2 s
    # each clock starts as its rank leaves the first barrier, tens of ms apart on a busy
    # machine: 0.1 s slack, half of what rank 0 would gain if the barrier did not wait
    assert all(float(left) >= last_arrival - 0.1 for _, _, left in lines), lines
