"""`read_once_started` (helpers/debugging/stacks.py), which notebook 28's section 5 reads
the ranks with right after a `%%px --noblock` cell: it waits until every rank that runs the
cell shows a frame of it, in bounded time. The ranks here are real processes, read by
py-spy, whose "cell" is a file in a folder named as ipykernel names its cells' files, and
which begin it when told to."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.debugging.stacks import innermost, read_once_started, stacks

CELL = "import time\n\ndef wait_here():\n    time.sleep(60)\n"
# up at once, then the cell `delay` seconds later (time.sleep in <string>: no frame kept);
# threading imported, as in an engine: py-spy names the main thread from its table
RANK = ("import sys, threading, time\nprint('up', flush=True)\ntime.sleep({delay})\n"
        "sys.path.insert(0, {folder!r})\nimport cell\ncell.wait_here()\n")


@pytest.fixture
def ranks(tmp_path: Path):
    """start(delays) → a cluster-like object whose rank r begins its cell delays[r] s in."""
    folder = tmp_path / "ipykernel_4242"
    folder.mkdir()
    (folder / "cell.py").write_text(CELL)
    started: list[subprocess.Popen] = []

    def start(delays: list[float]) -> SimpleNamespace:
        for delay in delays:
            started.append(subprocess.Popen(
                [sys.executable, "-c", RANK.format(delay=delay, folder=str(folder))],
                stdout=subprocess.PIPE, text=True))
        for process in started:
            assert process.stdout.readline() == "up\n"
        return SimpleNamespace(ranks=[SimpleNamespace(rank=r, pid=p.pid)
                                      for r, p in enumerate(started)])

    yield start
    for process in started:
        process.kill()
        process.wait()


def test_a_rank_that_begins_late_is_read_in_its_cell(ranks):
    cluster = ranks([1.5, 0.0])
    assert innermost(stacks(cluster)[0]) == "no Python frame of yours (idle)"  # read at once
    began = time.monotonic()
    found = read_once_started(cluster, running=lambda: [0, 1])
    assert time.monotonic() - began < 10
    for rank in (0, 1):
        assert innermost(found[rank]) == "wait_here (the cell, line 4)", found


def test_a_rank_that_never_begins_is_named_at_the_deadline(ranks):
    cluster = ranks([0.0, 60.0])
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=r"rank\(s\) 1 had not begun the cell after 0.5 s"):
        read_once_started(cluster, running=lambda: [0, 1], deadline_s=0.5)
    assert time.monotonic() - began < 5


def test_a_rank_that_finished_is_not_waited_for(ranks):
    cluster = ranks([0.0, 60.0])
    began = time.monotonic()
    found = read_once_started(cluster, running=lambda: [0], deadline_s=30)
    assert time.monotonic() - began < 10
    assert innermost(found[0]) == "wait_here (the cell, line 4)"
    assert innermost(found[1]) == "no Python frame of yours (idle)"
