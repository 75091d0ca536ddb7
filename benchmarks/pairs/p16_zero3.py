"""ZeRO-3 by hand (notebook 16's `Zero3MLP`) against FSDP2's `fully_shard`.

Both sides train `make_mlp(width, width, width)` in float32 with Adam on this rank's
shard of one batch. The hand side is notebook 16's stage 3: each `ShardedLinear` gathers
its weight and bias (one `all_gather` each) before the forward, the weight again in the
backward, and reduce_scatters both gradients (one call each). FSDP2 wraps each linear
layer, then the root, as the notebook does, with its defaults (`reshard_after_forward=None`,
True for every module but the root: the layers' weights are gathered again in the
backward too). Both make the same gathers and
reduce_scatters; FSDP2 in one call per layer (weight and bias flat), at the price of
copies in and out of its flat buffers, hooks and DTensor parameters, and on CPU without
its overlap (notebook 16, "How fast is it against torch's?", says where in its source).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from benchmarks.pairs import Context, Pair, Sides, training_step
from helpers.bench.taught import taught
from helpers.training.toy import make_data, make_mlp, shard
from helpers.training.zero import row_range

LR = 0.01
SAMPLES_PER_RANK = 64      # the batch: SAMPLES_PER_RANK × world_size rows
# Adam divides each gradient element by its own running magnitude: where the ranks' gradients
# nearly cancel, float32 rounding (the two sides sum in different orders) moves an element by
# a visible part of lr. Measured at width 1024: both sides 4e-5 from a float64 run, 6e-5
# apart. A missing or wrong reduction moves elements by ~lr.
TOLERANCE = LR / 100
NEEDS = ["Zero3MLP", "ShardedLinear", "gather_rows", "scatter_grad", "shard_of", "LiveBytes"]


def _model(ctx: Context) -> torch.nn.Sequential:
    """The same initial weights on every rank and for both sides (make_mlp's seed)."""
    w = ctx.width
    return make_mlp(w, w, w, dtype=ctx.dtype).to(ctx.device)


def _hand(ns: dict[str, Any], ctx: Context) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = ns["Zero3MLP"](_model(ctx), ns["LiveBytes"]())
    return model, torch.optim.Adam(model.parameters(), lr=LR)


def _fsdp(ctx: Context) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    model = _model(ctx)
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)          # one unit per linear layer, as notebook 16
    fully_shard(model, mesh=mesh)
    return model, torch.optim.Adam(model.parameters(), lr=LR)


def _hand_shards(model: torch.nn.Module, ctx: Context) -> dict[str, torch.Tensor]:
    """This rank's real rows of each parameter (the padding rows cut off)."""
    out = {}
    for name, s in zip(model.names, model.shards):
        lo, hi = row_range(ctx.width, ctx.rank, ctx.world_size)   # every tensor: w rows
        out[name] = s.detach()[:hi - lo]
    return out


def build(ctx: Context) -> Sides:
    w = ctx.width
    X, Y = make_data(SAMPLES_PER_RANK * ctx.world_size, w, w, dtype=ctx.dtype)
    x, y = (shard(t, ctx.rank, ctx.world_size).to(ctx.device) for t in (X, Y))
    # zero_group is a plain assignment in the notebook (None: the default group), which
    # taught() does not run: given here.
    ns = taught("16_zero_fsdp", needs=NEEDS, device=ctx.device, zero_group=None)
    hand_step = training_step(*_hand(ns, ctx), x, y)
    torch_step = training_step(*_fsdp(ctx), x, y)

    def agree() -> str:
        hand_model, hand_opt = _hand(ns, ctx)
        fsdp_model, fsdp_opt = _fsdp(ctx)
        for step in (training_step(hand_model, hand_opt, x, y), training_step(fsdp_model, fsdp_opt, x, y)):
            step()
            step()
        ours = _hand_shards(hand_model, ctx)
        theirs = {n: p.to_local().detach() for n, p in fsdp_model.named_parameters()}
        bad = []
        for name, mine in ours.items():
            if mine.shape != theirs[name].shape:
                bad.append(f"{name}: shard {list(mine.shape)} vs FSDP2 "
                           f"{list(theirs[name].shape)}")
            elif not torch.allclose(mine, theirs[name], rtol=0, atol=TOLERANCE):
                diff = (mine - theirs[name]).abs().max().item()
                bad.append(f"{name}: max |by hand − FSDP2| {diff:.1e}")
        dist.barrier()
        return "; ".join(bad)

    return Sides(hand=hand_step, torch=torch_step, agree=agree,
                 about=f"Linear({w})-Tanh-Linear({w}) float32, "
                       f"{SAMPLES_PER_RANK} samples/rank, Adam; FSDP2 per layer + root, "
                       "defaults (reshard_after_forward: True for the layers)")


PAIRS = [Pair(name="ZeRO-3", notebook="16_zero_fsdp", hand="ZeRO-3 by hand (16)",
              torch="FSDP2 fully_shard", build=build)]
