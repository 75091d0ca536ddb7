"""Cold starts forked from a zygote (helpers/runtime/engine_zygote.py): one import of torch
per IPYTHONDIR, engines that look and behave as if started fresh, and a zygote that goes
when the kernels it served are gone (not their parent: JupyterLab, a build)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest

from child import Child, wait_until
from conftest import REPO
from helpers.runtime import engine_zygote
from helpers.runtime.cluster import start_cluster
from helpers.runtime.processes import OWNER_VARIABLE, cluster_processes

pytestmark = pytest.mark.cold   # start-up, lifecycle, timeouts: never the session's warm engines

ZYGOTE_MODULE = "helpers.runtime.engine_zygote"


OWN = "ZYGOTE_TEST_RUN"     # a variable no other start has: zygotes of these tests' own


@pytest.fixture(scope="module")
def own_zygote(tmp_path_factory):
    """An IPYTHONDIR of this file's own, and an environment no other start has, so the
    zygote its starts use is this file's alone; ended afterwards."""
    folder = tmp_path_factory.mktemp("zygote") / "ipython"
    folder.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IPYTHONDIR", str(folder))
        mp.setenv(OWN, __name__)
        yield __name__
    end_zygotes(__name__)


def end_zygotes(own: str) -> None:
    ours = [proc for proc in zygotes() if _environ(proc).get(OWN) == own]
    for proc in ours:
        proc.terminate()                # SIGTERM: it removes its socket as it goes
    for proc in psutil.wait_procs(ours, timeout=10)[1]:
        proc.kill()


def zygotes() -> list[psutil.Process]:
    """This user's zygotes (their forks have the same command, and an environment of their own)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if (proc.cmdline()[1:3] == ["-m", ZYGOTE_MODULE] and proc.status() != "zombie"
                    and engine_zygote.ROOM_VARIABLE in proc.environ()):
                found.append(proc)
        except psutil.Error:
            pass
    return found


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except psutil.Error:
        return {}


def engines_and_launched(cluster_id: str) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """The cluster's engines (not nannies) and the process ipyparallel launched."""
    engines, launched = [], []
    for proc in cluster_processes(cluster_id):
        command = proc.cmdline()
        if proc.name() == "ipp-nanny":
            continue
        if command[1:3] == ["-m", ZYGOTE_MODULE]:
            engines.append(proc)
        elif command[1:3] == ["-m", "helpers.runtime.engine_boot"]:
            launched.append(proc)
    return engines, launched


def the_zygote_of(engine: psutil.Process) -> psutil.Process:
    """The zygote an engine was forked from: the one listening where its command says."""
    path = engine.cmdline()[3]
    [zygote] = [z for z in zygotes() if z.cmdline()[3] == path]
    return zygote


def test_later_cold_starts_fork_their_engines_from_one_zygote(own_zygote):
    seen = []
    for n_ranks in (2, 3):
        with start_cluster(n_ranks=n_ranks, backend="gloo", quiet=True, warm=False,
                           launcher="local") as cluster:
            cluster.run("import os\nt = torch.ones(2) * (rank + 1)\ndist.all_reduce(t)\n"
                        "seed = torch.initial_seed()\nowner = os.environ['TUTORIAL_OWNER_PID']")
            total = sum(range(1, n_ranks + 1))
            assert [t.tolist() for t in cluster.values("t")] == [[float(total)] * 2] * n_ranks
            engines, launched = engines_and_launched(cluster.cluster_id)
            assert len(engines) == n_ranks and len(launched) == 1
            # each engine shows its own start's environment, as a process started for it
            for proc in engines:
                env = proc.environ()
                assert env["IPP_CLUSTER_ID"] == cluster.cluster_id
                assert env[OWNER_VARIABLE] == str(os.getpid())
                assert engine_zygote.ROOM_VARIABLE not in env
            assert cluster.values("owner") == [str(os.getpid())] * n_ranks
            zygote = the_zygote_of(engines[0])
            # the zygote itself belongs to no cluster: stopping one never ends it
            assert "IPP_CLUSTER_ID" not in zygote.environ()
            seen.append((zygote.pid, cluster.values("seed")))
            cluster_id = cluster.cluster_id
        assert wait_until(lambda: cluster_processes(cluster_id) == [], 10)
    (first, seeds_2), (second, seeds_3) = seen
    assert first == second, "the second start made a zygote of its own"
    seeds = seeds_2 + seeds_3
    assert len(set(seeds)) == len(seeds), f"forks share a random state: {seeds}"


def test_a_start_whose_environment_has_no_room_boots_in_place(own_zygote, monkeypatch):
    with start_cluster(n_ranks=2, backend="gloo", quiet=True, warm=False,
                       launcher="local"):
        pass                                    # the test's zygote is up
    # TUTORIAL_ variables are a start's own: they do not make another zygote
    monkeypatch.setenv("TUTORIAL_BIG", "x" * (engine_zygote.ROOM_BYTES + 1))
    with start_cluster(n_ranks=2, backend="gloo", quiet=True, warm=False,
                       launcher="local") as cluster:
        cluster.run("t = torch.ones(1)\ndist.all_reduce(t)")
        assert [t.tolist() for t in cluster.values("t")] == [[2.0]] * 2
        engines, launched = engines_and_launched(cluster.cluster_id)
        assert engines == [] and len(launched) == 2     # engine_boot and its forked copy


def test_without_the_zygote_engine_boot_boots_in_place(own_zygote, monkeypatch):
    monkeypatch.setenv("TUTORIAL_ZYGOTE", "0")
    own_zygote = "TUTORIAL_ZYGOTE=0"
    monkeypatch.setenv(OWN, own_zygote)
    with start_cluster(n_ranks=2, backend="gloo", quiet=True, warm=False,
                       launcher="local") as cluster:
        engines, launched = engines_and_launched(cluster.cluster_id)
        assert engines == [] and len(launched) == 2
    assert not [z for z in zygotes() if _environ(z).get(OWN) == own_zygote]


ZYGOTE_GONE_S = 20    # the reaper's notice of a killed owner, its stop, the zygote's poll


@pytest.mark.parametrize("how", ["exits", "is killed"])
def test_the_zygote_ends_once_the_kernel_it_served_is_gone_though_its_parent_lives(
        own_zygote, how):
    # The child is a kernel (JPY_PARENT_PID) whose parent, this process, goes on as
    # JupyterLab or a build does: the zygote goes with the kernel, not with its parent.
    child = Child("c = start_cluster(n_ranks=2, backend='gloo', quiet=True, warm=False)\n"
                  "say(cluster_id=c.cluster_id)\nsys.stdin.readline()\n",
                  env=dict(os.environ, JPY_PARENT_PID=str(os.getpid()),
                           **{OWN: "the child's"}))                 # its own zygote
    try:
        cluster_id = child.read()["cluster_id"]
        engines, _ = engines_and_launched(cluster_id)
        zygote = the_zygote_of(engines[0])
        listening_at = zygote.cmdline()[3]
        if how == "exits":
            child.finish()            # the child stops its cluster and exits
        else:
            child.proc.kill()         # SIGKILL: its reaper ends the cluster
            child.proc.wait(timeout=30)
        assert wait_until(lambda: not zygote.is_running(), ZYGOTE_GONE_S), \
            f"the zygote outlived the kernel it served ({how}) by {ZYGOTE_GONE_S} s"
        assert not os.path.exists(listening_at), "the zygote left its socket file"
        assert wait_until(lambda: cluster_processes(cluster_id) == [], ZYGOTE_GONE_S)
    finally:
        child.kill()
        end_zygotes("the child's")


@pytest.fixture
def zygote_cluster(own_zygote):
    """A 2-rank cluster whose engines the zygote forked: (engines, the launched process)."""
    cluster = start_cluster(n_ranks=2, backend="gloo", quiet=True, warm=False,
                            launcher="local")
    try:
        engines, [launched] = engines_and_launched(cluster.cluster_id)
        yield engines, launched
    finally:
        cluster.stop()


def test_a_killed_launcher_takes_its_engines_with_it(zygote_cluster):
    engines, launched = zygote_cluster
    zygote = the_zygote_of(engines[0])
    launched.send_signal(signal.SIGKILL)
    gone = psutil.wait_procs(engines, timeout=10)[1]
    assert gone == [], f"engines left running: {gone}"
    assert zygote.is_running(), "the zygote went with one caller"


def test_the_launched_process_passes_signals_on_and_exits_as_the_engine_does(zygote_cluster):
    engines, launched = zygote_cluster
    first = min(engines, key=lambda p: p.create_time())
    launched.send_signal(signal.SIGTERM)
    for proc in (first, launched):
        assert wait_until(lambda: not proc.is_running()
                          or proc.status() == psutil.STATUS_ZOMBIE, 15), proc


def test_a_zygote_serves_one_environment_less_what_each_start_has_of_its_own(tmp_path):
    env = {"PATH": "/usr/bin", "TUTORIAL_IPYTHONDIR": str(tmp_path), "OMP_NUM_THREADS": "1",
           "TERM": "xterm"}
    path = engine_zygote.socket_path(env)
    per_start = {"IPP_CLUSTER_ID": "a", "IPP_PROFILE_DIR": "/p", "TUTORIAL_OWNER_PID": "7",
                 "TUTORIAL_IPYTHONDIR": str(tmp_path / "other"), "IPYTHONDIR": "/i",
                 "JPY_PARENT_PID": "8", "PYTEST_CURRENT_TEST": "t", "MPLBACKEND": "agg",
                 "JUPYTER_RUNTIME_DIR": "/r", "PAGER": "cat", "CLICOLOR": "1"}
    assert engine_zygote.socket_path({**env, **per_start}) == path
    for name, value in [("OMP_NUM_THREADS", "2"), ("TORCH_CPP_LOG_LEVEL", "INFO"),
                        ("TERM", "xterm-color"), ("PATH", "/bin")]:
        assert engine_zygote.socket_path({**env, name: value}) != path, name
    assert engine_zygote.zygote_environment({**env, **per_start}) == {
        "PATH": "/usr/bin", "OMP_NUM_THREADS": "1", "TERM": "xterm"}


# Records each variable Python code reads as the zygote's imports run (a walk over every
# variable, as tqdm's envwrap makes to find its own, is not a read of each).
SPY = """
import json, os, sys
read = set()
getitem = os._Environ.__getitem__
def spied(self, key):
    if sys._getframe(1).f_code.co_name != "__iter__":
        read.add(key)
    return getitem(self, key)
os._Environ.__getitem__ = spied
from helpers.runtime import engine_zygote
engine_zygote.preload()
print(json.dumps(sorted(read)))
"""
# ipykernel's IPKernelApp reads these into trait defaults as it is imported; only its
# initialize() uses them (the parent poller), and an engine makes an IPKernelApp without
# initializing it (ipyparallel/engine/app.py, init_engine).
KERNEL_APP_ONLY = {"JPY_PARENT_PID", "JPY_INTERRUPT_EVENT"}


def test_nothing_the_zygote_imports_reads_what_a_start_has_of_its_own():
    done = subprocess.run([sys.executable, "-c", SPY], cwd=REPO, capture_output=True,
                          text=True, timeout=180, check=True)
    read = json.loads(done.stdout.splitlines()[-1])
    assert "OMP_NUM_THREADS" in read or "TORCH_LOGS" in read, read   # the spy sees reads
    per_start = [k for k in read if k.startswith(engine_zygote.PER_START)]
    assert sorted(set(per_start) - KERNEL_APP_ONLY) == [], per_start


def test_a_bad_idle_time_is_an_error_that_names_it(own_zygote, monkeypatch):
    monkeypatch.setenv("TUTORIAL_ZYGOTE_IDLE", "soon")
    with pytest.raises(RuntimeError, match="TUTORIAL_ZYGOTE_IDLE='soon'"):
        start_cluster(n_ranks=2, backend="gloo", quiet=True, warm=False, launcher="local")
