"""Start-up cost of the notebook's start cell, against torchrun, in one command.

    python benchmarks/start_vs_torchrun.py [--ranks 4] [--repeats 3]

Times, on the same machine in the same run:
  torchrun  `torchrun --standalone --nproc_per_node N` of a script that inits gloo and
            does one all_reduce (process start + rendezvous + collective + exit);
  start     `start_cluster(N, "gloo")`: engines up and in one process group;
  start+op  the same plus one all_reduce in every engine and `cluster.stop()`.
Prints medians and the ratios to torchrun; absolute times depend on the machine.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def time_torchrun(n: int) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc_per_node={n}", str(HERE / "torchrun_all_reduce.py")],
                   check=True, capture_output=True, timeout=300)
    return time.perf_counter() - t0


def time_cluster(n: int) -> tuple[float, float]:
    from helpers.cluster import start_cluster

    t0 = time.perf_counter()
    cluster = start_cluster(n, "gloo", quiet=True)
    started = time.perf_counter() - t0
    cluster.client.direct_view(cluster.engine_ids).execute(
        "t = torch.tensor([rank + 1.0]); dist.all_reduce(t)", block=True)
    cluster.stop()
    return started, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {"torchrun": [], "start": [], "start+op+stop": []}
    for _ in range(args.repeats):  # interleaved, so drift hits all three alike
        runs["torchrun"].append(time_torchrun(args.ranks))
        start, total = time_cluster(args.ranks)
        runs["start"].append(start)
        runs["start+op+stop"].append(total)
    base = statistics.median(runs["torchrun"])
    print(f"{args.ranks} ranks, gloo, {args.repeats} runs each (median, min-max):")
    for name, values in runs.items():
        med = statistics.median(values)
        print(f"  {name:<14} {med:6.2f} s  ({min(values):.2f}-{max(values):.2f})  "
              f"x{med / base:.2f} of torchrun")


if __name__ == "__main__":
    main()
