"""The notebook path against torchrun, side by side on the same ranks, in one command.

    python benchmarks/notebook_vs_torchrun.py [--ranks 4] [--tolerance 0.05] [--html]

Four ratios, each measured in pairs, repeated until it holds still (helpers.bench.ratios):
  busbw      all_reduce of 64 MiB: helpers.bench.measurement.measure on the engines of a
             cluster started with debug="off", against the same function on the ranks of
             one torchrun job (benchmarks/torchrun_worker.py) started once (target ≥ 0.95);
  latency    time per call of a 1-element (4-byte) all_reduce, the same two paths
             (target ≤ 1.10). Both: the timed calls in batches, each measurement's value
             its fastest batch (what the path itself costs: other processes only add
             time); the ratios of the means over all calls are printed too;
  first, cold, warm
             start cell to first collective (benchmarks/start_times.py), against the wall
             time of `torchrun --standalone` of benchmarks/torchrun_all_reduce.py. first:
             a fresh Python process's first start, which starts its multiprocessing
             forkserver (torch imported once); cold: that process's second start, its
             engines forked from the same server; warm: a fresh process taking over the
             warm cluster the previous one left. Guards (issue 51, printed and in the
             JSON's "guards"): cold <= 1.0x torchrun's start, warm <= 0.1x.
The ratio printed is the median of the repeats' ratios, with its spread (the half-width
of the 90 % bootstrap interval of that median, relative to it); a pair stops once its
spread is within ±tolerance (after --min-repeats), or at its cap (--max-repeats, or its
seconds, never before 3 repeats): "did not settle".
Then where each start goes, stage by stage (medians over the repeats).
--html: `python -m tools.build --force` over the series, with and without --warm.
Written to build/bench/notebook_vs_torchrun.json and .txt. Everything runs in a private
IPYTHONDIR; nothing is left running.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
from helpers.bench import ratios as settle_ratios
from helpers.bench.ratios import Group, Ratio
from helpers.runtime.torchrun import torchrun_command
from bench_report import (BW_BYTES, LAT_BYTES, Measured, breakdown,
                          report_lines, result_json)
from start_times import Starts, cluster_starts, guard_lines, guards


# ------------------------------------------------------------------ the two paths

class TorchrunWorker:
    """One torchrun job (benchmarks/torchrun_worker.py) that runs measure() on request."""

    def __init__(self, n: int):
        self.folder = Path(tempfile.mkdtemp(prefix="nb-vs-torchrun-worker-"))
        self.k = 0
        self.proc = subprocess.Popen(
            torchrun_command(n, str(HERE / "torchrun_worker.py"), str(self.folder),
                             log_dir=self.folder / "logs"),
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def wait_until_ready(self, timeout_s: float = 180.0) -> None:
        """Started in the background (while the cluster starts): wait for its group."""
        self._wait_for(self.folder / "ready", timeout_s)

    def _wait_for(self, path: Path, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"the torchrun worker exited ({self.proc.returncode}): "
                                   f"{self.proc.stderr.read()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the torchrun worker wrote no {path.name} in {timeout_s} s")
            time.sleep(0.005)
        return json.loads(path.read_text())

    def measure(self, size_bytes: int, iters: int, warmup: int, batches: int) -> dict:
        request = {"collective": "all_reduce", "size_bytes": size_bytes, "iters": iters,
                   "warmup": warmup, "batches": batches}
        tmp = self.folder / f"request-{self.k}.tmp"
        tmp.write_text(json.dumps(request))
        os.replace(tmp, self.folder / f"request-{self.k}.json")
        result = self._wait_for(self.folder / f"result-{self.k}.json", 600)
        self.k += 1
        if "error" in result:
            raise ValueError(f"torchrun worker: {result['error']}")
        return result

    def stop(self) -> None:
        if self.proc.poll() is None:
            (self.folder / f"request-{self.k}.json").write_text('{"stop": true}')
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                self.proc.wait(timeout=30)


def notebook_measure(cluster: Any, size_bytes: int, iters: int, warmup: int,
                     batches: int) -> dict:
    """helpers.bench.measurement.measure applied on every engine, as notebook 11 does."""
    from helpers.bench.measurement import measure

    return cluster.apply(measure, "all_reduce", size_bytes, "float32", "sum", iters, warmup,
                         "nccl-tests", batches, timeout_s=600)[0]


def recorded(kept: list[dict], fastest: str, run: Callable[[], dict]) -> Callable[[], float]:
    """A measurement for settle(): run it, keep its row in `kept`, return its fastest batch
    as `fastest` ("busbw": GB/s, "time_us": µs per call)."""
    def measure() -> float:
        row = run()
        kept.append(row)
        if fastest == "busbw":                    # busbw scales as 1 / time
            return row["busbw"] * row["time_us"] / row["time_min_us"]
        return row["time_min_us"]
    return measure


def mean_ratio(path_rows: list[dict], base_rows: list[dict], key: str) -> float:
    """Median over the pairs of path / base of `key` (the mean over all calls)."""
    return statistics.median(a[key] / b[key] for a, b in zip(path_rows, base_rows))


def torchrun_start(n: int) -> float:
    """Wall time of a torchrun job that does one all_reduce (launch to exit)."""
    with tempfile.TemporaryDirectory(prefix="nb-vs-torchrun-logs-") as logs:
        t0 = time.perf_counter()
        subprocess.run(torchrun_command(n, str(HERE / "torchrun_all_reduce.py"), log_dir=logs),
                       cwd=REPO, check=True, capture_output=True, timeout=600)
        return time.perf_counter() - t0


def html_build(warm: bool, build_root: Path, notebooks: tuple[str, ...] = ()) -> float:
    """Seconds of `python -m tools.build --force [--warm] [notebooks]` (own build folder)."""
    env = dict(os.environ, TUTORIAL_BUILD_DIR=str(build_root / ("warm" if warm else "cold")))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tools.build", "--force",
                           "--warm" if warm else "--cold", *notebooks], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        raise RuntimeError(f"html build failed:\n{proc.stdout[-800:]}{proc.stderr[-800:]}")
    return time.perf_counter() - t0


# ------------------------------------------------------------------ bookkeeping

# This process's own multiprocessing servers (the cluster of measure_bandwidth started
# them): they end with it, when the pipe they read from it closes.
OWN_SERVERS = ("from multiprocessing.forkserver import main",
               "from multiprocessing.resource_tracker import main")


def leftovers(ipython_dir: str) -> list[int]:
    """Pids of processes still running with our private IPYTHONDIR, but OWN_SERVERS."""
    import psutil

    pids = []
    for proc in psutil.process_iter():
        try:
            if proc.pid == os.getpid() or proc.environ().get("IPYTHONDIR") != ipython_dir:
                continue
            command = " ".join(proc.cmdline())
            if proc.ppid() != os.getpid() or not any(s in command for s in OWN_SERVERS):
                pids.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return pids


def wait_for_no_leftovers(ipython_dir: str, wait_s: float = 20.0) -> list[int]:
    """Engine nannies linger a few seconds after a stop: wait for them, then report."""
    deadline = time.monotonic() + wait_s
    while (left := leftovers(ipython_dir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="a ratio has settled when its spread is within ± this (0.05)")
    parser.add_argument("--min-repeats", type=int, default=5)
    parser.add_argument("--max-repeats", type=int, default=30)
    parser.add_argument("--bw-budget", type=float, default=60.0,
                        help="seconds at most for the busbw and latency pairs (60)")
    parser.add_argument("--start-budget", type=float, default=160.0,
                        help="seconds at most for the start pairs (160)")
    parser.add_argument("--bw-iters", type=int, default=8, help="64 MiB: timed calls")
    parser.add_argument("--bw-batches", type=int, default=4, help="64 MiB: batches (4)")
    parser.add_argument("--bw-warmup", type=int, default=1)
    parser.add_argument("--lat-iters", type=int, default=200, help="4 B: timed calls")
    parser.add_argument("--lat-batches", type=int, default=10, help="4 B: batches (10)")
    parser.add_argument("--lat-warmup", type=int, default=20)
    parser.add_argument("--html", action="store_true",
                        help="also time `python -m tools.build --force` with/without --warm "
                             "(about 4 min per build on 2 cores)")
    parser.add_argument("--html-notebooks", nargs="*", default=[],
                        help="build only these notebooks with --html (default: the series)")
    return parser.parse_args()


def measure_bandwidth(args: argparse.Namespace, measured: Measured, limits: dict) -> None:
    """busbw and latency: both paths' ranks up, each idle while the other measures."""
    from helpers.runtime.cluster import start_cluster

    rows, cluster, worker = measured.rows, None, None
    try:
        worker = TorchrunWorker(args.ranks)              # starts while the cluster starts
        cluster = start_cluster(args.ranks, "gloo", quiet=True, debug="off", warm=False)
        worker.wait_until_ready()
        bw = (BW_BYTES, args.bw_iters, args.bw_warmup, args.bw_batches)
        lat = (LAT_BYTES, args.lat_iters, args.lat_warmup, args.lat_batches)
        measured.groups.append(settle_ratios.settle(Group(
            measure={
                "torchrun busbw": recorded(rows["torchrun busbw"], "busbw",
                                           lambda: worker.measure(*bw)),
                "notebook busbw": recorded(rows["notebook busbw"], "busbw",
                                           lambda: notebook_measure(cluster, *bw)),
                "torchrun latency": recorded(rows["torchrun latency"], "time_us",
                                             lambda: worker.measure(*lat)),
                "notebook latency": recorded(rows["notebook latency"], "time_us",
                                             lambda: notebook_measure(cluster, *lat))},
            ratios=[Ratio("busbw", "notebook busbw", "torchrun busbw"),
                    Ratio("latency", "notebook latency", "torchrun latency")]),
            budget_s=args.bw_budget, **limits))
    finally:
        if worker is not None:
            worker.stop()
        if cluster is not None:
            cluster.stop()


def measure_starts(args: argparse.Namespace, measured: Measured, limits: dict) -> None:
    """Start to first collective; the warm runs take over what the previous one left."""
    n, records = args.ranks, measured.records
    primed = cluster_starts(n, "warm")[0]["first_collective_s"]
    measured.extra.append(f"warm cluster primed by a cold start of {primed:.2f} s (it idles "
                          "in the background during the start pairs)")
    starts = Starts(n, records)
    measured.groups.append(settle_ratios.settle(Group(
        measure={"torchrun start": lambda: torchrun_start(n),
                 "first start": lambda: starts.seconds("first"),
                 "cold start": lambda: starts.seconds("cold"),
                 "warm start": lambda: starts.seconds("warm")},
        ratios=[Ratio("first", "first start", "torchrun start"),
                Ratio("cold", "cold start", "torchrun start"),
                Ratio("warm", "warm start", "torchrun start")]),
        budget_s=args.start_budget, **limits))
    measured.extra.append("first and cold: a first start and then a second one in the same "
                          "fresh process (its \"python process\" stage covers both)")
    not_reused = sum(not r["reused"] for r in records["warm"])
    if not_reused:
        measured.extra.append(f"{not_reused} warm start(s) did not reuse engines")
    not_forked = sum(not r["forkserver_reused"] for r in records["cold"])
    if not_forked:
        measured.extra.append(f"{not_forked} cold start(s) did not find the first start's "
                              "forkserver, alone, in their process")


def measure_html(args: argparse.Namespace, measured: Measured, log: Callable) -> None:
    """`python -m tools.build --force` over the series, with and without --warm."""
    with tempfile.TemporaryDirectory(prefix="nb-vs-torchrun-build-") as root:
        only = tuple(args.html_notebooks)
        measured.groups.append(settle_ratios.settle(Group(
            measure={"cold html": lambda: html_build(False, Path(root), only),
                     "warm html": lambda: html_build(True, Path(root), only)},
            ratios=[Ratio("html", "warm html", "cold html")]),
            tolerance=args.tolerance, min_repeats=2, max_repeats=2, budget_s=3600, log=log))


def main() -> int:
    args = parse_arguments()
    ipython_dir = tempfile.mkdtemp(prefix="nb-vs-torchrun-ipython-")
    os.environ["IPYTHONDIR"] = ipython_dir  # our clusters only: never a user's warm one
    os.environ.pop("TUTORIAL_WARM_START", None)
    from helpers.paths import build_dir
    from helpers.runtime.warm import stop_warm_clusters

    began, load_before = time.monotonic(), os.getloadavg()

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    limits = dict(tolerance=args.tolerance, min_repeats=args.min_repeats,
                  max_repeats=args.max_repeats, log=log)
    measured = Measured()
    try:
        measure_bandwidth(args, measured, limits)
        measure_starts(args, measured, limits)
        stop_warm_clusters()
        if args.html:
            measure_html(args, measured, log)
    finally:
        stop_warm_clusters()
        measured.left = wait_for_no_leftovers(ipython_dir)

    rows = measured.rows
    mean_ratios = {m: mean_ratio(rows[f"notebook {m}"], rows[f"torchrun {m}"], key)
                   for m, key in (("busbw", "busbw"), ("latency", "time_us"))
                   if rows[f"notebook {m}"]}
    stage_medians = {kind: breakdown(record)
                     for kind, record in measured.records.items() if record}
    lines = report_lines(args, measured, began, mean_ratios, stage_medians)
    checked = guards(measured.groups)
    lines += guard_lines(checked)
    if not args.html:
        measured.extra.append("html build not timed; run with --html (about 4 min per build "
                              "on 2 cores)")
    load = {"before": load_before, "after": os.getloadavg()}
    before, after = (" ".join(f"{v:.2f}" for v in load[k]) for k in ("before", "after"))
    measured.extra.append(f"load average (1, 5, 15 min) before {before}, after {after}"
                          " (other work on the machine slows both paths)")
    left = measured.left
    measured.extra.append(f"processes left running: {len(left)}" + (f" {left}" if left else "")
                          + " (this process's forkserver and resource tracker end with it)")
    text = "\n".join(lines + measured.extra)
    print(text)
    out = build_dir() / "bench"
    out.mkdir(parents=True, exist_ok=True)
    result = result_json(args, measured, load, mean_ratios, stage_medians)
    result["guards"] = checked
    (out / "notebook_vs_torchrun.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "notebook_vs_torchrun.txt").write_text(text + "\n")
    print(f"written: {out / 'notebook_vs_torchrun.json'} and .txt")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
