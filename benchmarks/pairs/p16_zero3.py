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

from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist

from benchmarks.pairs import Context, Pair, Sides, training_step
from helpers.bench.taught import taught
from helpers.training.toy import make_data, make_mlp, shard
from helpers.training.zero import row_range

LR = 0.01
SAMPLES_PER_RANK = 64      # the batch: SAMPLES_PER_RANK × world_size rows
# Do the two sides compute the same? Not in float32: where a gradient element nearly
# cancels, Adam's m/(√v + ε) turns a rounding difference of the two reduction orders into
# a step of up to ±lr (measured at width 1024: parameters 9e-5 apart after two steps, 1.8e-4
# on another machine). So `agreement` runs both sides again in float64, from the same
# weights and data, and compares what rounding cannot move:
# - the gradient shards after one backward, within GRAD_TOLERANCE of the tensor's largest
#   element (float64: 2^-53 ≈ 1.1e-16 per operation; measured 1e-15 of the largest at
#   widths 64 and 1024, 2 and 4 ranks). A missing rank's share or a missing 1/n moves
#   them by a tenth or more. Adam is blind to such a scale; the gradients are not;
# - the parameters after STEPS Adam steps, within the rounding a step can amplify: Adam's
#   update has a derivative of at most about 1/ε in each gradient element, so 2 · lr/ε ·
#   the gradient tolerance per step (at width 1024: measured 5e-12 apart, tolerances 1.5e-9
#   to 3.6e-9). A wrong optimizer shard, or gradients n times too large, move them by
#   1e-4 to 1e-2.
GRAD_TOLERANCE = 1e-12
STEPS = 2
EPS = 1e-8                 # Adam's default ε, named so that the bound can use it
NEEDS = ["Zero3MLP", "ShardedLinear", "gather_rows", "scatter_grad", "shard_of", "LiveBytes"]


def _model(ctx: Context) -> torch.nn.Sequential:
    """The same initial weights on every rank and for both sides (make_mlp's seed)."""
    w = ctx.width
    return make_mlp(w, w, w, dtype=ctx.dtype).to(ctx.device)


def _hand(ns: dict[str, Any], ctx: Context) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = ns["Zero3MLP"](_model(ctx), ns["LiveBytes"]())
    return model, torch.optim.Adam(model.parameters(), lr=LR, eps=EPS)


def _fsdp(ctx: Context) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    model = _model(ctx)
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)          # one unit per linear layer, as notebook 16
    fully_shard(model, mesh=mesh)
    return model, torch.optim.Adam(model.parameters(), lr=LR, eps=EPS)


def _hand_shards(model: torch.nn.Module, ctx: Context,
                 grads: bool = False) -> dict[str, torch.Tensor]:
    """This rank's real rows of each parameter (the padding rows cut off), or of its grad."""
    out = {}
    for name, s in zip(model.names, model.shards):
        lo, hi = row_range(ctx.width, ctx.rank, ctx.world_size)   # every tensor: w rows
        out[name] = (s.grad if grads else s).detach()[:hi - lo]
    return out


def _fsdp_shards(model: torch.nn.Module, grads: bool = False) -> dict[str, torch.Tensor]:
    return {n: (p.grad if grads else p).to_local().detach() for n, p in model.named_parameters()}


def _differences(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor],
                 what: str, tolerance: dict[str, float]) -> list[str]:
    bad = []
    for name, mine in ours.items():
        if mine.shape != theirs[name].shape:
            bad.append(f"{name}{what}: shard {list(mine.shape)} vs FSDP2 "
                       f"{list(theirs[name].shape)}")
        elif not torch.allclose(mine, theirs[name], rtol=0, atol=tolerance[name]):
            diff = (mine - theirs[name]).abs().max().item()
            bad.append(f"{name}{what}: max |by hand − FSDP2| {diff:.1e} "
                       f"(tolerance {tolerance[name]:.1e})")
    return bad


def agreement(ns: dict[str, Any], ctx: Context) -> str:
    """"" when the hand side (the notebook's definitions in `ns`) and FSDP2 compute the
    same in float64 (the gradients, then the parameters after STEPS Adam steps), else what
    differs on this rank."""
    exact = replace(ctx, dtype=torch.float64)
    X, Y = make_data(SAMPLES_PER_RANK * ctx.world_size, ctx.width, ctx.width,
                     dtype=torch.float64)
    x, y = (shard(t, ctx.rank, ctx.world_size).to(ctx.device) for t in (X, Y))
    hand_model, hand_opt = _hand(ns, exact)
    fsdp_model, fsdp_opt = _fsdp(exact)
    steps = (training_step(hand_model, hand_opt, x, y), training_step(fsdp_model, fsdp_opt, x, y))
    for step in steps:
        step()                   # .grad keeps this step's gradient until the next zero_grad
    ours, theirs = _hand_shards(hand_model, ctx, grads=True), _fsdp_shards(fsdp_model, grads=True)
    scale = {n: max(t.abs().max().item() for t in (ours[n], theirs[n])) for n in ours}
    grad_tol = {n: GRAD_TOLERANCE * scale[n] for n in ours}
    bad = _differences(ours, theirs, ".grad", grad_tol)
    for _ in range(STEPS - 1):
        for step in steps:
            step()
    param_tol = {n: STEPS * 2 * LR / EPS * grad_tol[n] for n in ours}
    bad += _differences(_hand_shards(hand_model, ctx), _fsdp_shards(fsdp_model), "", param_tol)
    dist.barrier()
    return "; ".join(bad)


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
        return agreement(ns, ctx)

    return Sides(hand=hand_step, torch=torch_step, agree=agree,
                 about=f"Linear({w})-Tanh-Linear({w}) float32, "
                       f"{SAMPLES_PER_RANK} samples/rank, Adam; FSDP2 per layer + root, "
                       "defaults (reshard_after_forward: True for the layers)")


PAIRS = [Pair(name="ZeRO-3", notebook="16_zero_fsdp", hand="ZeRO-3 by hand (16)",
              torch="FSDP2 fully_shard", build=build)]
