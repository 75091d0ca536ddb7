"""benchmarks/start_times.py: the first, cold and warm starts `make bench` pairs with torchrun."""
from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

from benchmarks import start_times
from child import wait_until
from helpers.bench.ratios import Group, Ratio, settle
from helpers.runtime.processes import running

SCRIPT = str(start_times.REPO / "benchmarks" / "start_times.py")


def _fake_processes(monkeypatch, seconds: dict[str, object]) -> list[str]:
    """cluster_starts replaced: each call is a new "process" numbered in `ran`, its records'
    seconds drawn from `seconds[kind]` (an iterator)."""
    ran: list[str] = []

    def cluster_starts(n: int, kind: str) -> list[dict]:
        ran.append(kind)
        return [{"kind": name, "process": len(ran), "first_collective_s": next(seconds[name])}
                for name in start_times.KINDS[kind]]
    monkeypatch.setattr(start_times, "cluster_starts", cluster_starts)
    return ran


def _group(starts: start_times.Starts) -> Group:
    return Group(measure={"torchrun": lambda: 10.0,
                          **{kind: (lambda kind=kind: starts.seconds(kind))
                             for kind in ("first", "cold", "warm")}},
                 ratios=[Ratio(kind, kind, "torchrun") for kind in ("first", "cold", "warm")])


def test_a_repeat_takes_its_first_and_cold_starts_from_one_process(monkeypatch):
    steady = {kind: itertools.repeat(value) for kind, value in
              (("first", 6.0), ("cold", 3.0), ("warm", 0.5))}
    ran = _fake_processes(monkeypatch, steady)
    records = {"first": [], "cold": [], "warm": []}
    group = settle(_group(start_times.Starts(4, records)), min_repeats=4, max_repeats=4)
    # one of each per repeat; every other repeat asks for cold before first
    assert group.repeats == 4 and ran == ["fresh", "warm", "warm", "fresh"] * 2
    assert [r["process"] for r in records["first"]] == [r["process"] for r in records["cold"]]
    assert [r.median for r in group.ratios] == [0.6, 0.3, 0.05]


def test_a_start_left_waiting_is_never_taken_by_a_later_repeat(monkeypatch):
    """first settles at once, cold does not: each later cold start is a new process's."""
    noisy = {"first": itertools.repeat(6.0), "cold": itertools.cycle([2.0, 4.0]),
             "warm": itertools.repeat(0.5)}
    ran = _fake_processes(monkeypatch, noisy)
    records = {"first": [], "cold": [], "warm": []}
    settle(_group(start_times.Starts(4, records)), min_repeats=3, max_repeats=6)
    processes = [r["process"] for r in records["cold"]]
    assert len(records["cold"]) == 6 and len(records["first"]) == 3
    assert len(set(processes)) == 6 and ran.count("fresh") == 6


def test_the_guards_say_met_missed_or_not_measured():
    found = [Ratio("cold", "c", "t", [0.4, 0.5, 0.6]), Ratio("warm", "w", "t", [0.2, 0.3])]
    checked = start_times.guards([Group(measure={}, ratios=found)])
    assert checked["cold"] == {"at_most": 1.0, "ratio": 0.5, "met": True}
    assert checked["warm"]["met"] is False and checked["warm"]["ratio"] == 0.25
    assert start_times.guard_lines(checked)[0].endswith("warm x0.250 <= 0.1: MISSED")
    none = start_times.guards([Group(measure={}, ratios=[Ratio("cold", "c", "t")])])
    assert none["cold"] == {"at_most": 1.0, "ratio": None, "met": False}
    assert "cold: not measured" in start_times.guard_lines(none)[0]


def test_the_child_refuses_what_it_does_not_know_at_once():
    done = subprocess.run([sys.executable, SCRIPT, "cold", "2"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "usage:" in done.stderr and "fresh|warm" in done.stderr


@pytest.mark.cold
def test_a_second_start_forks_from_the_server_the_first_one_started():
    """A real process: start, stop, start (2 ranks); the second start's engines come from
    the one forkserver the first left, which ends with the process."""
    done = subprocess.run([sys.executable, SCRIPT, "fresh", "2"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    first, cold = json.loads(done.stdout.splitlines()[-1])
    assert (first["kind"], cold["kind"]) == ("first", "cold")
    assert len(first["forkservers"]) == 1 and not first["forkserver_reused"]
    assert cold["forkservers"] == first["forkservers"] and cold["forkserver_reused"]
    assert "imports" in first["stages"] and "imports" not in cold["stages"]
    assert not first["reused"] and not cold["reused"]            # no warm engines
    server = first["forkservers"][0]
    assert wait_until(lambda: not running(server), 30), "the forkserver outlived its process"
