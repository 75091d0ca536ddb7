"""One rank of `make bench`'s training table (started by benchmarks/training_bench.py):

    torchrun --standalone --nproc_per_node 4 benchmarks/training_worker.py OUT.json CONFIG

For each pair (benchmarks/pairs/): build both sides, check that they agree, then time
them in interleaved pairs until the ratio settles (helpers.bench.ratios.settle, run on
every rank alike: the values and the clock are rank 0's), and profile one step of each
for the breakdown (helpers.bench.step_profile). Rank 0 writes OUT.json.

A measurement of a side: `batches` batches of k steps, each started together (barrier);
a batch's time is the slowest rank's, per step; the measurement is the fastest batch
(another process on the machine only ever adds time). CPU seconds per step, summed
over the ranks, are recorded beside it: what the side costs the machine, which other
load moves much less than it moves wall time.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from helpers.bench import ratios  # noqa: E402
from helpers.bench.nccl_tests import busbw  # noqa: E402
from helpers.bench.step_profile import breakdown, profile_step  # noqa: E402
from benchmarks.pairs import Context, Pair, all_pairs  # noqa: E402

SIDES = ("hand", "torch")


def slowest(seconds: float) -> float:
    """The largest value over the ranks (a step ends when its slowest rank ends)."""
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def summed(seconds: float) -> float:
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t)
    return t.item()


def rank0_clock() -> Callable[[], float]:
    """Seconds since the call, as rank 0 reads them: every rank gets the same value."""
    start = time.monotonic()

    def clock() -> float:
        t = torch.tensor([time.monotonic() - start], dtype=torch.float64)
        dist.broadcast(t, 0)
        return t.item()
    return clock


def batch(step: Callable[[], object], k: int) -> tuple[float, float]:
    """(wall, CPU) seconds per step of k steps: the slowest rank's wall, all ranks' CPU."""
    dist.barrier()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(k):
        step()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return slowest(wall) / k, summed(cpu) / k


def steps_per_batch(sides: dict[str, Callable], batch_s: float) -> int:
    """k such that a batch of the slower side lasts about batch_s (one step measured)."""
    one = max(batch(step, 1)[0] for step in sides.values())
    return max(1, min(50, math.ceil(batch_s / max(one, 1e-6))))


def measure_pair(pair: Pair, ctx: Context, config: dict, log: Callable[[str], None]) -> dict:
    sides = pair.build(ctx)
    steps = {"hand": sides.hand, "torch": sides.torch}
    disagreement = sides.agree()
    flags = [None] * ctx.world_size
    dist.all_gather_object(flags, disagreement)
    if any(flags):
        raise AssertionError(f"{pair.name}: the two sides do not compute the same: "
                             + "; ".join(f"rank {r}: {f}" for r, f in enumerate(flags) if f))
    for step in steps.values():                      # warm-up: first-call costs
        for _ in range(config["warmup"]):
            step()
    k = steps_per_batch(steps, config["batch_s"])
    cpu: dict[str, list[float]] = {s: [] for s in SIDES}

    def measurement(side: str) -> Callable[[], float]:
        def run() -> float:
            walls, cpus = zip(*(batch(steps[side], k) for _ in range(config["batches"])))
            cpu[side].append(cpus[walls.index(min(walls))])
            return min(walls)
        return run

    group = ratios.settle(
        ratios.Group(measure={s: measurement(s) for s in SIDES},
                     ratios=[ratios.Ratio("hand/torch", "hand", "torch")]),
        tolerance=config["tolerance"], min_repeats=config["min_repeats"],
        max_repeats=config["max_repeats"], budget_s=config["budget_s"], log=log,
        clock=rank0_clock())
    ratio = group.ratios[0]
    profiles = {s: breakdown(profile_step(steps[s], config["profile_steps"]))
                for s in SIDES}
    every = [None] * ctx.world_size
    dist.all_gather_object(every, profiles)
    row = {
        "name": pair.name, "notebook": pair.notebook, "hand": pair.hand,
        "torch": pair.torch, "about": sides.about, "agree": "same results",
        "ratio": ratio.median, "spread": ratio.spread, "repeats": len(ratio.values),
        "settled": ratio.settled(config["tolerance"], config["min_repeats"]),
        "stopped": group.stopped, "seconds": group.seconds, "steps_per_batch": k,
        "batches": config["batches"], "ratios": ratio.values,
        "step_ms": {s: 1e3 * statistics.median(group.values[s]) for s in SIDES},
        "step_ms_min": {s: 1e3 * min(group.values[s]) for s in SIDES},
        "cpu_ms": {s: 1e3 * statistics.median(cpu[s]) for s in SIDES},
        "cpu_ratio": statistics.median(a / b for a, b in zip(cpu["hand"], cpu["torch"])),
        "breakdown": {s: mean_breakdown([p[s] for p in every]) for s in SIDES},
        "breakdown_per_rank": {s: [p[s] for p in every] for s in SIDES},
    }
    if pair.collective is not None and sides.bytes_per_step:
        row["busbw_GBps"] = {s: busbw(pair.collective, sides.bytes_per_step,
                                      row["step_ms_min"][s] / 1e3, ctx.world_size)
                             for s in SIDES}
    return row


def mean_breakdown(per_rank: list[dict]) -> dict:
    """The mean over the ranks of each part (ms)."""
    return {key: statistics.fmean(p[key] for p in per_rank) for key in per_rank[0]}


def main() -> int:
    out, config = Path(sys.argv[1]), json.loads(sys.argv[2])
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=config["timeout_s"]))
    torch.set_num_threads(1)                 # the ranks share the machine's cores
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ctx = Context(rank, world_size, torch.device("cpu"), quick=config["quick"])
    if config["quick"]:
        ctx.width = 64

    def log(text: str) -> None:
        if rank == 0:
            print(text, file=sys.stderr, flush=True)

    wanted = config["pairs"]
    pairs = [p for p in all_pairs() if not wanted or p.name in wanted]
    unknown = set(wanted or []) - {p.name for p in all_pairs()}
    if unknown:
        raise SystemExit(f"no pair named {sorted(unknown)}; pairs: "
                         f"{[p.name for p in all_pairs()]}")
    rows = []
    try:
        for pair in pairs:
            log(f"{pair.name}: {pair.hand} vs {pair.torch}")
            rows.append(measure_pair(pair, ctx, config, log))
            if rank == 0:                    # what is done so far survives a later failure
                tmp = out.with_suffix(".tmp")
                tmp.write_text(json.dumps({"pairs": rows, "world_size": world_size}))
                os.replace(tmp, out)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
