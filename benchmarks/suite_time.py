"""`python benchmarks/suite_time.py [--commit C] [--label L]`: the suite's budget, measured.

`make test` from a fresh clone is what the budget names (issue 27: 12 minutes on 2 cores), so
this clones the checkout (at C, default HEAD) into a private temporary folder and runs
`CI=true bash .ci/run` there, with a uv cache of its own (nothing cached beforehand), then
removes the clone. While it runs it reads the machine's /proc/stat each second and every
process's CPU time each half second, by kind (engines, kernels, Chromium, ...). It prints
and saves build/bench/suite-LABEL.json (and the run's log beside it): the wall time of the
run and of pytest, the busy and idle core-seconds, the CPU by kind, and a speed probe taken
before the run, so that runs on machines of different speed can be told apart.
Linux only (/proc). Run it on a quiet machine: anything else running is counted too.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HZ = os.sysconf("SC_CLK_TCK")
# The first words found in a process's command line name its kind. A forked process keeps
# its forkserver's command line, `python -c from multiprocessing.forkserver import main;
# main(fd, fd, PRELOAD, ...)` (multiprocessing.forkserver.ForkServer.ensure_running): the
# engines' and disposable ranks' server preloads disposable_rank.PRELOAD alone, the forked
# kernels' server (tools/kernel_provisioner.py) more. Warm clusters' engines are
# ipyparallel's `python -m ipyparallel.engine`; under mpiexec or srun they count as those.
ENGINES = "engines, disposable ranks and their fork servers"
ENGINES_PRELOAD = "['helpers.runtime.disposable_preload']"
KINDS = [(ENGINES_PRELOAD, ENGINES),
         ("multiprocessing.forkserver", "kernels (forked) and their fork server"),
         ("ipyparallel.controller", "ipyparallel controllers"), ("ipcontroller",
                                                                   "ipyparallel controllers"),
         ("chromium", "Chromium"), ("playwright", "Chromium"), ("sphinx", "the book (Sphinx)"),
         ("tools.build", "make html (tools.build)"), ("ipykernel", "kernels (ipykernel)"),
         ("jupyter", "Jupyter servers"), ("slurm", "Slurm"), ("munge", "Slurm"),
         ("srun", "Slurm"), ("mpiexec", "Open MPI"), ("prte", "Open MPI"),
         ("ipyparallel.engine", ENGINES), ("torchrun", "torchrun"),
         ("exec(eval(sys.stdin", "pytest workers"), ("pytest", "pytest"),
         ("tools.install", "the install"), ("-m uv", "the install"),
         ("-m pip", "the install"), ("python", "other Python")]


def kind_of(command: str) -> str:
    """The kind of process a command line belongs to ("other" when none fits)."""
    return next((kind for word, kind in KINDS if word in command), "other")


def speed_probe(repeats: int = 15) -> float:
    """Median CPU seconds of a fixed 2-million-addition Python loop (lower is faster)."""
    times = []
    for _ in range(repeats):
        start, total = time.process_time(), 0
        for i in range(2_000_000):
            total += i
        times.append(time.process_time() - start)
    return sorted(times)[len(times) // 2]


def machine_ticks() -> tuple[int, int]:
    """(busy, idle) clock ticks of all CPUs since boot; iowait counts as idle."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields[:8]) - idle, idle


class ProcessSampler(threading.Thread):
    """Every process's CPU time, read each half second; a process is counted from when it
    is first seen (those running before the sampler starts, from then on)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stopped = threading.Event()
        self.seen: dict[tuple[int, int], list] = {}     # (pid, start) -> [kind, first, last]

    def _read(self, first: bool) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
                fields = stat[stat.rindex(")") + 2:].split()
                ticks, start = int(fields[11]) + int(fields[12]), int(fields[19])
                key = (int(entry.name), start)
                if key not in self.seen:
                    command = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ")
                    self.seen[key] = [kind_of(command.decode(errors="replace")),
                                      ticks if first else 0, ticks]
                self.seen[key][2] = ticks
            except (OSError, ValueError, IndexError):
                continue                                # it ended while being read

    def run(self) -> None:
        self._read(first=True)
        while not self.stopped.wait(0.5):
            self._read(first=False)

    def cpu_by_kind(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for kind, first, last in self.seen.values():
            totals[kind] = totals.get(kind, 0.0) + (last - first) / HZ
        return dict(sorted(((k, round(v, 1)) for k, v in totals.items() if v >= 0.05),
                           key=lambda item: -item[1]))


def fresh_environment(uv_cache: Path) -> dict[str, str]:
    """This process's environment for the clone's .ci/run, without an active virtual or
    conda environment (its make would install into that one, not a new .venv), with
    CI=true, a uv cache of the run's own, and the slowest tests listed."""
    env = dict(os.environ)
    active = [env.pop(name, None) for name in ("VIRTUAL_ENV", "CONDA_PREFIX")]
    env.pop("CONDA_DEFAULT_ENV", None)
    folders = [str(Path(prefix) / "bin") for prefix in active if prefix]
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p not in folders)
    return {**env, "CI": "true", "UV_CACHE_DIR": str(uv_cache),
            "PYTEST_ARGS": env.get("PYTEST_ARGS", "--durations=60")}


def measure(source: Path, commit: str, log: Path) -> dict:
    """Clone `source` at `commit`, run its .ci/run with a new uv cache, and measure it."""
    probe = speed_probe()
    # the commit as it is now: a commit made while the suite runs is not what it measured
    commit = subprocess.run(["git", "rev-parse", commit], cwd=source, text=True,
                            capture_output=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="suite-time-") as work:
        clone = Path(work) / "clone"
        subprocess.run(["git", "clone", "-q", str(source), str(clone)], check=True)
        subprocess.run(["git", "checkout", "-q", commit], cwd=clone, check=True)
        env = fresh_environment(Path(work) / "uv-cache")
        sampler = ProcessSampler()
        sampler.start()
        busy0, idle0 = machine_ticks()
        started = time.monotonic()
        with open(log, "w") as out:
            run = subprocess.Popen(["bash", ".ci/run"], cwd=clone, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = run.wait()
            finally:
                if run.poll() is None:      # interrupted: the run's group goes with us
                    os.killpg(run.pid, signal.SIGKILL)
                    run.wait()
        wall = time.monotonic() - started
        busy1, idle1 = machine_ticks()
        sampler.stopped.set()
        sampler.join()
    last = re.findall(r"=+ (.*) in ([\d.]+)s", log.read_text())
    return {"commit": commit,
            "exit_code": code, "wall_s": round(wall, 1),
            "pytest_s": float(last[-1][1]) if last else None,
            "pytest_result": last[-1][0] if last else None,
            "busy_core_s": round((busy1 - busy0) / HZ, 1),
            "idle_core_s": round((idle1 - idle0) / HZ, 1), "cores": os.cpu_count(),
            "speed_probe_cpu_s": round(probe, 4), "cpu_by_kind": sampler.cpu_by_kind()}


def minutes(seconds: float | None) -> str:
    return "?" if seconds is None else f"{int(seconds // 60)}:{seconds % 60:04.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--label", default=time.strftime("%Y%m%d-%H%M%S"))
    parser.add_argument("--source", type=Path, default=REPO, help="the repository to clone")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "bench")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # the clone is removed then too
    args.out.mkdir(parents=True, exist_ok=True)
    result = measure(args.source, args.commit, args.out / f"suite-{args.label}.log")
    (args.out / f"suite-{args.label}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['commit'][:7]}: .ci/run {minutes(result['wall_s'])} (exit "
          f"{result['exit_code']}), pytest {minutes(result['pytest_s'])} "
          f"({result['pytest_result']}); busy {result['busy_core_s']} core-s, idle "
          f"{result['idle_core_s']} on {result['cores']} cores; speed probe "
          f"{result['speed_probe_cpu_s']} CPU-s")
    for kind, seconds in result["cpu_by_kind"].items():
        print(f"  {seconds:8.1f} CPU-s  {kind}")
    return result["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
