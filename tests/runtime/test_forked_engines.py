"""The local engines: forked from the starting process's forkserver by ipyparallel's launcher
plug-in point (helpers/runtime/forked_engines.py), stopped by ipyparallel itself."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest
from ipyparallel.cluster.launcher import find_launcher_class

from child import wait_until
from conftest import REPO
from helpers.runtime import forked_engines, launchers
from helpers.runtime.cluster import start_cluster
from helpers.runtime.processes import cluster_processes, running

pytestmark = pytest.mark.cold   # start-up, lifecycle: never the session's warm engines


def test_the_entry_point_names_our_launcher_and_the_local_plan_uses_it():
    found = find_launcher_class(forked_engines.ENTRY_POINT, "engine")
    assert found is forked_engines.ForkserverEngineSetLauncher
    plan = launchers.cluster_options("local", 2)
    assert plan.cluster_kwargs["engine_launcher_class"] == forked_engines.ENTRY_POINT


def _forkserver_of(pid: int) -> psutil.Process:
    parent = psutil.Process(pid).parent()
    assert "multiprocessing.forkserver" in " ".join(parent.cmdline()), parent.cmdline()
    return parent


def test_engines_are_children_of_one_forkserver_that_a_later_start_reuses():
    with start_cluster(2, "gloo", quiet=True, warm=False) as first:
        servers = {_forkserver_of(info.pid).pid for info in first.ranks}
        assert len(servers) == 1
        assert psutil.Process(first.ranks[0].pid).ppid() != os.getpid()
    with start_cluster(3, "gloo", quiet=True, warm=False) as later:
        assert {_forkserver_of(info.pid).pid for info in later.ranks} == servers
        later.run("t = torch.ones(1) * dist.get_rank()\ndist.all_reduce(t)")
        assert [t.item() for t in later.values("t")] == [3.0] * 3
        engine_pids = [info.pid for info in later.ranks]
    assert not any(running(pid) for pid in engine_pids)
    assert running(next(iter(servers))), "the server serves this process's next start"


STOP_BY_FILE = """
import sys
from helpers.runtime.processes import stop_by_file
stop_by_file(sys.argv[1], sys.argv[2])
"""


def test_another_process_stops_a_forked_cluster_by_its_file():
    """What the reaper and `ipcluster stop` do: ipyparallel rebuilds our launcher from the
    cluster file (LocalProcessLauncher.from_dict) and stops every engine it lists."""
    from helpers.runtime.processes import current_ipython_dir

    cluster = start_cluster(2, "gloo", quiet=True, warm=False)
    try:
        procs = cluster_processes(cluster.cluster_id)
        engines = {info.pid for info in cluster.ranks}
        assert engines <= {p.pid for p in procs}, "forked engines are found by their log"
        out = subprocess.run([sys.executable, "-c", STOP_BY_FILE, cluster.cluster_id,
                              current_ipython_dir()], cwd=REPO, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
        assert wait_until(lambda: cluster_processes(cluster.cluster_id) == [], 30), \
            [p.pid for p in cluster_processes(cluster.cluster_id)]
    finally:
        cluster.stop()


@pytest.mark.parametrize("server, env, differs", [
    ({"TORCH_CPP_LOG_LEVEL": "ERROR"}, {"TORCH_CPP_LOG_LEVEL": "ERROR", "X": "1"}, False),
    ({"TORCH_CPP_LOG_LEVEL": "ERROR"}, {"TORCH_CPP_LOG_LEVEL": "WARNING"}, True),
    ({}, {"KMP_AFFINITY": "compact"}, True),
    ({"TORCHINDUCTOR_CACHE_DIR": "/c"}, {}, False),      # set by the import, unset here
    ({"OMP_NUM_THREADS": "4"}, {"OMP_NUM_THREADS": "1"}, False),  # set_num_threads does it
])
def test_an_engine_is_a_new_python_only_where_torch_read_another_environment(
        server, env, differs):
    assert forked_engines.read_differently(server, env) is differs


SCRIPT_EXIT = """
import json, sys
from helpers.runtime.cluster import start_cluster

if __name__ == "__main__":
    c = start_cluster(2, "gloo", quiet=True, warm=False)
    print(json.dumps([info.pid for info in c.ranks]), flush=True)
    sys.exit(0)          # no stop(): the exit handlers end the cluster
"""


def test_a_script_that_exits_without_stop_leaves_no_engine_and_does_not_hang(tmp_path):
    script = tmp_path / "exits.py"
    script.write_text(SCRIPT_EXIT)
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stderr[-3000:]
    pids = json.loads(out.stdout.strip().splitlines()[-1])
    assert wait_until(lambda: not any(running(pid) for pid in pids), 15), pids
