"""Warm start: one notebook's engines serve the next, emptied, and never two at once.

Every "notebook" here is a child Python process (cwd = the repository, this test
run's sandbox environment) that reports by printing JSON lines and, where a test
needs it to hold its cluster, waits for a line on stdin. No timings are asserted
(speed is measured in benchmarks): reuse is proved by the engine pids.
"""
from __future__ import annotations

import contextlib
import os
import time

import psutil
import pytest

from child import child_starter, wait_until
from helpers.runtime.processes import cluster_processes, running
from helpers.runtime.warm import security_dir, stop_warm_clusters, warm_cluster_id

pytestmark = pytest.mark.cold   # start-up, lifecycle, timeouts: never the session's warm engines

CHILD_TIMEOUT_S = 240.0   # one cluster start on a busy 2-core machine, with room to spare

# What the start with a dead warm engine may take beyond a cold start: a wait for the
# engine that is gone took 10 s more (before the nanny reported it); load moves two cold
# starts a few seconds apart.
DEAD_ENGINE_EXTRA_S = 6

PRELUDE = """
import json, sys
from helpers.runtime.cluster import start_cluster

def say(**values):
    print(json.dumps(values), flush=True)

def wait():
    sys.stdin.readline()

def report(c, **extra):
    view = c.client.direct_view(c.engine_ids)
    view.execute("t = torch.tensor([rank + 1.0]); dist.all_reduce(t)", block=True)
    say(cluster_id=c.cluster_id, reused=c.reused, warm=c.warm,
        pids=[r.pid for r in c.ranks],
        t=[s["t"].tolist() for s in c.pull("t")], **extra)
"""


def keepers(cluster_id: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            cmd = proc.cmdline()
            if cmd[1:4] == ["-m", "helpers.runtime.warm", "keep"] and cluster_id in cmd and running(proc):
                found.append(proc)
    return found


def cluster_file(cluster_id: str):
    return security_dir() / f"cluster-{cluster_id}.json"


@pytest.fixture
def children():
    """Children to start; whatever happens, they are killed and warm clusters ended."""
    stop_warm_clusters()   # whatever an earlier test left
    try:
        with child_starter(PRELUDE) as start:
            yield start
    finally:
        stop_warm_clusters()
        wid = warm_cluster_id(2)
        assert wait_until(lambda: cluster_processes(wid) == [] and keepers(wid) == [], 15)


START_AND_STOP = """
import time
started = time.monotonic()
c = start_cluster(2, "gloo", warm=True, quiet=True)
start_s = time.monotonic() - started
c.client.direct_view(c.engine_ids).execute("secret = 42", block=True)
report(c, secret=[s["secret"] for s in c.pull("secret")], start_s=start_s)
c.stop()
say(stopped=True)
"""

REUSE = """
import time
started = time.monotonic()
c = start_cluster(2, "gloo", warm=True, quiet=True)
start_s = time.monotonic() - started
c.client.direct_view(c.engine_ids).execute("present = 'secret' in dir()", block=True)
report(c, present=[s["present"] for s in c.pull("present")], start_s=start_s)
c.stop()
say(stopped=True)
"""


def test_the_next_notebook_reuses_the_engines_emptied(children):
    wid = warm_cluster_id(2)
    first = children(START_AND_STOP)
    one = first.read()
    assert first.read() == {"stopped": True}
    first.finish()
    assert one["cluster_id"] == wid and one["warm"] and not one["reused"]
    assert one["secret"] == [42, 42] and one["t"] == [[3.0], [3.0]]
    # the first notebook is gone; its engines are kept, idle, for the next one
    assert all(psutil.pid_exists(pid) for pid in one["pids"])
    assert len(cluster_processes(wid)) >= 5 and cluster_file(wid).exists()
    assert len(keepers(wid)) == 1

    second = children(REUSE)
    two = second.read()
    assert second.read() == {"stopped": True}
    second.finish()
    assert two["cluster_id"] == wid and two["reused"] and two["warm"]
    assert two["pids"] == one["pids"], "the engines were not reused"
    assert two["present"] == [False, False], "a variable carried over to the next notebook"
    assert two["t"] == [[3.0], [3.0]], "the re-created group gave a wrong all_reduce"


HOLD = """
c = start_cluster(2, "gloo", warm=True, quiet=True)
report(c)
wait()                                   # hold the warm cluster until told
report(c)
c.stop()
say(stopped=True)
"""

COLD_WHILE_HELD = """
c = start_cluster(2, "gloo", warm=True, quiet=True)
report(c)
cid = c.cluster_id
c.stop()
from helpers.runtime.processes import cluster_processes
say(stopped=True, left=len(cluster_processes(cid)))
"""


def test_a_held_warm_cluster_is_not_shared(children):
    wid = warm_cluster_id(2)
    a = children(HOLD)
    held = a.read()
    assert held["cluster_id"] == wid and held["warm"] and held["t"] == [[3.0], [3.0]]

    b = children(COLD_WHILE_HELD)
    cold = b.read()
    assert b.read() == {"stopped": True, "left": 0}
    b.finish()
    assert not cold["reused"] and not cold["warm"], "B was given a cluster A holds"
    assert cold["cluster_id"] != wid
    assert not set(cold["pids"]) & set(held["pids"])
    assert cold["t"] == [[3.0], [3.0]]

    a.send()                                   # A's cluster still works after B
    again = a.read()
    assert again["pids"] == held["pids"] and again["t"] == [[3.0], [3.0]]
    assert a.read() == {"stopped": True}
    a.finish()


START_STOP_FROM_ENV = """
c = start_cluster(2, "gloo", quiet=True)     # warm from TUTORIAL_WARM_START
report(c)
c.stop()
say(stopped=True)
"""


def test_the_keeper_ends_an_idle_warm_cluster(children):
    wid = warm_cluster_id(2)
    env = dict(os.environ, TUTORIAL_WARM_START="1", TUTORIAL_WARM_IDLE="3")
    child = children(START_STOP_FROM_ENV, env)
    info = child.read()
    assert child.read() == {"stopped": True}
    assert info["cluster_id"] == wid and info["warm"]
    # kept at first (stop() does not end a warm cluster) ...
    assert cluster_processes(wid), "stop() ended the warm cluster itself"
    child.finish()
    # ... then ended by its keeper once idle for 3 s
    assert wait_until(lambda: cluster_processes(wid) == [], 30), \
        [p.pid for p in cluster_processes(wid)]
    # An ending process stops showing its environment a moment before it is gone.
    assert wait_until(lambda: not any(running(pid) for pid in info["pids"]), 10)
    # discard() ends the processes first, then forgets the files: wait for the second step
    assert wait_until(lambda: not cluster_file(wid).exists(), 10), cluster_file(wid)
    assert wait_until(lambda: keepers(wid) == [], 10)


def test_stop_warm_clusters_ends_them_at_once(children):
    wid = warm_cluster_id(2)
    child = children(START_AND_STOP)
    info = child.read()
    assert child.read() == {"stopped": True}
    child.finish()
    assert info["warm"] and len(cluster_processes(wid)) >= 5 and len(keepers(wid)) == 1

    assert stop_warm_clusters() == [wid]
    assert cluster_processes(wid) == []
    # discard() ends the processes first, then forgets the files: wait for the second step
    assert wait_until(lambda: not cluster_file(wid).exists(), 10), cluster_file(wid)
    assert wait_until(lambda: keepers(wid) == [], 10)
    assert stop_warm_clusters() == []


def test_a_warm_cluster_with_a_dead_engine_is_not_reused(children):
    wid = warm_cluster_id(2)
    first = children(START_AND_STOP)
    one = first.read()
    assert first.read() == {"stopped": True}
    first.finish()
    victim = psutil.Process(one["pids"][1])
    victim.kill()
    assert wait_until(lambda: not running(victim), 10)

    second = children(REUSE)
    two = second.read()
    assert second.read() == {"stopped": True}
    second.finish()
    assert not two["reused"], "a cluster with a dead engine was reused"
    # seen at once (the engine's nanny reported it): no wait for the engine that is gone
    # (10 s before), only a cold start, held against the cold start of the first child
    # (a fresh process too) on this machine, now
    assert two["start_s"] - one["start_s"] < DEAD_ENGINE_EXTRA_S, (one["start_s"],
                                                                    two["start_s"])
    assert two["warm"] and two["cluster_id"] == wid      # a new warm cluster in its place
    assert len(two["pids"]) == 2 and not set(two["pids"]) & set(one["pids"])
    assert two["t"] == [[3.0], [3.0]] and two["present"] == [False, False]
    # the broken cluster's surviving engine went with it
    survivor = one["pids"][0]
    assert not (psutil.pid_exists(survivor) and running(psutil.Process(survivor)))


def test_a_replaced_warm_cluster_has_one_keeper(children):
    wid = warm_cluster_id(2)
    first = children(START_AND_STOP)
    one = first.read()
    first.read()
    first.finish()
    old_keepers = keepers(wid)
    psutil.Process(one["pids"][1]).kill()
    second = children(REUSE)
    two = second.read()
    second.read()
    second.finish()
    assert not two["reused"]
    time.sleep(3)   # a keeper polls every second
    assert not set(p.pid for p in keepers(wid)) & set(p.pid for p in old_keepers)
    assert len(keepers(wid)) == 1, [p.pid for p in keepers(wid)]


def test_a_warm_cluster_is_named_for_its_engine_settings(monkeypatch):
    """Engines started with other settings (here OMP_NUM_THREADS) are another warm cluster:
    a notebook never reuses engines that ignore what its environment asks for."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    ours = warm_cluster_id(2)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")     # what the engines get anyway
    assert warm_cluster_id(2) == ours
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert warm_cluster_id(2) != ours
    assert warm_cluster_id(2).startswith("nccl-notebooks-warm-2-")


def test_the_keeper_watches_the_processes_it_found_instead_of_scanning_every_second(
        monkeypatch, tmp_path):
    """Finding a cluster's processes reads every process's environment: the keeper does it
    until it finds them and once more when those are gone, not at every poll (a parked warm
    cluster's keeper used 0.6 % of a core among 100 processes, more among more)."""
    import types

    from helpers.runtime import warm

    polls, scans = [], []
    found = [psutil.Process()]           # stands for the cluster's processes: this one

    def sleep(seconds):
        polls.append(seconds)
        if len(polls) == 40:             # the cluster ends before the 40th look
            found.clear()

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))     # the lease file goes there
    monkeypatch.setattr(warm, "time", types.SimpleNamespace(sleep=sleep,
                                                            monotonic=time.monotonic))
    monkeypatch.setattr(warm, "cluster_processes",
                        lambda cluster_id: scans.append(len(polls)) or list(found))
    monkeypatch.setattr(warm, "_keeps", lambda cluster_id: True)
    monkeypatch.setattr(warm.processes, "running", lambda proc: bool(found))
    monkeypatch.setattr(warm, "discard", lambda cluster_id: pytest.fail("not idle yet"))
    warm.keep("nccl-notebooks-warm-test-keeper", idle_s=600)
    assert scans == [1, 40], scans       # found at the first look; gone, and confirmed
