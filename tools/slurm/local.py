"""A Slurm on this machine (Debian's slurm-wlm + munge), to run the slurm launcher for real.

    with local_slurm() as slurm:          # one node, on loopback
        os.environ.update(slurm.environment())   # SLURM_CONF: sbatch, squeue... find it
    with local_slurm(hosts=2) as slurm:   # two nodes, each in a network namespace
        slurm.interface                   # the name to give TUTORIAL_IFNAME

Each start gets a folder of its own (slurm.conf, munge key and socket, state, spool, pid
files, logs) and free ports, so two starts on one machine never meet. `stop` cancels the
jobs, ends munged, slurmctld and slurmd (from their pid files) and whatever the jobs left,
removes the namespaces and the folder; it is idempotent. A watchdog started with the
daemons stops them when the process that asked for them (a test session) dies, even by
SIGKILL. Needs root (slurmd starts the jobs). Command line: python -m tools.slurm.
"""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tools.slurm.network import Hosts, leftover_network, make_hosts, remove_hosts

PACKAGES = ("slurm-wlm", "munge")
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
FOLDER_PREFIX = "nccl-notebooks-slurm-"
PARTITION = "tutorial"
DAEMONS = ("slurmd", "slurmctld", "munged")   # the order `stop` ends them in ("slurmd-*")
START_TIMEOUT_S = 60.0


class SlurmUnavailable(RuntimeError):
    """Slurm cannot be started here (not installed, not root)."""


@dataclass(frozen=True)
class LocalSlurm:
    """A running Slurm: its folder, nodes, partition and (with namespaces) their hosts."""

    folder: Path
    nodes: tuple[str, ...]
    partition: str = PARTITION
    hosts: Hosts | None = None

    @property
    def conf(self) -> Path:
        return self.folder / "slurm.conf"

    @property
    def interface(self) -> str:
        """The interface the nodes reach each other (and the controller) on."""
        return self.hosts.interface if self.hosts else "lo"

    def environment(self) -> dict[str, str]:
        """What Slurm's commands (sbatch, squeue, scancel, srun) need to find this one."""
        return {"SLURM_CONF": str(self.conf)}

    def command(self, *args: str, timeout_s: float = 30) -> str:
        """Run a Slurm command against this Slurm; its stdout."""
        done = subprocess.run(args, env={**os.environ, **self.environment()},
                              capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): "
                               f"{done.stderr.strip()}")
        return done.stdout

    def jobs(self) -> list[str]:
        """The ids of the jobs in the queue (pending, running or completing)."""
        return self.command("squeue", "-h", "-o", "%i").split()

    def node_states(self) -> list[str]:
        return self.command("sinfo", "-h", "-N", "-o", "%T").split()


def missing_programs() -> list[str]:
    """The Slurm and munge programs that are not on PATH (or in /usr/sbin)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [name for name in PROGRAMS if shutil.which(name, path=path) is None]


def require_usable() -> None:
    """Raise SlurmUnavailable unless Slurm is installed and this process is root."""
    missing = missing_programs()
    if missing:
        raise SlurmUnavailable(
            f"Slurm is not installed ({', '.join(missing)} missing): as root, "
            f"apt-get install {' '.join(PACKAGES)} (or: python -m tools.slurm install)")
    if os.geteuid() != 0:
        raise SlurmUnavailable("a local Slurm must be started as root (slurmd runs the "
                               "jobs as their users)")


def install() -> None:
    """apt-get install the packages (Debian/Ubuntu, as root); nothing when present."""
    if not missing_programs():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES],
                   check=True, env=env)


def node_resources() -> str:
    """This machine as slurmd sees it: "CPUs=.. Boards=.. ... RealMemory=.." (`slurmd -C`)."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    first = out.splitlines()[0].split()
    return " ".join(field for field in first if not field.startswith("NodeName="))


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free on loopback now (a start retries if one is taken)."""
    holders = []
    try:
        for _ in range(count):
            holder = socket.socket()
            holder.bind(("127.0.0.1", 0))
            holders.append(holder)
        return [holder.getsockname()[1] for holder in holders]
    finally:
        for holder in holders:
            holder.close()


def write_config(folder: Path, controller: str, nodes: dict[str, str],
                 ports: list[int]) -> Path:
    """slurm.conf: the controller's address, {node: address}, no cgroups, no accounting."""
    controller_port, node_port = ports
    resources = node_resources()
    lines = [
        f"ClusterName=tutorial{controller_port}",
        f"SlurmctldHost={socket.gethostname().split('.')[0]}({controller})",
        f"SlurmctldPort={controller_port}", f"SlurmdPort={node_port}",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={folder / 'munge.socket'}",
        f"StateSaveLocation={folder / 'state'}", f"SlurmdSpoolDir={folder / 'spool-%n'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none", "MpiDefault=none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/builtin", "ReturnToService=2",
        "MinJobAge=2", "KillWait=2", "InactiveLimit=0",
        *(f"NodeName={name} NodeAddr={address} {resources} State=UNKNOWN"
          for name, address in nodes.items()),
        f"PartitionName={PARTITION} Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE "
        "State=UP OverSubscribe=FORCE:4",
    ]
    conf = folder / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _daemon(folder: Path, name: str, args: list[str]) -> subprocess.Popen:
    log = open(folder / f"{name}.out", "wb")
    with log:
        return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "SLURM_CONF": str(folder / "slurm.conf")})


def start(watch_pid: int | None = None, hosts: int = 0,
          timeout_s: float = START_TIMEOUT_S) -> LocalSlurm:
    """Start munged, slurmctld and slurmd in a new folder; return once every node is idle.

    hosts=0: one node on loopback; hosts=N: N nodes, each slurmd in a network namespace
    of its own (tools/slurm/network.py). watch_pid: a watchdog stops this Slurm when that
    process ends (None: no watchdog).
    """
    require_usable()
    folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
    folder.chmod(0o755)   # munge's socket must be reachable; the key stays 0600
    try:
        (folder / "state").mkdir(mode=0o700)
        key = folder / "munge.key"
        key.touch(mode=0o600)
        key.write_bytes(os.urandom(1024))
        if watch_pid is not None:
            watchdog = subprocess.Popen(
                [sys.executable, "-m", "tools.slurm", "watch", str(watch_pid), str(folder)],
                cwd=Path(__file__).resolve().parents[2], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            (folder / "watchdog.pid").write_text(str(watchdog.pid))
        network = make_hosts(hosts, folder) if hosts else None
        if network:
            slurm = LocalSlurm(folder, tuple(h.name for h in network.nodes), hosts=network)
        else:
            slurm = LocalSlurm(folder, (socket.gethostname().split(".")[0],))
        for node in slurm.nodes:
            (folder / f"spool-{node}").mkdir(mode=0o700)
        munged = _daemon(folder, "munged", [
            "munged", "--foreground", "--force", f"--socket={folder / 'munge.socket'}",
            f"--key-file={key}", f"--pid-file={folder / 'munged.pid'}",
            f"--log-file={folder / 'munged.log'}", f"--seed-file={folder / 'munged.seed'}"])
        (folder / "munged.pid").write_text(str(munged.pid))
        _start_slurm_daemons(slurm, time.monotonic() + timeout_s)
    except BaseException:
        stop(folder)
        raise
    return slurm


def _start_slurm_daemons(slurm: LocalSlurm, deadline: float) -> None:
    """slurmctld and the slurmds on free ports (new ones if a port was taken meanwhile)."""
    folder, network = slurm.folder, slurm.hosts
    controller = network.bridge_address if network else "127.0.0.1"
    addresses = ({h.name: h.address for h in network.nodes} if network
                 else {slurm.nodes[0]: "127.0.0.1"})
    daemons = ["slurmctld", *(f"slurmd-{node}" for node in slurm.nodes)]
    for attempt in range(3):
        write_config(folder, controller, addresses, free_ports(2))
        ctld = _daemon(folder, "slurmctld", ["slurmctld", "-D", "-f", str(slurm.conf)])
        (folder / "slurmctld.pid").write_text(str(ctld.pid))
        for i, node in enumerate(slurm.nodes):
            inside = network.run_in(network.nodes[i]) if network else []
            proc = _daemon(folder, f"slurmd-{node}",
                           [*inside, "slurmd", "-D", "-f", str(slurm.conf), "-N", node])
            (folder / f"slurmd-{node}.pid").write_text(str(proc.pid))
        states: list[str] = []
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                states = slurm.node_states()
            if states and all(state == "idle" for state in states):
                return
            if any(_pid(folder, name) is None for name in daemons):
                break   # one exited: a port taken in between? Retry on new ports.
            time.sleep(0.1)
        else:
            raise TimeoutError(f"the local Slurm's nodes were not idle in time "
                               f"(states {states}); logs in {folder}:\n{_log_tails(folder)}")
        for name in reversed(daemons):
            _end(_pid(folder, name))
    raise RuntimeError(f"slurmctld or slurmd exited at start; logs:\n{_log_tails(folder)}")


def _log_tails(folder: Path, lines: int = 8) -> str:
    tails = []
    for path in sorted(folder.glob("*.log")) + sorted(folder.glob("*.out")):
        with contextlib.suppress(OSError):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {path.name}\n" + "\n".join(tail))
    return "\n".join(tails)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _pid(folder: Path, name: str) -> int | None:
    """The live pid in `name`.pid, or None."""
    with contextlib.suppress(OSError, ValueError):
        pid = int((folder / f"{name}.pid").read_text().strip())
        if _alive(pid) and _started_for(pid, folder):
            return pid
    return None


def _started_for(pid: int, folder: Path) -> bool:
    """Whether process `pid` belongs to the Slurm in `folder` (a pid can be reused)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().decode(errors="replace")
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().decode(errors="replace")
    except OSError:
        return False
    return str(folder) in cmdline or f"SLURM_CONF={folder / 'slurm.conf'}" in environ


def _end(pid: int | None, grace_s: float = 3.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s` (slurmd can take seconds to leave)."""
    if pid is None:
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while _alive(pid) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)   # reap it when it is our child
            time.sleep(0.05)
        if not _alive(pid):
            return


def _job_processes(folder: Path) -> list[int]:
    """slurmstepd and job processes this Slurm started (their SLURM_CONF is its file)."""
    own = {os.getpid(), os.getppid()}
    return [int(entry) for entry in os.listdir("/proc")
            if entry.isdigit() and int(entry) not in own and _alive(int(entry))
            and _started_for(int(entry), folder) and _is_job_process(int(entry))]


def _is_job_process(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
        with open(f"/proc/{pid}/comm") as f:
            name = f.read().strip()
    except OSError:
        return False
    return name == "slurmstepd" or b"SLURM_JOB_ID=" in environ


def stop(folder: Path | str, timeout_s: float = 15.0) -> None:
    """Cancel the jobs, end the daemons and what the jobs left, remove the folder.

    Idempotent: a folder already gone, or half started, is fine.
    """
    folder = Path(folder)
    if not folder.name.startswith(FOLDER_PREFIX):
        raise ValueError(f"{folder} is not a local Slurm's folder ({FOLDER_PREFIX}*)")
    if not folder.exists():
        return
    slurm = LocalSlurm(folder, ())
    if _pid(folder, "slurmctld") is not None:
        with contextlib.suppress(Exception):
            jobs = slurm.jobs()
            if jobs:
                slurm.command("scancel", *jobs)
            deadline = time.monotonic() + timeout_s
            while slurm.jobs() and time.monotonic() < deadline:
                time.sleep(0.1)
    for name in _daemon_names(folder):
        _end(_pid(folder, name))
    for pid in _job_processes(folder):
        _end(pid, grace_s=0.5)
    remove_hosts(folder)   # after the processes inside: a namespace outlives its name
    watchdog = _pid(folder, "watchdog")
    if watchdog is not None and watchdog != os.getpid():
        _end(watchdog, grace_s=0.5)
    shutil.rmtree(folder, ignore_errors=True)


def _daemon_names(folder: Path) -> list[str]:
    """slurmd-<node>..., slurmctld, munged: those with a pid file, in the order to end."""
    nodes = sorted(path.stem for path in folder.glob("slurmd-*.pid"))
    return [*nodes, *DAEMONS[1:]]


def leftovers(folder: Path | str) -> list[str]:
    """What this Slurm started that still exists: processes (daemons, jobs), namespaces."""
    folder = Path(folder)
    pids = [_pid(folder, name) for name in (*DAEMONS, "watchdog")] + [
        int(path.read_text()) for path in folder.glob("slurmd-*.pid")
        if path.read_text().strip().isdigit() and _alive(int(path.read_text()))]
    return ([f"pid {pid}" for pid in pids if pid is not None]
            + [f"pid {pid}" for pid in _job_processes(folder)] + leftover_network(folder))


def all_folders() -> list[Path]:
    """Every local Slurm folder on this machine (this user's temp folder)."""
    return [Path(p) for p in sorted(glob.glob(os.path.join(tempfile.gettempdir(),
                                                           FOLDER_PREFIX + "*")))]


@contextlib.contextmanager
def local_slurm(hosts: int = 0, watch: bool = True) -> Iterator[LocalSlurm]:
    """A local Slurm for the block; stopped at its end (and by a watchdog if we die)."""
    slurm = start(watch_pid=os.getpid() if watch else None, hosts=hosts)
    try:
        yield slurm
    finally:
        stop(slurm.folder)
