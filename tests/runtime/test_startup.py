"""Start-up: stage timings, the live progress of a start cell, a quick and complete stop.

The progress contract (a browser test relies on it): while waiting, the start cell's one
output says "engines registered n/N"; its last update is the summary, without that phrase.
"""
from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import NOTEBOOKS, REPO
from helpers.runtime.processes import cluster_processes
from helpers.runtime.progress import COLD_STAGES, WARM_STAGES, StartProgress
from test_leftovers import describe, kernel

pytestmark = pytest.mark.cold   # start-up, lifecycle, timeouts: never the session's warm engines

PROGRESS_MARKER = "engines registered"


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_reports_the_stages_in_order_with_counts():
    shown: list[str] = []
    clock = FakeClock()
    progress = StartProgress(4, COLD_STAGES, clock=clock, render=shown.append)
    assert "waiting: starting the controller" in shown[-1]
    clock.now += 1.5
    progress.done("controller")
    for count in (1, 2, 2, 4):   # a repeated count is not shown twice
        clock.now += 0.25
        progress.registered(count)
    progress.done("engines registered")
    clock.now += 0.5
    progress.done("torch ready")
    clock.now += 0.125
    progress.done("group joined")
    progress.finish("4 rank(s) · backend gloo")

    counts = [m.group(1) for text in shown
              for m in [re.search(r"waiting: engines registered (\d+/\d+)", text)] if m]
    assert counts == ["0/4", "1/4", "2/4", "4/4"]
    assert [text for text in shown if "torch ready on every engine" in text], shown
    assert shown[-1] == "4 rank(s) · backend gloo"
    assert PROGRESS_MARKER not in shown[-1]
    assert list(progress.timings) == list(COLD_STAGES)
    assert progress.timings == pytest.approx(
        {"controller": 1.5, "engines registered": 1.0, "torch ready": 0.5,
         "group joined": 0.125})


def test_progress_refuses_a_stage_out_of_order_and_restarts_for_a_cold_start():
    progress = StartProgress(2, WARM_STAGES, render=lambda text: None)
    with pytest.raises(ValueError, match="out of order"):
        progress.done("group joined")
    progress.done("reuse")
    progress.restart(COLD_STAGES)   # the warm cluster was unusable: a cold start follows
    assert progress.timings == {} and progress.current == "controller"


def test_progress_shows_nothing_outside_a_kernel():
    progress = StartProgress(2, COLD_STAGES)   # this test process has no IPython kernel
    assert not progress.shown


def test_plain_python_prints_the_summary_only_and_records_stage_timings():
    script = """
import json, time
from helpers.runtime.cluster import start_cluster
t0 = time.perf_counter()
c = start_cluster(2, "gloo")
wall = time.perf_counter() - t0
timings = c.start_timings
t0 = time.perf_counter()
c.stop()
print(json.dumps({"timings": timings, "wall": wall, "stop": time.perf_counter() - t0,
                  "cluster_id": c.cluster_id}))
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    printed = "\n".join(lines[:-1])
    assert printed.startswith("2 rank(s) · backend gloo · new engines (local launcher)\n"), \
        printed
    assert re.search(r"^\s+1\s+cpu\s+\S+\s+\d+\s+\d+$", printed, re.M)   # the table, as text
    assert PROGRESS_MARKER not in printed and "waiting" not in printed
    assert re.search(r"^started in [\d.]+ s: controller [\d.]+ s · ", printed, re.M)
    assert list(result["timings"]) == list(COLD_STAGES)
    assert all(seconds >= 0 for seconds in result["timings"].values())
    assert sum(result["timings"].values()) <= result["wall"]
    assert cluster_processes(result["cluster_id"]) == []


def test_stop_of_4_ranks_is_quick_and_leaves_nothing():
    from helpers.runtime.cluster import start_cluster

    cluster = start_cluster(4, "gloo", quiet=True)
    cluster_id = cluster.cluster_id
    assert len(cluster_processes(cluster_id)) >= 9   # controller, 4 engines, 4 nannies
    cluster.run("t = torch.ones(2); dist.all_reduce(t)")
    t0 = time.perf_counter()
    cluster.stop()
    stop_s = time.perf_counter() - t0
    left = cluster_processes(cluster_id)
    assert left == [], describe(left)
    # ~0.3 s measured; the bound leaves room for a busy machine (it was 1.6-2.7 s)
    assert stop_s < 1.5, stop_s


def test_forked_engines_are_separate_processes_with_their_own_random_state():
    from helpers.runtime.cluster import start_cluster

    with start_cluster(3, "gloo", quiet=True) as cluster:
        cluster.run("import random; r = random.random(); s = torch.rand(1).item()")
        draws = cluster.values("r") + cluster.values("s")
        pids = [info.pid for info in cluster.ranks]
    assert len(set(pids)) == 3
    assert len(set(draws)) == 6, draws


@pytest.mark.timing
def test_each_engine_has_ipyparallels_nanny_which_reports_its_death_at_once():
    """Every engine runs ipyparallel's own nanny (`python -m ipyparallel.engine.nanny`, its
    child), which tells the controller the moment its engine dies, not after the missed
    heartbeats (30 s on one host: launchers.CONTROLLER_MISSES)."""
    import signal

    import psutil

    from helpers.runtime.cluster import start_cluster

    with start_cluster(3, "gloo", quiet=True) as cluster:
        procs = cluster_processes(cluster.cluster_id)
        for info in cluster.ranks:
            nannies = [c for c in psutil.Process(info.pid).children()
                       if "ipyparallel.engine.nanny" in " ".join(c.cmdline())]
            assert len(nannies) == 1, (info.rank, describe(procs))
        killed_at = time.monotonic()
        os.kill(cluster.ranks[2].pid, signal.SIGKILL)
        while len(cluster.client.ids) == 3 and time.monotonic() - killed_at < 20:
            time.sleep(0.1)
        assert len(cluster.client.ids) == 2, "the controller never heard of the death"
        assert time.monotonic() - killed_at < 10


def _iopub_of_start_cell(kc, code: str, timeout_s: float = 300) -> list[dict]:
    messages: list[dict] = []
    reply = kc.execute_interactive(code, timeout=timeout_s, output_hook=messages.append)
    errors = [m for m in messages if m["header"]["msg_type"] == "error"]
    assert reply["content"]["status"] == "ok", errors
    return messages


def test_a_kernel_start_cell_shows_live_progress_then_only_the_summary():
    with kernel() as (_km, kc):
        messages = _iopub_of_start_cell(
            kc, "from helpers import start_cluster\nc = start_cluster(2, 'gloo')")
        _iopub_of_start_cell(kc, "c.stop()")
    displays = [m for m in messages
                if m["header"]["msg_type"] in ("display_data", "update_display_data")]
    assert displays and displays[0]["header"]["msg_type"] == "display_data"
    ids = {m["content"]["transient"]["display_id"] for m in displays}
    assert len(ids) == 1, "one output, updated in place"
    texts = [m["content"]["data"]["text/plain"] for m in displays]
    counts = re.findall(rf"{PROGRESS_MARKER} (\d)/2", "\n".join(texts))
    assert counts and counts == sorted(counts), texts
    assert texts[-1].startswith("2 rank(s) · backend gloo"), texts[-1]
    assert PROGRESS_MARKER not in texts[-1]
    # on the page: one line, the table of ranks folded under it (text/plain keeps both)
    line, *details = texts[-1].splitlines()
    assert line == "2 rank(s) · backend gloo · new engines (local launcher)", texts[-1]
    assert len(details) == 5, texts[-1]   # settings, header, 2 ranks, timings
    assert re.match(r"\s+0\s+cpu\s", details[2]) and details[-1].startswith("started in")
    page = displays[-1]["content"]["data"]["text/html"]
    assert page.startswith(f"<details><summary>{line}</summary><pre>"), page
    assert page.endswith("</pre></details>") and html.escape(details[-1]) in page
    streams = [m for m in messages if m["header"]["msg_type"] == "stream"]
    assert not any("rank(s)" in m["content"]["text"] for m in streams), "summary twice"


@pytest.mark.notebook
def test_executed_notebook00_keeps_the_summary_and_no_progress(tmp_path):
    from notebook_runner import execute

    nb = execute(NOTEBOOKS / "00_ranks_and_world.ipynb", tmp_path)
    outputs = [out for cell in nb.cells if cell.cell_type == "code"
               for out in cell.get("outputs", [])]
    texts = [out.get("text", "") + str(out.get("data", {}).get("text/plain", ""))
             for out in outputs]
    assert not [t for t in texts if PROGRESS_MARKER in t or "waiting:" in t], texts
    summaries = [t for t in texts if "rank(s) · backend gloo" in t]
    assert len(summaries) == 1 and "started in" in summaries[0], summaries


@pytest.mark.timing
def test_interrupting_a_hung_px_cell_reaches_the_forked_engines():
    """Kernel → Interrupt during a %%px cell: ipyparallel's nannies signal each engine
    (nb 13)."""
    with kernel() as (km, kc):
        _iopub_of_start_cell(kc, "from helpers import start_cluster\n"
                                 "c = start_cluster(2, 'gloo', quiet=True)")
        msg_id = kc.execute("%%px\nimport time\nt0 = time.time()\ntime.sleep(600)")
        time.sleep(5)   # the cell is running on both engines
        t0 = time.perf_counter()
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=60)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert time.perf_counter() - t0 < 30, "the engines were not interrupted"
        # both engines stopped sleeping and still serve cells
        out = []
        kc.execute_interactive("%%px\nprint('alive', rank, round(time.time() - t0) < 300)",
                               timeout=60, output_hook=out.append)
        text = "".join(m["content"].get("text", "") for m in out
                       if m["header"]["msg_type"] == "stream")
        assert "alive 0 True" in text and "alive 1 True" in text, text
        _iopub_of_start_cell(kc, "c.stop()")


@pytest.mark.timing
def test_engines_that_cannot_start_are_a_clear_error_in_bounded_time(tmp_path):
    """An engine that dies before registering (here: torch fails to import) is named."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('a broken torch, for this test')\n")
    script = """
import time
from helpers.runtime.cluster import start_cluster
t0 = time.perf_counter()
try:
    start_cluster(2, "gloo", quiet=True)
except RuntimeError as err:
    print("ERROR", round(time.perf_counter() - t0, 1), err)
"""
    env = dict(os.environ, PYTHONPATH=str(tmp_path))   # the notebook side needs no torch
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert "ERROR" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    assert "before the engine processes exited" in out.stdout
    assert "a broken torch, for this test" in out.stdout   # the engine's own traceback
    seconds = float(out.stdout.split("ERROR", 1)[1].split()[0])
    assert seconds < 60, seconds


@pytest.mark.timing
def test_a_script_that_forks_engines_without_a_main_guard_is_told_how(tmp_path):
    """A forked engine imports the script that started it first (multiprocessing's rule):
    a script that starts a cluster at its top level gets an error that says what to do,
    in bounded time, and leaves nothing running."""
    script = tmp_path / "unguarded.py"
    script.write_text("from helpers.runtime.cluster import start_cluster\n"
                      "start_cluster(2, 'gloo', quiet=True)\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    began = time.monotonic()
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and time.monotonic() - began < 120
    assert "before the engine processes exited" in out.stderr, out.stderr[-3000:]
    assert "call start_cluster() under" in out.stderr, out.stderr[-3000:]
