"""Test-wide settings: ipyparallel and Jupyter files go to a temporary folder, never ~.

Notebook executions (tests marked `notebook`) run with the warm start
(helpers/runtime/warm.py): one set of engines per world size serves every notebook of
the session, each with a fresh process group and an empty namespace. Their warm
clusters live in a folder of their own (WARM_IPYTHONDIR), so tests about warm start,
leftovers and lifecycle never see them; those tests, and any marked `cold`, start cold.
Each xdist worker has its own sandbox, IPYTHONDIR included: a cluster start ends only the
orphans of its own IPYTHONDIR, so one worker's starts never end another's processes.
NCCL_NOTEBOOKS_TESTS_COLD=1 runs every notebook cold (as before the warm default).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS / "support"))   # the suite's own modules: runner, browser, ...

_SANDBOX = Path(tempfile.mkdtemp(prefix="nccl-notebooks-tests-"))
# Set at import time so every kernel and engine started by the tests inherits them.
for name, sub in [("IPYTHONDIR", "ipython"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                  ("JUPYTER_DATA_DIR", "data"), ("MPLCONFIGDIR", "mpl"),
                  ("TUTORIAL_CACHE_DIR", "cache"), ("TUTORIAL_RESULTS_DIR", "results")]:
    os.environ[name] = str(_SANDBOX / sub)
    (_SANDBOX / sub).mkdir(parents=True, exist_ok=True)
os.environ["TUTORIAL_OFFLINE"] = "1"   # no network fetch unless a test asks for one
for name in ("TUTORIAL_RANKS", "TUTORIAL_BACKEND", "TUTORIAL_WARM_START"):
    os.environ.pop(name, None)
WARM_IPYTHONDIR = _SANDBOX / "ipython-warm"
WARM_IPYTHONDIR.mkdir()

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:   # tools/ is not installed: it runs from the checkout
    sys.path.insert(0, str(REPO))
NOTEBOOKS = REPO / "notebooks"


@pytest.fixture(scope="session")
def sandbox() -> Path:
    return _SANDBOX


@pytest.fixture(scope="session", autouse=True)
def _kernels_forkserver():
    """Each worker's forkserver starts with the kernels' preload, whichever test comes first:
    a disposable rank's test would otherwise start it with the ranks' preload alone, and
    every later kernel of the worker would import the notebooks' modules itself."""
    from tools import kernel_provisioner

    kernel_provisioner.start_server()


def warm_wanted(item: pytest.Item) -> bool:
    """Whether a test's notebook executions share the session's warm engines."""
    if os.environ.get("NCCL_NOTEBOOKS_TESTS_COLD", "").strip() not in ("", "0"):
        return False
    return (item.get_closest_marker("notebook") is not None
            and item.get_closest_marker("cold") is None)


@pytest.fixture(autouse=True)
def _warm_notebooks(request, monkeypatch):
    """TUTORIAL_WARM_START=1 (engines shared per world size) for notebook tests not `cold`.

    Function-scoped: a module or session fixture that executes a notebook opts in with
    `warm_environment()` itself (else it runs cold).
    """
    if warm_wanted(request.node):
        for name, value in warm_environment().items():
            monkeypatch.setenv(name, value)
    yield


def warm_environment() -> dict[str, str]:
    """The variables that make a notebook (or tools.build) use the session's warm engines."""
    # Idle long enough to outlast a test file that uses another world size; the session's
    # end stops them at once (and a killed run's keepers after these 15 minutes).
    return {"TUTORIAL_WARM_START": "1", "IPYTHONDIR": str(WARM_IPYTHONDIR),
            "TUTORIAL_WARM_IDLE": "900"}


def stop_session_warm_clusters() -> str:
    """End the warm clusters notebook tests left (their keepers would in TUTORIAL_WARM_IDLE)."""
    env = dict(os.environ, IPYTHONDIR=str(WARM_IPYTHONDIR))
    done = subprocess.run([sys.executable, "-m", "helpers.runtime.warm", "stop"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


# Files about start-up, lifecycle, leftovers, isolation, the warm start itself, MPI or
# timeouts say `pytestmark = pytest.mark.cold` (a single test: @pytest.mark.cold).
# Notebook 13 times out and kills ranks on purpose: wherever it runs (e.g. its student
# copy), it starts cold.
COLD_NOTEBOOKS = ("13_debugging",)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slurm: runs on a Slurm started for the session (local_slurm, "
        "local_slurm_hosts)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(nb in item.name for nb in COLD_NOTEBOOKS):
            item.add_marker(pytest.mark.cold)


@pytest.fixture(scope="session")
def local_slurm():
    """A one-node Slurm (tools/slurm/), started once, when a test first asks for it (the
    tests marked `slurm` do); stopped at the session's end, or by a watchdog if it dies.

    Skipped where Slurm is not installed or not root, unless TUTORIAL_REQUIRE_SLURM=1
    (CI): then that is a failure.
    """
    yield from _slurm_for_the_session(hosts=0)


@pytest.fixture(scope="session")
def local_slurm_hosts():
    """A Slurm of two nodes, each slurmd in a network namespace of its own (a host with
    its own address): as local_slurm otherwise."""
    yield from _slurm_for_the_session(hosts=2)


def _slurm_for_the_session(hosts: int):
    from tools.slurm import local as slurm_local

    try:
        slurm_local.require_usable()
    except slurm_local.SlurmUnavailable as err:
        if os.environ.get("TUTORIAL_REQUIRE_SLURM", "").strip() not in ("", "0"):
            pytest.fail(f"TUTORIAL_REQUIRE_SLURM is set but {err}")
        pytest.skip(str(err))
    slurm = slurm_local.start(watch_pid=os.getpid(), hosts=hosts)
    yield slurm
    slurm_local.stop(slurm.folder)
    assert slurm_local.leftovers(slurm.folder) == []


def pytest_sessionfinish(session, exitstatus):
    # The warm engines, then whatever a failed test left running; then drop the sandbox.
    stop_session_warm_clusters()
    for ipython_dir in (os.environ["IPYTHONDIR"], str(WARM_IPYTHONDIR)):
        subprocess.run([sys.executable, "-m", "ipyparallel.cluster", "stop", "--all"],
                       env=dict(os.environ, IPYTHONDIR=ipython_dir),
                       capture_output=True, timeout=60)
    shutil.rmtree(_SANDBOX, ignore_errors=True)


@pytest.fixture
def one_rank_group():
    """A one-rank gloo default group, destroyed afterwards (for helpers that call dist)."""
    import torch.distributed as dist

    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


# Each execution of a notebook at one world size (tests/notebooks/, a test per
# `[n_ranks...]`) is a work unit of its own: they share no fixture, and as whole files the
# slow ones (three executions each) kept one worker busy at the end while the other had
# nothing left. Every other test stays with its file (its module fixtures run once:
# notebook 13's tests share one execution). xdist queues the units by size, so these
# one-test units come last and fill the gaps.
def own_unit(nodeid: str) -> bool:
    """A test that executes a notebook at one world size, its unit of work alone."""
    path, _, name = nodeid.partition("::")
    return (path.startswith("tests/notebooks/") and "[" in name
            and name.split("[", 1)[1][:1].isdigit())


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ExecutionsApart(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid if own_unit(nodeid) else super()._split_scope(nodeid)

    return ExecutionsApart(config, log)
