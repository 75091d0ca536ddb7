"""Interleaved 1F1B and ZB-H1 by hand (notebook 24's `run` of a `plan`) against torch's
`ScheduleInterleaved1F1B` and `ScheduleInterleavedZeroBubble`.

Notebook 24's model (`make_stages`, one width × width Linear + Tanh a stage), float32,
the same batch in the same M micro-batches on both sides; a step: zero_grad, every
action of this rank's order, SGD on this rank's stages.

- interleaved 1F1B: 2p stages, stage s on rank s mod p (v = 2 chunks per rank), the
  notebook's `plan("interleaved", p, M, 2)` against `ScheduleInterleaved1F1B` on the same
  placement (the notebook shows that both run the same order).
- zero bubble: p stages, one per rank, the notebook's ZB-H1 (`plan("ZB-H1", p, M)`: B
  split into I and W) against `ScheduleInterleavedZeroBubble` given one stage per rank:
  torch's implementation of the same paper's ZB1P (its docstring), which given one
  stage per rank places stage r on rank r as ours. Both run p − r forwards before the
  first I, then F, I and W in turn (torch's `pipeline_order` beside `plan`: torch runs
  each W sooner, ours holds more W's back for the cool-down). torch's other zero-bubble
  schedules (`ScheduleZBVZeroBubble`, `ScheduleDualPipeV`) need two stages per rank in a
  V, a different model cut.

Measured (torch.profiler, 4 ranks; aten::mm calls per micro-batch, addmm equal):
interleaved, the same on every rank but rank 0, where our stage 0 also computes its
input's gradient (a width × 8 product, never sent). Zero bubble: rank 0, 5 by hand
against torch's 3: our W (`autograd.grad(y, weights, g)`) goes back through the stage's
second Linear again (width × width) and our stage 0 computes its input's gradient; rank
3, one more small one (back through the last Linear(width → 4) again); ranks 1–2 the
same. torch's W starts from the intermediate gradients its I saved
(pipelining/_backward.py).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist

from benchmarks.pairs import Context, Pair, Sides
from benchmarks.pairs.p18_pipeline import compare
from helpers.fitting.schedules import Spans, plan
from helpers.training.pipeline import make_stages
from helpers.training.toy import loss_fn, make_data

LR = 0.01
M = 8                      # micro-batches, both sides (torch's interleaved: a multiple of p)
BATCH = 128                # samples per step; quick: 64

Modules = dict[int, torch.nn.Module]


def _hand(ns: dict[str, Any], schedule: str, v: int, ctx: Context) -> tuple[Callable, Modules]:
    """One step of the notebook's `run` over its plan, on fresh stages from its `build`
    (which makes them in make_stages' float64: cast to the bench's dtype)."""
    p = ctx.world_size
    modules = {s: module.to(ctx.dtype) for s, module in ns["build"](p * v).items()}
    optimizer = torch.optim.SGD([w for m in modules.values() for w in m.parameters()], lr=LR)
    order = plan(schedule, p, M, v)[ctx.rank]

    def step() -> None:
        optimizer.zero_grad()
        ns["spans"].start()          # one step's spans, not every step's since the start
        ns["run"](order, modules, p * v, M)
        optimizer.step()
    return step, modules


def _torch(kind: str, v: int, X: torch.Tensor, Y: torch.Tensor,
           ctx: Context) -> tuple[Callable, Modules]:
    from torch.distributed import pipelining

    p, n_stages = ctx.world_size, ctx.world_size * v
    every = make_stages(n_stages, ctx.width, dtype=ctx.dtype)
    modules = {s: every[s].to(ctx.device) for s in range(ctx.rank, n_stages, p)}
    stages = [pipelining.PipelineStage(m, s, n_stages, ctx.device) for s, m in modules.items()]
    schedule = getattr(pipelining, kind)(stages, n_microbatches=M, loss_fn=loss_fn)
    optimizer = torch.optim.SGD([w for m in modules.values() for w in m.parameters()], lr=LR)
    args = (X,) if 0 in modules else ()
    kwargs = {"target": Y} if n_stages - 1 in modules else {}

    def step() -> None:
        optimizer.zero_grad()
        schedule.step(*args, **kwargs)
        optimizer.step()
    return step, modules


def _build(ctx: Context, schedule: str, kind: str, v: int) -> Sides:
    if ctx.quick:
        ctx.width = 64
    batch = 64 if ctx.quick else BATCH
    X, Y = (t.to(ctx.device) for t in make_data(n_samples=batch, dtype=ctx.dtype))
    # The notebook's plain assignments (X, Y, spans), which taught() does not run.
    ns = taught_24(ctx, X, Y, batch)
    hand_step, _ = _hand(ns, schedule, v, ctx)
    torch_step, _ = _torch(kind, v, X, Y, ctx)

    def agree() -> str:
        """One step of each from the same initial weights: the same gradients and
        parameters after it, on every stage of this rank."""
        (step_h, ours), (step_t, theirs) = _hand(ns, schedule, v, ctx), _torch(kind, v, X, Y,
                                                                                ctx)
        step_h()
        step_t()
        bad = [f"stage {s}: {b}" for s in ours for b in compare(ours[s], theirs[s], kind)]
        dist.barrier()
        return "; ".join(f"rank {ctx.rank}: {b}" for b in bad)

    return Sides(hand=hand_step, torch=torch_step, agree=agree,
                 about=f"{ctx.world_size * v} stages of Linear({ctx.width})-Tanh float32, "
                       f"{v} per rank, batch {batch} in {M} micro-batches, SGD; "
                       "torch defaults")


def taught_24(ctx: Context, X: torch.Tensor, Y: torch.Tensor, batch: int) -> dict[str, Any]:
    from helpers.bench.taught import taught

    return taught("24_pipeline_schedules", needs=["run", "build"], device=ctx.device,
                  X=X, Y=Y, batch=batch, width=ctx.width, spans=Spans(ctx.device))


def build_interleaved(ctx: Context) -> Sides:
    return _build(ctx, "interleaved", "ScheduleInterleaved1F1B", 2)


def build_zero_bubble(ctx: Context) -> Sides:
    return _build(ctx, "ZB-H1", "ScheduleInterleavedZeroBubble", 1)


PAIRS = [
    Pair(name="interleaved 1F1B", notebook="24_pipeline_schedules",
         hand="interleaved 1F1B by hand (24)", torch="ScheduleInterleaved1F1B",
         build=build_interleaved),
    Pair(name="zero bubble", notebook="24_pipeline_schedules", hand="ZB-H1 by hand (24)",
         torch="ScheduleInterleavedZeroBubble (1 stage/rank)", build=build_zero_bubble),
]
