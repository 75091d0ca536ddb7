"""The slurm launcher for real: notebooks, unchanged, on engines that sbatch and srun start.

The session's one-node Slurm (tools/slurm/, fixture `local_slurm` in conftest.py)
runs the controller and the engines as jobs; ranks come from SLURM_PROCID. `.ci/run`
installs Slurm and sets TUTORIAL_REQUIRE_SLURM=1, so this runs in CI; elsewhere, without
Slurm or root, it is skipped and says why. The settings are the recipe of
docs/instructors.md, with loopback as the interface (one machine).
"""
from __future__ import annotations

import json
import re
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import nbformat
import pytest

from conftest import NOTEBOOKS
from notebook_runner import (assert_records_match_model, cell_script, execute, notebook_text,
                             output_text, run_bounded)
from reports import shown_reports
from training_notebooks import run_training_notebook

pytestmark = [pytest.mark.cold, pytest.mark.slurm, pytest.mark.notebook]

# A cancelled job's cell fails: cancel ~1-2 s in, Slurm's KillWait (2 s, tools/slurm), then
# the controller's 10 s of missed heartbeats (launchers.CONTROLLER_MISSES["slurm"]).
JOB_END_SEEN_S = 25
JOBS_GONE_S = 20   # scancel'd or ended jobs leave squeue within KillWait + MinJobAge


def slurm_settings(slurm, results) -> dict[str, str]:
    """The notebook's environment for the slurm launcher on `slurm` (docs/instructors.md's
    recipe, for CPU ranks, on the interface the nodes share)."""
    return {
        **slurm.environment(),                      # SLURM_CONF: which Slurm to ask
        "TUTORIAL_LAUNCHER": "slurm",
        "TUTORIAL_IFNAME": slurm.interface,         # "lo" when the one node is this machine
        "TUTORIAL_SLURM_PARTITION": slurm.partition,
        "TUTORIAL_SLURM_GPUS_PER_NODE": "0",        # CPU ranks
        "TUTORIAL_SLURM_TIME": "10",                # minutes: a job left behind ends anyway
        "TUTORIAL_BACKEND": "gloo",
        "SBATCH_OVERCOMMIT": "1",                   # more tasks than a node has CPUs
        "TUTORIAL_RESULTS_DIR": str(results),
    }


@pytest.fixture
def on_slurm(local_slurm, monkeypatch, tmp_path):
    """The slurm launcher's settings; afterwards, the queue is empty."""
    for name, value in slurm_settings(local_slurm, tmp_path / "results").items():
        monkeypatch.setenv(name, value)
    yield local_slurm
    assert_queue_empties(local_slurm)
    assert_no_batch_script_left()


def assert_no_batch_script_left() -> None:
    """ipyparallel writes its batch scripts to the working directory unless told where:
    none is left in the notebooks' folder, the checkout, or beside the connection files."""
    from helpers.paths import REPO_ROOT
    from helpers.runtime.processes import security_dir

    left = [*NOTEBOOKS.glob("*.sbatch"), *REPO_ROOT.glob("*.sbatch"),
            *Path.cwd().glob("*.sbatch"), *security_dir().glob("*.sbatch")]
    assert left == [], left


def assert_queue_empties(slurm) -> None:
    deadline = time.monotonic() + JOBS_GONE_S
    while slurm.jobs() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert slurm.jobs() == [], slurm.command("squeue")


def assert_on_slurm(text: str, n_ranks: int) -> None:
    assert f"{n_ranks} rank(s) · backend gloo" in text
    assert "· new engines (slurm launcher)" in text
    assert "✗" not in text


def test_notebook00_on_slurm_engines(on_slurm, tmp_path):
    nb = execute(NOTEBOOKS / "00_ranks_and_world.ipynb", tmp_path, n_ranks=2)
    text = notebook_text(nb)
    assert_on_slurm(text, 2)
    ranks = [int(r) for r in re.findall(r"^rank (\d+) of \d+:", text, flags=re.M)]
    assert sorted(ranks) == [0, 1]
    for cell in ("engine-names-check", "c17"):
        [report] = shown_reports(nb, cell)
        assert report.by_rank() == {0: True, 1: True} and all(report.oks)


def test_training_notebook_on_slurm_engines(on_slurm, tmp_path, monkeypatch):
    nb, record = run_training_notebook("14_groups_and_meshes", 2, tmp_path, monkeypatch)
    assert_on_slurm(notebook_text(nb), 2)
    assert record["shape"] == [1, 2]


CANCELLED_NOTEBOOK = [
    ("start", "from helpers.runtime.cluster import start_cluster\n"
              "cluster = start_cluster(2)"),
    ("cancelled", "%%px\nimport time\ntime.sleep(300)"),
    ("restart", "cluster = start_cluster(2)"),
    ("after", "%%px\nprint(f'rank {dist.get_rank()} of {dist.get_world_size()} is back')"),
    ("stop", "cluster.stop()"),
]


@pytest.mark.timing
def test_cancelled_job_mid_cell_gives_an_error_and_the_next_start_works(on_slurm, tmp_path):
    started_mark = tmp_path / "started"      # the start cell is done: scancel may come
    nb = nbformat.v4.new_notebook()
    for cell_id, source in CANCELLED_NOTEBOOK:
        if cell_id == "start":
            source += f"\nopen({str(started_mark)!r}, 'w').close()"
        cell = nbformat.v4.new_code_cell(source)
        cell.id = cell_id
        if cell_id == "cancelled":
            cell.metadata["tags"] = ["raises-exception"]
        nb.cells.append(cell)
    path = tmp_path / "cancelled.ipynb"
    nbformat.write(nb, path)

    cancelled = {}

    def cancel_engines_once_running() -> None:
        # scancel the engine job while the sleep cell runs
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not cancelled:
            jobs = on_slurm.command("squeue", "-h", "-t", "R", "-o", "%i %j").split("\n")
            engines = [line.split()[0] for line in jobs if " ipengine-" in line]
            if engines and started_mark.exists():
                time.sleep(1.0)
                on_slurm.command("scancel", engines[0])
                cancelled["at"] = time.monotonic()
                return
            time.sleep(0.2)

    canceller = threading.Thread(target=cancel_engines_once_running, daemon=True)
    canceller.start()
    started = time.monotonic()
    from tools.execute import run_notebook

    done = run_notebook(path, tmp_path / "cancelled-out.ipynb", cell_timeout_s=240)
    canceller.join(timeout=5)
    assert "at" in cancelled, "the engine job was never seen running"
    cells = {cell.id: cell for cell in done.cells}
    [error] = [out for out in cells["cancelled"].outputs if out.output_type == "error"]
    shown = output_text(cells["cancelled"]) + "\n".join(error.get("traceback", []))
    assert "died" in shown and "re-run the start cell" in shown, shown
    took = cells["cancelled"].metadata["papermill"]["duration"]
    print(f"the cancelled cell failed after {took:.1f} s")
    # The job's end signals every process of the step, the nannies too: the controller
    # learns of it from the missed heartbeats: 10 s of them, not ipyparallel's 30 s.
    assert took < JOB_END_SEEN_S, f"the cancelled cell took {took:.0f} s to fail"
    text = output_text(cells["after"])
    assert "rank 0 of 2 is back" in text and "rank 1 of 2 is back" in text, text
    assert time.monotonic() - started < 240


# --- two hosts: each slurmd in a network namespace, the ranks meet on a real interface ----

@pytest.fixture
def on_two_hosts(local_slurm_hosts, monkeypatch, tmp_path):
    """The slurm launcher on two nodes; the engine job spread over both."""
    for name, value in slurm_settings(local_slurm_hosts, tmp_path / "results").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SBATCH_SPREAD_JOB", "1")    # CPU ranks: as many nodes as there are
    yield local_slurm_hosts
    assert_queue_empties(local_slurm_hosts)
    assert_no_batch_script_left()


def test_all_reduce_notebook_across_two_hosts(on_two_hosts, tmp_path):
    nb = execute(NOTEBOOKS / "05_all_reduce.ipynb", tmp_path, n_ranks=4)
    text = notebook_text(nb)
    assert_on_slurm(text, 4)
    records = json.loads((tmp_path / "results" / "05_all_reduce.json").read_text())
    assert_records_match_model(records, 4)
    for r in range(4):
        assert f"rank {r} ✓" in text


WHERE = """import os
from helpers.runtime.launchers import interface_address
where = (os.environ["SLURMD_NODENAME"], os.environ["GLOO_SOCKET_IFNAME"],
         interface_address(os.environ["GLOO_SOCKET_IFNAME"]))"""   # on each engine


def _role(proc, ranks_by_pid: dict[int, int]) -> str | None:
    command = " ".join(proc.cmdline())
    if proc.pid in ranks_by_pid:
        return f"rank {ranks_by_pid[proc.pid]}: engine (store, gloo)"
    if "ipyparallel.engine.nanny" in command:
        return f"rank {ranks_by_pid.get(proc.ppid(), '?')}: engine's nanny"
    if "ipyparallel.controller" in command:
        return "ipyparallel controller"
    if proc.name() == "srun":
        return "srun (Slurm)"
    return None   # the batch scripts' shells: no sockets


def test_two_hosts_sockets_on_the_named_interface_and_signed_messages(on_two_hosts, tmp_path,
                                                                     capsys):
    from helpers.runtime.cluster import start_cluster
    from helpers.runtime.processes import cluster_processes
    from tools.slurm.local import _pid
    from tools.slurm.sockets import listening_sockets, socket_table

    slurm = on_two_hosts
    with start_cluster(2, quiet=True) as cluster:
        cluster.run(WHERE)
        where = cluster.values("where")   # (node, interface gloo uses, its address) per rank
        assert [node for node, _, _ in where] == ["node1", "node2"]     # rank r on node r+1
        addresses = {address for _, _, address in where}
        assert len(addresses) == 2 and all(i == slurm.interface for _, i, _ in where)
        cluster.run("import torch\nt = torch.full((3,), dist.get_rank() + 1.0)\n"
                    "dist.all_reduce(t)")
        assert [t.tolist() for t in cluster.values("t")] == [[3.0] * 3] * 2

        from helpers.runtime.launchers import SLURM_CONTROLLER, SLURM_ENGINES
        from helpers.runtime.processes import batch_script
        for launcher_class in (SLURM_CONTROLLER, SLURM_ENGINES):   # beside the keys
            assert batch_script(cluster.cluster_id, launcher_class).is_file()

        ranks_by_pid = {info.pid: info.rank for info in cluster.ranks}
        processes = {}
        for proc in cluster_processes(cluster.cluster_id):
            role = _role(proc, ranks_by_pid)
            if role is not None:
                processes[role] = proc.pid
        for daemon in ("slurmctld", *(f"slurmd-{node}" for node in slurm.nodes)):
            processes[f"{daemon} (Slurm)"] = _pid(slurm.folder, daemon)
        rows = listening_sockets(processes)
        table = socket_table(rows)
        with capsys.disabled():
            print(f"\nlistening TCP sockets, two hosts on {slurm.interface}:\n{table}\n")
        (tmp_path / "socket-table.md").write_text(table + "\n")
        ours = [r for r in rows if "(Slurm)" not in r.process]
        assert {r.process for r in ours} >= {"ipyparallel controller",
                                             "rank 0: engine (store, gloo)",
                                             "rank 1: engine (store, gloo)"}
        # the series' own sockets: on the interface named, or loopback, never on all
        assert {r.interface for r in ours} <= {slurm.interface, "lo"}, table
        for rank in (0, 1):   # each rank's gloo listens on its own host's address
            assert any(r.process.startswith(f"rank {rank}:") and r.address == where[rank][2]
                       for r in ours), table

        _assert_forged_messages_rejected(cluster, tmp_path)


def _assert_forged_messages_rejected(cluster, tmp_path) -> None:
    """Messages are signed (HMAC-SHA256, the key in the connection file): one signed with
    another key is dropped, unanswered; the right key works again afterwards."""
    import os

    client = cluster.client
    assert client.session.signature_scheme == "hmac-sha256" and len(client.session.key) >= 16
    marker = tmp_path / "forged-message-ran"
    key = client.session.key
    client.session.key = os.urandom(16)       # what someone without the key can sign
    try:
        forged = client[:].execute(f"open({str(marker)!r}, 'w').close()", block=False)
        time.sleep(3)
        assert not forged.ready() and not marker.exists()
    finally:
        client.session.key = key
    cluster.run("answer = 'signed'")
    assert cluster.values("answer") == ["signed", "signed"]


# --- the recipe without a notebook: srun + torchrun of a script ---------------------------

RECIPE_MARK = "<!-- tested: tests/runtime/test_slurm_launcher.py::test_srun_torchrun_recipe -->"


def recipe_batch_file() -> str:
    """The batch file of docs/instructors.md's srun + torchrun recipe, as printed there."""
    from helpers.paths import REPO_ROOT

    text = (REPO_ROOT / "docs" / "instructors.md").read_text()
    after = text[text.index(RECIPE_MARK) + len(RECIPE_MARK):]
    start = after.index("```bash\n") + len("```bash\n")
    block = after[start:after.index("```", start)]
    return textwrap.dedent(block)


@pytest.mark.docs
@pytest.mark.parametrize("hosts", [1, 2], ids=["one-node", "two-hosts"])
def test_srun_torchrun_recipe(hosts, request, tmp_path):
    """docs/instructors.md's batch file, as it is, runs notebook 00's torchrun script:
    on one node 2 ranks under one torchrun, on two hosts one rank under each."""
    import os
    import sys

    from ports import free_port

    slurm = request.getfixturevalue("local_slurm" if hosts == 1 else "local_slurm_hosts")
    batch = tmp_path / "barrier.sbatch"
    batch.write_text(recipe_batch_file())
    (tmp_path / "barrier.py").write_text(cell_script(NOTEBOOKS / "00_ranks_and_world.ipynb",
                                                     "torchrun-script"))
    port = free_port("")                  # for the store on node 0
    env = {**os.environ, **slurm.environment(), "MASTER_PORT": str(port),
           "RANKS_PER_NODE": str(2 // hosts), "OMP_NUM_THREADS": "1",
           "GLOO_SOCKET_IFNAME": slurm.interface,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    output = tmp_path / "barrier.out"
    elastic_before = set(Path(tempfile.gettempdir()).glob("torchelastic_*"))
    code, out = run_bounded(["sbatch", "--wait", f"--partition={slurm.partition}",
                             f"--nodes={hosts}", f"--output={output}", f"--chdir={tmp_path}",
                             str(batch)], tmp_path, env, timeout_s=120)
    printed = output.read_text() if output.exists() else ""
    assert code == 0, out + printed
    lines = re.findall(r"rank (\d): arrived after ([\d.]+) s, left the barrier after "
                       r"([\d.]+) s", printed)
    assert sorted(int(r) for r, _, _ in lines) == [0, 1], printed
    last_arrival = max(float(arrived) for _, arrived, _ in lines)
    assert last_arrival >= 0.19 and all(float(left) >= last_arrival - 0.1
                                        for _, _, left in lines), lines
    # each node's torchrun kept its logs beside the job, none in a folder of its own
    assert sorted(p.name for p in (tmp_path / "torchrun-logs").iterdir()) == \
        [f"node{i}" for i in range(hosts)]
    assert set(Path(tempfile.gettempdir()).glob("torchelastic_*")) <= elastic_before
    assert_queue_empties(slurm)
