"""Data parallelism by hand (notebook 15's buckets, launched from gradient hooks during
backward) against torch's `DistributedDataParallel`.

Both sides train notebook 15's deep MLP (`make_deep_mlp`: 6 Linear layers, Tanh between)
at the bench's width in float32, with SGD, each rank on its quarter of one global batch.

The hand side is 15's own `train_overlapped(bucket_bytes, make_model)`: it runs `steps`
steps per call (a global of the notebook, here 1) and builds its model, optimizer, buckets
and hooks at every call. To time one step of one model that keeps its weights, the bench
passes a `make_model` that returns a model built once: a call is then one training step
(plus the notebook's set-up, a barrier and a copy of the parameters it returns, all
inside the timed step; they are the taught function's, kept as they are).

Buckets: the same bytes in nearly the same buckets on both sides, one layer's gradients
each. DDP gets `bucket_cap_mb=BUCKET_MIB` explicitly, which also makes its first bucket
that size (torch/nn/parallel/distributed.py, `_BucketCapacityConfig.create`: the 1 MiB
first bucket is for the default only). DDP closes a bucket once it reaches the cap, 15's
`make_buckets` before it would pass it, so the hand side's cap is DDP's plus 16 × width
floats, room for the small tensors (biases, the thin first and last layers) beside a
weight. Measured at width 1024 (DDP's `_get_ddp_logging_data()` after its rebuild):
DDP 4.02, 4.00, 4.00, 4.00, 0.04 MiB; by hand 4.02, 4.00, 4.00, 4.04 MiB.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from benchmarks.pairs import Context, Pair, Sides
from helpers.bench.taught import taught
from helpers.training.data_parallel import make_deep_mlp
from helpers.training.toy import D_IN, D_OUT, loss_fn, make_data, shard

LR = 0.01
BATCH = 256                  # the global batch: BATCH / world_size rows per rank
BUCKET_MIB = 4               # DDP's cap (the hand side's: see _caps)
NEEDS = ["make_buckets", "train_overlapped"]


def _caps(ctx: Context) -> tuple[float, int]:
    """(DDP's bucket_cap_mb, the hand side's bucket bytes): one layer per bucket."""
    mib = BUCKET_MIB if not ctx.quick else 16 / 1024        # quick: width 64, 16 KiB
    return mib, int(mib * 2**20) + 16 * ctx.width * ctx.dtype.itemsize


def _factory(ctx: Context) -> Callable[[], torch.nn.Module]:
    def make() -> torch.nn.Module:
        return make_deep_mlp(width=ctx.width, dtype=ctx.dtype).to(ctx.device)
    return make


def _hand(ns: dict[str, Any], model: torch.nn.Module, bucket_bytes: int) -> Callable:
    def step() -> dict:
        state, _ = ns["train_overlapped"](bucket_bytes, lambda: model)
        return state
    return step


def _ddp(ctx: Context, model: torch.nn.Module, x, y) -> tuple[Callable, torch.nn.Module]:
    ddp = DistributedDataParallel(model, bucket_cap_mb=_caps(ctx)[0])
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR)

    def step() -> None:
        optimizer.zero_grad()
        loss_fn(ddp(x), y).backward()        # DDP's hooks all_reduce the buckets here
        optimizer.step()
    return step, ddp


def differences(hand: torch.nn.Module, theirs: torch.nn.Module) -> str:
    """"" if parameters and gradients agree to float32 rounding, else which differ."""
    bad = []
    for (name, p), q in zip(hand.named_parameters(), theirs.parameters()):
        for what, a, b in (("", p, q), (" grad", p.grad, q.grad)):
            if not torch.allclose(a, b, rtol=1e-4, atol=1e-6):
                bad.append(f"{name}{what}: max |by hand − DDP| "
                           f"{(a - b).abs().max().item():.1e}")
    return "; ".join(bad)


def build(ctx: Context) -> Sides:
    X, Y = (t.to(ctx.device) for t in make_data(BATCH, D_IN, D_OUT, dtype=ctx.dtype))
    x, y = shard(X, ctx.rank, ctx.world_size), shard(Y, ctx.rank, ctx.world_size)
    ns = taught("15_data_parallel", needs=NEEDS, device=ctx.device, x=x, y=y, lr=LR,
                steps=1)
    make = _factory(ctx)
    mib, bucket_bytes = _caps(ctx)
    hand_step = _hand(ns, make(), bucket_bytes)
    torch_step, _ = _ddp(ctx, make(), x, y)

    def agree() -> str:
        hand, (theirs_step, theirs) = make(), _ddp(ctx, make(), x, y)
        for _ in range(2):
            _hand(ns, hand, bucket_bytes)()
            theirs_step()
        dist.barrier()
        return differences(hand, theirs.module)

    n, extra = ctx.world_size, bucket_bytes - int(mib * 2**20)
    return Sides(hand=hand_step, torch=torch_step, agree=agree,
                 about=f"make_deep_mlp(width={ctx.width}) float32, SGD, {BATCH // n} rows "
                       f"a rank; a layer a bucket: DDP bucket_cap_mb={mib:g} (first bucket "
                       f"too), make_buckets(that + {extra // 1024} KiB)")


PAIRS = [Pair(name="data parallel", notebook="15_data_parallel",
              hand="make_buckets + train_overlapped (15)",
              torch="DistributedDataParallel", build=build)]
