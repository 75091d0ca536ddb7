"""Tensor parallelism by hand (notebook 17's column- and row-parallel layers, Megatron's
f and g) against torch's `parallelize_module` with `ColwiseParallel` / `RowwiseParallel`.

Both sides train the MLP Linear(w → 4w) → Tanh → Linear(4w → w) in float32 with SGD on
the same whole batch on every rank (tensor parallelism replicates the input): each rank
holds a quarter of the hidden features, rows of the first weight and columns of the
second. The input asks for no gradient, so on both sides one step calls exactly one
collective: *g*'s `all_reduce` of the partial outputs in the forward pass (*f*'s backward
`all_reduce` of dL/dX never runs on either side).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from benchmarks.pairs import Context, Pair, Sides, training_step
from helpers.bench.taught import taught
from helpers.training.toy import make_data, make_mlp

LR = 0.01
BATCH = 128                 # rows of the batch, the same on every rank
NEEDS = ["ColumnParallelLinear", "RowParallelLinear", "CopyToTensorParallel",
         "ReduceFromTensorParallel"]


def _model(ctx: Context) -> torch.nn.Sequential:
    """The whole MLP, the same initial weights on every rank and for both sides."""
    w = ctx.width
    return make_mlp(w, 4 * w, w, dtype=ctx.dtype).to(ctx.device)


def _hand(ns: dict[str, Any], ctx: Context) -> torch.nn.Module:
    full = _model(ctx)
    return torch.nn.Sequential(ns["ColumnParallelLinear"](full[0]), torch.nn.Tanh(),
                               ns["RowParallelLinear"](full[2]))


def _torch(ctx: Context) -> torch.nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    return parallelize_module(_model(ctx), mesh,
                              {"0": ColwiseParallel(), "2": RowwiseParallel()})


def _stepper(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor):
    return training_step(model, torch.optim.SGD(model.parameters(), lr=LR), x, y)


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a DTensor; a Partial one (20's LayerNorm gradients) summed."""
    if not hasattr(t, "to_local"):
        return t.detach()
    return (t.full_tensor() if t.placements[0].is_partial() else t.to_local()).detach()


def differences(hand: torch.nn.Module, theirs: torch.nn.Module) -> str:
    """"" if every local parameter and gradient agree to float32 rounding, else which."""
    bad = []
    others = dict(theirs.named_parameters())
    for name, p in hand.named_parameters():
        q = others[name]
        for what, mine, their in (("", p, q), (" grad", p.grad, q.grad)):
            mine, their = _local(mine), _local(their)
            if mine.shape != their.shape:
                bad.append(f"{name}{what}: {list(mine.shape)} vs {list(their.shape)}")
            elif not torch.allclose(mine, their, rtol=1e-4, atol=1e-5):
                diff = (mine - their).abs().max().item()
                bad.append(f"{name}{what}: max |by hand − torch| {diff:.1e}")
    return "; ".join(bad)


def build(ctx: Context) -> Sides:
    w = ctx.width
    X, Y = (t.to(ctx.device) for t in make_data(BATCH, w, w, dtype=ctx.dtype))
    ns = taught("17_tensor_parallel", needs=NEEDS, device=ctx.device)
    hand_step = _stepper(_hand(ns, ctx), X, Y)
    torch_step = _stepper(_torch(ctx), X, Y)

    def agree() -> str:
        hand, theirs = _hand(ns, ctx), _torch(ctx)
        for step in (_stepper(hand, X, Y), _stepper(theirs, X, Y)):
            step()
            step()
        dist.barrier()
        return differences(hand, theirs)

    return Sides(hand=hand_step, torch=torch_step, agree=agree,
                 about=f"Linear({w}→{4 * w})-Tanh-Linear({4 * w}→{w}) float32, batch "
                       f"{BATCH} on every rank, SGD; hidden split over {ctx.world_size} "
                       "ranks, 1 all_reduce of the output per step")


PAIRS = [Pair(name="tensor parallel MLP", notebook="17_tensor_parallel",
              hand="ColumnParallelLinear + RowParallelLinear (17)",
              torch="parallelize_module Colwise/Rowwise", build=build)]
