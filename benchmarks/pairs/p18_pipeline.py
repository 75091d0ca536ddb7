"""GPipe and 1F1B by hand (notebook 18) against torch's `ScheduleGPipe` and `Schedule1F1B`.

One stage per rank, notebook 18's model (`make_stages`: one width × width Linear + Tanh
per stage, the first maps the 8 input features in, the last maps out to 4), float32, the
same batch cut into the same M micro-batches on both sides (torch's 1F1B needs m ≥ p).
A step: zero_grad, the schedule (every forward and backward of the M micro-batches), SGD
on this rank's stage. The hand side runs the notebook's `gpipe` / `one_f_one_b` with its
blocking `send`/`recv` and `batch_isend_irecv`, and records its timeline spans as the
notebook does; torch's schedules run with their defaults (`scale_grads=True`: the
gradients divided by m, as our loss / m; the last stage keeps the outputs).

Measured here (4 ranks, width 1024, batch 128): a timeline span costs ~5 µs (10,000 spans
timed in one process) and a step records at most 6 per micro-batch, 48: ~0.25 ms, under
1 % of a rank's ~35 ms of CPU per step, so the spans stay in. Both sides run the same
aten::mm count per step on every rank (torch.profiler); torch's runs 1.5–2× as many
Python calls per step (cProfile: GPipe ~1.6–2.2k by hand, ~3.3–4.1k torch).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist

from benchmarks.pairs import Context, Pair, Sides
from helpers.bench.taught import taught
from helpers.training.pipeline import Timeline, make_stages
from helpers.training.toy import loss_fn, make_data

LR = 0.01
M = 8                      # micro-batches, both sides
BATCH = 128                # samples per step (BATCH // M per micro-batch); quick: 64
NEEDS = ["gpipe", "one_f_one_b", "exchange", "forward", "backward", "recv_forward",
         "send_forward", "recv_backward", "send_backward"]


def _stage(ctx: Context) -> torch.nn.Module:
    """This rank's stage, the same initial weights for the same seed on both sides."""
    return make_stages(ctx.world_size, ctx.width, dtype=ctx.dtype)[ctx.rank].to(ctx.device)


def _hand(ns: dict[str, Any], schedule: str, ctx: Context) -> tuple[Callable, torch.nn.Module]:
    """One step of the notebook's schedule on a fresh stage (bound as its global `stage`)."""
    stage = _stage(ctx)
    optimizer = torch.optim.SGD(stage.parameters(), lr=LR)

    def step() -> None:
        ns["stage"] = stage
        optimizer.zero_grad()
        ns["timeline"].start()      # one step's spans, not every step's since the start
        ns["losses"].clear()
        ns[schedule](M)
        optimizer.step()
    return step, stage


def _torch(kind: str, X: torch.Tensor, Y: torch.Tensor,
           ctx: Context) -> tuple[Callable, torch.nn.Module]:
    from torch.distributed import pipelining

    stage = _stage(ctx)
    optimizer = torch.optim.SGD(stage.parameters(), lr=LR)
    schedule = getattr(pipelining, kind)(
        pipelining.PipelineStage(stage, ctx.rank, ctx.world_size, ctx.device),
        n_microbatches=M, loss_fn=loss_fn)
    first, last = ctx.rank == 0, ctx.rank == ctx.world_size - 1

    def step() -> None:
        optimizer.zero_grad()
        if first:
            schedule.step(X)
        elif last:
            schedule.step(target=Y)
        else:
            schedule.step()
        optimizer.step()
    return step, stage


def compare(hand: torch.nn.Module, theirs: torch.nn.Module, label: str) -> list[str]:
    """What differs between two stages' gradients and parameters, at float32 tolerance."""
    bad = []
    for (name, a), b in zip(hand.named_parameters(), theirs.parameters()):
        for what, x, y in (("grad", a.grad, b.grad), ("param", a, b)):
            if x is None or y is None:
                bad.append(f"{name}: {what} missing")
            elif not torch.allclose(x, y, rtol=1e-4, atol=1e-6):
                bad.append(f"{name}: max |by hand − {label}| {what} "
                           f"{(x - y).abs().max().item():.1e}")
    return bad


def _build(ctx: Context, schedule: str, kind: str) -> Sides:
    if ctx.quick:
        ctx.width = 64
    batch = 64 if ctx.quick else BATCH
    X, Y = (t.to(ctx.device) for t in make_data(n_samples=batch, dtype=ctx.dtype))
    # The notebook's plain assignments (X, Y, stage, first, last, timeline, losses),
    # which taught() does not run: given here.
    ns = taught("18_pipeline_parallel", needs=NEEDS, device=ctx.device, X=X, Y=Y,
                batch=batch, width=ctx.width, first=ctx.rank == 0,
                last=ctx.rank == ctx.world_size - 1, timeline=Timeline(ctx.device),
                losses=[], stage=None)
    hand_step, _ = _hand(ns, schedule, ctx)
    torch_step, _ = _torch(kind, X, Y, ctx)

    def agree() -> str:
        """One step of each from the same initial weights: the same gradients and
        parameters after it."""
        steps = [_hand(ns, schedule, ctx), _torch(kind, X, Y, ctx)]
        for step, _ in steps:
            step()
        bad = compare(steps[0][1], steps[1][1], kind)
        dist.barrier()
        return "; ".join(f"rank {ctx.rank}: {b}" for b in bad)

    return Sides(hand=hand_step, torch=torch_step, agree=agree,
                 about=f"{ctx.world_size} stages of Linear({ctx.width})-Tanh float32, "
                       f"batch {batch} in {M} micro-batches, SGD; torch defaults")


def build_gpipe(ctx: Context) -> Sides:
    return _build(ctx, "gpipe", "ScheduleGPipe")


def build_1f1b(ctx: Context) -> Sides:
    return _build(ctx, "one_f_one_b", "Schedule1F1B")


PAIRS = [
    Pair(name="GPipe", notebook="18_pipeline_parallel", hand="gpipe by hand (18)",
         torch="ScheduleGPipe", build=build_gpipe),
    Pair(name="1F1B", notebook="18_pipeline_parallel", hand="one_f_one_b by hand (18)",
         torch="Schedule1F1B", build=build_1f1b),
]
