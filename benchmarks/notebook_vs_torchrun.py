"""The notebook path against torchrun, side by side on the same ranks, in one command.

    python benchmarks/notebook_vs_torchrun.py [--ranks 4] [--repeats 3] [--html]

Measured, interleaved (A, B then B, A per repeat) so that drift hits both paths alike;
bandwidth and latency first (only the notebook path's cluster running), then start-up:
  busbw      all_reduce of 64 MiB: helpers.bench.measurement.measure applied on the engines of a
             cluster started with debug="off", against
             `torchrun ... -m helpers.bench --json --collectives all_reduce` (target ≥ 0.95);
  latency    time per call of a 1-element (4-byte float32) all_reduce, same two paths
             (target ≤ 1.10);
  start      start cell to first collective: a fresh Python process running
             `start_cluster` + one all_reduce, cold and warm (taking over the warm
             cluster a previous process left; it idles meanwhile), against the wall
             time of `torchrun --standalone` of benchmarks/torchrun_all_reduce.py;
  --html     `python -m tools.build --force` over the whole series, with and without
             --warm (about 4 min each on 2 cores; off by default; --html-repeats,
             --html-notebooks to choose how often and which).
Medians, ratios to torchrun: printed, and written to build/bench/notebook_vs_torchrun.json
and .txt. Everything runs in a private IPYTHONDIR; nothing is left running.
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
TARGETS = {"busbw": (">=", 0.95), "latency": ("<=", 1.10)}


# ------------------------------------------------------------------ one measurement each

def torchrun_bench(n: int, size: str, iters: int, warmup: int) -> dict:
    """helpers.bench under torchrun: the all_reduce row of one size."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={n}", "-m", "helpers.bench", "--json", "--backend", "gloo",
           "--collectives", "all_reduce", "--min-bytes", size, "--max-bytes", size,
           "--iters", str(iters), "--warmup", str(warmup)]
    out = subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True,
                         timeout=600).stdout
    return json.loads(out[out.index("["):])[0]


def notebook_bench(cluster: Any, size_bytes: int, iters: int, warmup: int) -> dict:
    """helpers.bench.measurement.measure applied on every engine, as notebook 11 does."""
    from helpers.bench.measurement import measure

    return cluster.apply(measure, "all_reduce", size_bytes, "float32", "sum", iters, warmup,
                         timeout_s=600)[0]


def torchrun_start(n: int) -> float:
    """Wall time of a torchrun job that does one all_reduce (launch to exit)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc_per_node={n}", str(HERE / "torchrun_all_reduce.py")],
                   cwd=REPO, check=True, capture_output=True, timeout=600)
    return time.perf_counter() - t0


def cluster_start(n: int, warm: bool) -> dict:
    """A fresh Python process: start cell (import + start_cluster) to first all_reduce."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child",
                          "warm" if warm else "cold", "--ranks", str(n)],
                         cwd=REPO, check=True, capture_output=True, text=True,
                         timeout=600).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - t0
    return result


def child(kind: str, n: int) -> None:
    """In the fresh process: what a notebook's start cell and first %%px cell do."""
    t0 = time.perf_counter()
    from helpers.runtime.cluster import start_cluster

    cluster = start_cluster(n, "gloo", quiet=True, warm=kind == "warm")
    t_started = time.perf_counter()
    cluster.run("t = torch.ones(1, device=device); dist.all_reduce(t)")
    t_first = time.perf_counter()
    reused = cluster.reused
    cluster.stop()
    print(json.dumps({"start_s": t_started - t0, "first_collective_s": t_first - t0,
                      "reused": reused}))


def html_build(warm: bool, build_root: Path, notebooks: tuple[str, ...] = ()) -> dict:
    """`python -m tools.build --force [--warm] [notebooks]` into a build folder of its own."""
    env = dict(os.environ, TUTORIAL_BUILD_DIR=str(build_root / ("warm" if warm else "cold")))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tools.build", "--force",
                           *(["--warm"] if warm else []), *notebooks], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=3600)
    return {"seconds": time.perf_counter() - t0, "rc": proc.returncode,
            "tail": proc.stdout[-800:] + proc.stderr[-800:]}


# ------------------------------------------------------------------ bookkeeping

def interleaved(repeat: int, pairs: list[tuple[str, Callable[[], Any]]]) -> dict[str, Any]:
    """Run the named measurements in order on even repeats, reversed on odd ones."""
    order = pairs if repeat % 2 == 0 else pairs[::-1]
    return {name: fn() for name, fn in order}


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


def summary(runs: dict[str, dict[str, list[float]]], base: dict[str, str]) -> tuple[dict, dict]:
    """Medians per metric and path; ratio of each path to the metric's baseline."""
    medians = {m: {p: statistics.median(v) for p, v in paths.items()} for m, paths in runs.items()}
    ratios = {m: {p: value / medians[m][base[m]] for p, value in paths.items() if p != base[m]}
              for m, paths in medians.items()}
    return medians, ratios


def report(args: argparse.Namespace, runs: dict, medians: dict, ratios: dict,
           extra: list[str]) -> str:
    unit = {"busbw": "GB/s", "latency": "µs", "start": "s", "html": "s"}
    lines = [f"notebook path vs torchrun: {args.ranks} ranks, gloo, {args.repeats} repeats "
             f"(median, min-max), {platform.node()}, {os.cpu_count()} CPUs"]
    for metric, paths in runs.items():
        base = BASE[metric]
        lines.append(f"{metric} ({unit[metric]}):")
        for path, values in paths.items():
            ratio = ratios[metric].get(path)
            note = "baseline" if path == base else f"x{ratio:.2f} of {base}"
            if ratio is not None and metric in TARGETS:
                sign, target = TARGETS[metric]
                met = ratio >= target if sign == ">=" else ratio <= target
                note += f" (target {sign} {target}: {'met' if met else 'MISSED'})"
            lines.append(f"  {path:<10} {medians[metric][path]:10.3f}  "
                         f"({min(values):.3f}-{max(values):.3f})  {note}")
    return "\n".join(lines + extra)


BASE = {"busbw": "torchrun", "latency": "torchrun", "start": "torchrun", "html": "cold"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bw-iters", type=int, default=20, help="64 MiB: timed calls")
    parser.add_argument("--bw-warmup", type=int, default=5)
    parser.add_argument("--lat-iters", type=int, default=200, help="4 B: timed calls")
    parser.add_argument("--lat-warmup", type=int, default=20)
    parser.add_argument("--html", action="store_true",
                        help="also time `python -m tools.build --force` with/without --warm")
    parser.add_argument("--html-repeats", type=int, default=1,
                        help="builds per mode with --html (default 1)")
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

    n = args.ranks
    runs: dict[str, dict[str, list[float]]] = {
        "busbw": {"torchrun": [], "notebook": []}, "latency": {"torchrun": [], "notebook": []},
        "start": {"torchrun": [], "cold": [], "warm": []}}
    extra: list[str] = []
    load_before = os.getloadavg()
    cluster = None
    try:
        # 1. bandwidth and latency: one cluster for the notebook path, nothing else running.
        cluster = start_cluster(n, "gloo", quiet=True, debug="off", warm=False)
        for repeat in range(args.repeats):
            print(f"bandwidth, repeat {repeat + 1}/{args.repeats}", file=sys.stderr, flush=True)
            got = interleaved(repeat, [
                ("torchrun", lambda: (torchrun_bench(n, "64M", args.bw_iters, args.bw_warmup),
                                      torchrun_bench(n, "4", args.lat_iters, args.lat_warmup))),
                ("notebook", lambda: (
                    notebook_bench(cluster, 64 << 20, args.bw_iters, args.bw_warmup),
                    notebook_bench(cluster, 4, args.lat_iters, args.lat_warmup)))])
            for path, (bw, lat) in got.items():
                runs["busbw"][path].append(bw["busbw"])
                runs["latency"][path].append(lat["time_us"])
        cluster.stop()
        cluster = None
        # 2. start to first collective; the warm runs take over what the previous one left.
        prime = cluster_start(n, warm=True)
        extra.append(f"warm cluster primed by a cold start of {prime['first_collective_s']:.2f} s"
                     " (it idles in the background during the start runs)")
        for repeat in range(args.repeats):
            print(f"start, repeat {repeat + 1}/{args.repeats}", file=sys.stderr, flush=True)
            got = interleaved(repeat, [("torchrun", lambda: torchrun_start(n)),
                                       ("cold", lambda: cluster_start(n, warm=False)),
                                       ("warm", lambda: cluster_start(n, warm=True))])
            runs["start"]["torchrun"].append(got["torchrun"])
            for path in ("cold", "warm"):
                runs["start"][path].append(got[path]["first_collective_s"])
            if not got["warm"]["reused"]:
                extra.append(f"repeat {repeat + 1}: the warm start did not reuse engines")
        stop_warm_clusters()
        if args.html:
            runs["html"] = {"cold": [], "warm": []}
            with tempfile.TemporaryDirectory(prefix="nb-vs-torchrun-build-") as root:
                only = tuple(args.html_notebooks)
                for repeat in range(args.html_repeats):
                    print(f"html, repeat {repeat + 1}/{args.html_repeats}", file=sys.stderr,
                          flush=True)
                    got = interleaved(repeat, [
                        ("cold", lambda: html_build(False, Path(root), only)),
                        ("warm", lambda: html_build(True, Path(root), only))])
                    for path, result in got.items():
                        runs["html"][path].append(result["seconds"])
                        if result["rc"]:
                            extra.append(f"html {path} build failed:\n{result['tail']}")
        else:
            extra.append("html build not timed; run with --html (about 4 min per build "
                         "on 2 cores, per repeat and mode)")
    finally:
        if cluster is not None:
            cluster.stop()
        stop_warm_clusters()
        left = wait_for_no_leftovers(ipython_dir)

    medians, ratios = summary(runs, BASE)
    load = {"before": load_before, "after": os.getloadavg()}
    extra.append(f"load average (1, 5, 15 min) before {load_before[0]:.2f} {load_before[1]:.2f} "
                 f"{load_before[2]:.2f}, after {' '.join(f'{v:.2f}' for v in load['after'])}"
                 " (other work on the machine skews both paths)")
    extra.append(f"processes left running: {len(left)}" + (f" {left}" if left else ""))
    text = report(args, runs, medians, ratios, extra)
    print(text)
    out = build_dir() / "bench"
    out.mkdir(parents=True, exist_ok=True)
    config = {"ranks": n, "backend": "gloo", "repeats": args.repeats,
              "bw_bytes": 64 << 20, "bw_iters": args.bw_iters, "bw_warmup": args.bw_warmup,
              "lat_bytes": 4, "lat_iters": args.lat_iters, "lat_warmup": args.lat_warmup,
              "cpus": os.cpu_count(), "host": platform.node(),
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "load_average": load}
    (out / "notebook_vs_torchrun.json").write_text(json.dumps(
        {"config": config, "runs": runs, "medians": medians, "ratios": ratios,
         "targets": TARGETS, "leftover_pids": left}, indent=1) + "\n")
    (out / "notebook_vs_torchrun.txt").write_text(text + "\n")
    print(f"written: {out / 'notebook_vs_torchrun.json'} and .txt")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
