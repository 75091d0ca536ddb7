"""The start measurements of benchmarks/notebook_vs_torchrun.py, and its start guards.

    python benchmarks/start_times.py fresh|warm RANKS     # one fresh process: JSON records

A start is timed from the start cell to the first collective, in a fresh Python process
(this script), as a kernel's cells run: "fresh" runs `from helpers import start_cluster`,
`start_cluster` and one all_reduce, stops, then `start_cluster` and one all_reduce again.
The first start starts the process's `multiprocessing` forkserver, which imports torch
once (helpers/runtime/forked_engines.py); the second ("cold") forks its engines from that
same server. "warm" takes over the warm cluster a previous process left.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))      # run as a script: helpers/ is the repository's
if TYPE_CHECKING:
    from helpers.bench.ratios import Group
GUARDS = {"cold": 1.0, "warm": 0.1}   # issue 51: at most this many times torchrun's start
FORKSERVER_MAIN = "from multiprocessing.forkserver import main"   # in its command line
KINDS = {"fresh": ("first", "cold"), "warm": ("warm",)}


def cluster_starts(n: int, kind: str) -> list[dict]:
    """A fresh Python process running child(kind, n): a record per start (`kind` "fresh":
    "first", "cold"; "warm"), its stage times and "first_collective_s" (start cell to
    first all_reduce, seconds)."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), kind, str(n)],
                         cwd=REPO, check=True, capture_output=True, text=True,
                         timeout=600).stdout
    records = json.loads(out.strip().splitlines()[-1])
    for record in records:        # first and cold: the one process that ran both
        record["python process (launch to exit)"] = time.perf_counter() - t0
    return records


class Starts:
    """The start measurements of the repeats, their records kept in `records[kind]`.
    "first" and "cold" come from one fresh process: whichever a repeat asks for first
    runs it, and the other start's record waits for the same repeat's ask."""

    def __init__(self, n: int, records: dict[str, list[dict]]):
        self.n, self.records = n, records
        self.waiting: dict[str, dict] = {}

    def seconds(self, kind: str) -> float:
        """Start cell to first collective of a `kind` ("first", "cold", "warm") start."""
        if kind not in self.waiting:
            ran = cluster_starts(self.n, "warm" if kind == "warm" else "fresh")
            self.waiting = {record["kind"]: record for record in ran}
        record = self.waiting.pop(kind)
        self.records[kind].append(record)
        return record["first_collective_s"]


def forkserver_pids() -> list[int]:
    """Pids of this process's children that are a multiprocessing forkserver."""
    import psutil

    found = []
    for proc in psutil.Process().children():
        try:
            if FORKSERVER_MAIN in " ".join(proc.cmdline()):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def child(kind: str, n: int) -> list[dict]:
    """In the fresh process: what a kernel's start cell and first %%px cell do, timed
    stage by stage, for each start of KINDS[kind]. The stages of start_cluster are its
    `start_timings` when it has them (seconds per stage), else one "start" stage; each
    record names the forkservers this process had after that start, and whether a later
    start's engines came from the one server the first start left ("forkserver_reused")."""
    t0 = time.perf_counter()
    from helpers import start_cluster

    t_imported = time.perf_counter()
    records = []
    for name in KINDS[kind]:
        again = bool(records)                       # a later start cell: nothing to import
        t_cell = time.perf_counter() if again else t0
        cluster = start_cluster(n, "gloo", quiet=True, warm=kind == "warm")
        t_started = time.perf_counter()
        cluster.run("t = torch.ones(1, device=device); dist.all_reduce(t)")
        t_first = time.perf_counter()
        stages = dict(getattr(cluster, "start_timings", None)
                      or {"start": t_started - (t_cell if again else t_imported)})
        reused = cluster.reused
        cluster.stop()
        t_stopped = time.perf_counter()
        imports = {} if again else {"imports": t_imported - t0}
        servers = forkserver_pids()
        records.append({"kind": name, "stages": {**imports, **stages,
                                                 "first collective": t_first - t_started,
                                                 "stop": t_stopped - t_first},
                        "start_s": t_started - t_cell, "first_collective_s": t_first - t_cell,
                        "reused": reused, "forkservers": servers,
                        "forkserver_reused": again and len(servers) == 1
                        and servers == records[0]["forkservers"]})
    return records


def guards(groups: list[Group]) -> dict[str, dict]:
    """Issue 51's start guards (GUARDS: at most this many times torchrun's start), each
    with the measured median ratio (None: not measured) and whether it holds."""
    found = {r.name: r.median for g in groups for r in g.ratios if r.values}
    return {name: {"at_most": limit, "ratio": found.get(name),
                   "met": name in found and found[name] <= limit}
            for name, limit in GUARDS.items()}


def guard_lines(checked: dict[str, dict]) -> list[str]:
    """One line: each guard, its ratio and verdict."""
    return ["guards (issue 51): " + "; ".join(
        f"{name} x{g['ratio']:.3f} <= {g['at_most']}: {'met' if g['met'] else 'MISSED'}"
        if g["ratio"] is not None else f"{name}: not measured"
        for name, g in checked.items())]


# A forkserver child (an engine) first imports this script, as every multiprocessing child
# imports its parent's main module: only a run as a script starts clusters.
if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in KINDS or not sys.argv[2].isdigit():
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(KINDS)} RANKS")
    print(json.dumps(child(sys.argv[1], int(sys.argv[2]))))
