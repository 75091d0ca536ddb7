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
  cold, warm start cell to first collective: a fresh Python process running
             `from helpers import start_cluster`, `start_cluster` and one all_reduce, cold
             and warm (taking over the warm cluster the previous process left), against
             the wall time of `torchrun --standalone` of benchmarks/torchrun_all_reduce.py.
The ratio printed is the median of the repeats' ratios, with its spread (the half-width
of the 90 % bootstrap interval of that median, relative to it); a pair stops once its
spread is within ±tolerance (after --min-repeats), or at its cap (--max-repeats, or its
seconds, never before 3 repeats): "did not settle".
Then where the cold and the warm start go, stage by stage (medians over the repeats).
--html: `python -m tools.build --force` over the series, with and without --warm.
Written to build/bench/notebook_vs_torchrun.json and .txt. Everything runs in a private
IPYTHONDIR; nothing is left running.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
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
from helpers.bench import ratios as settle_ratios  # noqa: E402
from helpers.bench.ratios import Group, Ratio  # noqa: E402

TARGETS = {"busbw": (">=", 0.95), "latency": ("<=", 1.10)}
BW_BYTES, LAT_BYTES = 64 << 20, 4


# ------------------------------------------------------------------ the two paths

class TorchrunWorker:
    """One torchrun job (benchmarks/torchrun_worker.py) that runs measure() on request."""

    def __init__(self, n: int):
        self.folder = Path(tempfile.mkdtemp(prefix="nb-vs-torchrun-worker-"))
        self.k = 0
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--standalone",
             f"--nproc_per_node={n}", str(HERE / "torchrun_worker.py"), str(self.folder)],
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
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc_per_node={n}", str(HERE / "torchrun_all_reduce.py")],
                   cwd=REPO, check=True, capture_output=True, timeout=600)
    return time.perf_counter() - t0


def cluster_start(n: int, warm: bool, record: list[dict]) -> float:
    """A fresh Python process (see child): start cell to first all_reduce, in seconds;
    its stage times are appended to `record`."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child",
                          "warm" if warm else "cold", "--ranks", str(n)],
                         cwd=REPO, check=True, capture_output=True, text=True,
                         timeout=600).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["python process (launch to exit)"] = time.perf_counter() - t0
    record.append(result)
    return result["first_collective_s"]


def child(kind: str, n: int) -> None:
    """In the fresh process: what a notebook's start cell and first %%px cell do, timed
    stage by stage. The stages of start_cluster are its `start_timings` when it has them
    (seconds per stage), else one "start" stage."""
    t0 = time.perf_counter()
    from helpers import start_cluster

    t_imported = time.perf_counter()
    cluster = start_cluster(n, "gloo", quiet=True, warm=kind == "warm")
    t_started = time.perf_counter()
    cluster.run("t = torch.ones(1, device=device); dist.all_reduce(t)")
    t_first = time.perf_counter()
    stages = dict(getattr(cluster, "start_timings", None) or {"start": t_started - t_imported})
    reused = cluster.reused
    cluster.stop()
    t_stopped = time.perf_counter()
    print(json.dumps({"stages": {"imports": t_imported - t0, **stages,
                                 "first collective": t_first - t_started,
                                 "stop": t_stopped - t_first},
                      "start_s": t_started - t0, "first_collective_s": t_first - t0,
                      "reused": reused}))


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

def leftovers(ipython_dir: str) -> list[int]:
    """Pids of processes still running with our private IPYTHONDIR."""
    import psutil

    pids = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get("IPYTHONDIR") == ipython_dir:
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


def breakdown(records: list[dict]) -> dict[str, float]:
    """Median seconds per stage over the records, stages in the order first seen; a
    stage some records lack is the median over those that have it."""
    names = list(dict.fromkeys(name for r in records for name in r["stages"]))
    medians = {name: statistics.median(r["stages"][name] for r in records
                                       if name in r["stages"])
               for name in names}
    medians["python process (launch to exit)"] = statistics.median(
        r["python process (launch to exit)"] for r in records)
    return medians


def ratio_lines(groups: list[Group], units: dict[str, str],
                args: argparse.Namespace) -> list[str]:
    lines = []
    for group in groups:
        lines.append(f"[{group.repeats} repeats in {group.seconds:.0f} s; stopped: "
                     f"{group.stopped}]")
        for ratio in group.ratios:
            a, b = group.values.get(ratio.path, []), group.values.get(ratio.base, [])
            note = settle_ratios.describe(ratio, args.tolerance, args.min_repeats)
            if ratio.name in TARGETS and ratio.values:
                sign, target = TARGETS[ratio.name]
                met = ratio.median >= target if sign == ">=" else ratio.median <= target
                note += f" (target {sign} {target}: {'met' if met else 'MISSED'})"
            unit = units[ratio.name]
            if a and b:
                lines.append(f"  {ratio.name:<8} {note}\n{'':11}{ratio.path} median "
                             f"{statistics.median(a):.3f} {unit} (min {min(a):.3f}), "
                             f"{ratio.base} median {statistics.median(b):.3f} {unit} "
                             f"(min {min(b):.3f})")
    return lines


def breakdown_lines(name: str, stages: dict[str, float], total: float) -> list[str]:
    lines = [f"{name} start, median s per stage:"]
    for stage, seconds in stages.items():
        lines.append(f"  {stage:<34} {seconds:7.3f}")
    lines.append(f"  {'(start cell to first collective)':<34} {total:7.3f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--tolerance", type=float, default=0.05,
                        help="a ratio has settled when its spread is within ± this (0.05)")
    parser.add_argument("--min-repeats", type=int, default=5)
    parser.add_argument("--max-repeats", type=int, default=30)
    parser.add_argument("--bw-budget", type=float, default=60.0,
                        help="seconds at most for the busbw and latency pairs (60)")
    parser.add_argument("--start-budget", type=float, default=130.0,
                        help="seconds at most for the start pairs (130)")
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
    parser.add_argument("--child", choices=["cold", "warm"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.ranks)
        return 0

    ipython_dir = tempfile.mkdtemp(prefix="nb-vs-torchrun-ipython-")
    os.environ["IPYTHONDIR"] = ipython_dir  # our clusters only: never a user's warm one
    os.environ.pop("TUTORIAL_WARM_START", None)
    from helpers.runtime.cluster import start_cluster
    from helpers.paths import build_dir
    from helpers.runtime.warm import stop_warm_clusters

    n, began = args.ranks, time.monotonic()
    log = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    limits = dict(tolerance=args.tolerance, min_repeats=args.min_repeats,
                  max_repeats=args.max_repeats, log=log)
    records: dict[str, list[dict]] = {"cold": [], "warm": []}
    rows: dict[str, list[dict]] = {f"{p} {m}": [] for p in ("torchrun", "notebook")
                                   for m in ("busbw", "latency")}
    groups: list[Group] = []
    extra: list[str] = []
    load_before = os.getloadavg()
    cluster = worker = None
    try:
        # 1. busbw and latency: both paths' ranks up, each idle while the other measures.
        worker = TorchrunWorker(n)              # starts while the cluster starts
        cluster = start_cluster(n, "gloo", quiet=True, debug="off", warm=False)
        worker.wait_until_ready()
        bw = (BW_BYTES, args.bw_iters, args.bw_warmup, args.bw_batches)
        lat = (LAT_BYTES, args.lat_iters, args.lat_warmup, args.lat_batches)
        groups.append(settle_ratios.settle(Group(
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
        worker.stop()
        cluster.stop()
        cluster = worker = None
        # 2. start to first collective; the warm runs take over what the previous one left.
        primed = cluster_start(n, True, [])
        extra.append(f"warm cluster primed by a cold start of {primed:.2f} s (it idles in "
                     "the background during the start pairs)")
        groups.append(settle_ratios.settle(Group(
            measure={"torchrun start": lambda: torchrun_start(n),
                     "cold start": lambda: cluster_start(n, False, records["cold"]),
                     "warm start": lambda: cluster_start(n, True, records["warm"])},
            ratios=[Ratio("cold", "cold start", "torchrun start"),
                    Ratio("warm", "warm start", "torchrun start")]),
            budget_s=args.start_budget, **limits))
        not_reused = sum(not r["reused"] for r in records["warm"])
        if not_reused:
            extra.append(f"{not_reused} warm start(s) did not reuse engines")
        stop_warm_clusters()
        if args.html:
            with tempfile.TemporaryDirectory(prefix="nb-vs-torchrun-build-") as root:
                only = tuple(args.html_notebooks)
                groups.append(settle_ratios.settle(Group(
                    measure={"cold html": lambda: html_build(False, Path(root), only),
                             "warm html": lambda: html_build(True, Path(root), only)},
                    ratios=[Ratio("html", "warm html", "cold html")]),
                    tolerance=args.tolerance, min_repeats=2, max_repeats=2, budget_s=3600,
                    log=log))
    finally:
        if worker is not None:
            worker.stop()
        if cluster is not None:
            cluster.stop()
        stop_warm_clusters()
        left = wait_for_no_leftovers(ipython_dir)

    units = {"busbw": "GB/s", "latency": "µs", "cold": "s", "warm": "s", "html": "s"}
    lines = [f"notebook path vs torchrun: {n} ranks, gloo, {platform.node()}, "
             f"{os.cpu_count()} CPUs, {time.monotonic() - began:.0f} s in all",
             f"ratio: median over paired repeats (A, B adjacent, order alternating); "
             f"spread: {settle_ratios.SPREAD}; settled: spread <= ±{args.tolerance:.0%} "
             f"after >= {args.min_repeats} repeats",
             "busbw, latency: each measurement's fastest batch (the path's own cost: other "
             "processes only add time), then the median ratio; start: wall seconds"]
    mean_ratios = {m: mean_ratio(rows[f"notebook {m}"], rows[f"torchrun {m}"], key)
                   for m, key in (("busbw", "busbw"), ("latency", "time_us"))
                   if rows[f"notebook {m}"]}
    lines += ratio_lines(groups[:1], units, args)
    if mean_ratios:
        lines.append("  the same pairs with the mean over all calls (nccl-tests' statistic, "
                     "noisier): " + ", ".join(f"{m} x{v:.3f}" for m, v in mean_ratios.items()))
    lines += ratio_lines(groups[1:], units, args)
    stage_medians = {}
    for kind, record in records.items():
        if record:
            stage_medians[kind] = breakdown(record)
            total = statistics.median(r["first_collective_s"] for r in record)
            lines += breakdown_lines(kind, stage_medians[kind], total)
    if not args.html:
        extra.append("html build not timed; run with --html (about 4 min per build on 2 cores)")
    load = {"before": load_before, "after": os.getloadavg()}
    before, after = (" ".join(f"{v:.2f}" for v in load[k]) for k in ("before", "after"))
    extra.append(f"load average (1, 5, 15 min) before {before}, after {after}"
                 " (other work on the machine slows both paths)")
    extra.append(f"processes left running: {len(left)}" + (f" {left}" if left else ""))
    text = "\n".join(lines + extra)
    print(text)
    out = build_dir() / "bench"
    out.mkdir(parents=True, exist_ok=True)
    config = {"ranks": n, "backend": "gloo", "tolerance": args.tolerance,
              "bw_batches": args.bw_batches, "lat_batches": args.lat_batches,
              "min_repeats": args.min_repeats, "max_repeats": args.max_repeats,
              "spread": settle_ratios.SPREAD, "bw_bytes": BW_BYTES, "bw_iters": args.bw_iters,
              "lat_bytes": LAT_BYTES, "lat_iters": args.lat_iters, "cpus": os.cpu_count(),
              "host": platform.node(), "load_average": load}
    result = {"config": config, "leftover_pids": left, "start_stages": stage_medians,
              "ratios": {r.name: {"median": r.median, "spread": r.spread,
                                  "repeats": len(r.values), "values": r.values,
                                  "settled": r.settled(args.tolerance, args.min_repeats)}
                         for g in groups for r in g.ratios if r.values},
              "runs": {name: values for g in groups for name, values in g.values.items()},
              "mean_ratios": mean_ratios, "rows": rows,
              "targets": TARGETS}
    for name, ratio in result["ratios"].items():
        result[f"{name}_ratio"] = ratio["median"]      # the scalars tools.compare shows
    (out / "notebook_vs_torchrun.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "notebook_vs_torchrun.txt").write_text(text + "\n")
    print(f"written: {out / 'notebook_vs_torchrun.json'} and .txt")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
