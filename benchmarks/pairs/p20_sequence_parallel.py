"""Tensor and sequence parallelism on the transformer block by hand (notebook 20's
`TensorParallelBlock`, `SequenceParallelBlock`) against `parallelize_module`.

Both sides train helpers.transformer.block's pre-norm block, scaled up (d_model = width / 2,
heads of 64 features, d_ff = 4 d_model, 2 sequences of 128 tokens) in float32 with SGD on
the same batch. Tensor parallel: every rank takes the whole batch; torch's plan is the
notebook's sequence-parallel plan without the sequence split (torchtitan's: the attention's
input made a DTensor once, for q, k and v). Sequence parallel: every rank takes its tokens;
torch's plan is the notebook's (`SequenceParallel` LayerNorms, `Shard(1)` layouts); the
hand side sums the replicated gradients with the notebook's `sync_replicated_grads`, torch
leaves them `Partial` and its optimizer step reduces them.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist

from benchmarks.pairs import Context, Pair, Sides
from benchmarks.pairs.p17_tensor_parallel import differences
from helpers.bench.taught import taught
from helpers.transformer.block import make_block, make_tokens
from helpers.transformer.sequence_parallel import REFERENCE_NAME, LocalHeadsAttention

LR = 0.01
NOTEBOOK = "20_tensor_sequence_parallel"
NEEDS = ["TensorParallelBlock", "SequenceParallelBlock", "sync_replicated_grads"]


def _sizes(ctx: Context) -> dict[str, int]:
    """The notebook's toy at quick, else scaled: heads of 64 features, d_ff = 4 d_model."""
    if ctx.quick:
        return dict(d_model=48, n_heads=12, d_ff=96, batch=2, seq=24)
    d = ctx.width // 2
    return dict(d_model=d, n_heads=d // 64, d_ff=4 * d, batch=2, seq=128)


def _block(ctx: Context) -> torch.nn.Module:
    s = _sizes(ctx)
    return make_block(s["d_model"], s["n_heads"], s["d_ff"], dtype=ctx.dtype).to(ctx.device)


def _torch(ctx: Context, sequence: bool) -> torch.nn.Module:
    """The notebook's plan (sequence=True), or the same without the sequence split."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    block = _block(ctx)
    block.attn = LocalHeadsAttention(block.attn)
    outside = Shard(1) if sequence else Replicate()        # the LayerNorm region's layout
    plan = {"attn": PrepareModuleInput(input_layouts=(outside,),
                                       desired_input_layouts=(Replicate(),)),
            "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(),
            "attn.v": ColwiseParallel(),
            "attn.o": RowwiseParallel(output_layouts=outside),
            "mlp.0": ColwiseParallel(input_layouts=outside),
            "mlp.2": RowwiseParallel(output_layouts=outside)}
    if sequence:
        plan.update(ln1=SequenceParallel(), ln2=SequenceParallel())
    return parallelize_module(block, mesh, plan)


def _stepper(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, count: int,
             sync: Callable[[torch.nn.Module], Any] | None = None):
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)

    def step() -> None:
        optimizer.zero_grad()
        (((model(x) - y) ** 2).sum() / count).backward()   # the mean over the whole batch
        if sync:
            sync(model)
        optimizer.step()
    return step


class _Renamed(torch.nn.Module):
    """The hand block's parameters under make_block's names, to compare with torch's."""

    def __init__(self, block: torch.nn.Module):
        super().__init__()
        self.params = {REFERENCE_NAME[n]: p for n, p in block.named_parameters()}

    def named_parameters(self, *args: Any, **kwargs: Any):
        return iter(self.params.items())


def _build(ctx: Context, sequence: bool) -> Sides:
    s = _sizes(ctx)
    X, Y = (t.to(ctx.device) for t in make_tokens(s["batch"], s["seq"], s["d_model"],
                                                  dtype=ctx.dtype))
    count = Y.numel()                  # SP: each rank's loss is its tokens' part of the mean
    if sequence:
        k = s["seq"] // ctx.world_size
        X, Y = (t[:, ctx.rank * k:(ctx.rank + 1) * k].contiguous() for t in (X, Y))
    ns = taught(NOTEBOOK, needs=NEEDS, device=ctx.device)
    Hand = ns["SequenceParallelBlock" if sequence else "TensorParallelBlock"]
    sync = ns["sync_replicated_grads"] if sequence else None

    def hand_model() -> torch.nn.Module:
        return Hand(_block(ctx))

    hand_step = _stepper(hand_model(), X, Y, count, sync)
    torch_step = _stepper(_torch(ctx, sequence), X, Y, count)

    def agree() -> str:
        hand, theirs = hand_model(), _torch(ctx, sequence)
        for step in (_stepper(hand, X, Y, count, sync), _stepper(theirs, X, Y, count)):
            step()
            step()
        dist.barrier()
        return differences(_Renamed(hand), theirs)

    split = f"{s['seq'] // ctx.world_size} tokens/rank" if sequence else "the whole batch"
    return Sides(hand=hand_step, torch=torch_step, agree=agree,
                 about=f"pre-norm block d_model {s['d_model']}, {s['n_heads']} heads, "
                       f"d_ff {s['d_ff']}, {s['batch']}×{s['seq']} tokens float32 "
                       f"({split}), SGD")


PAIRS = [Pair(name="tensor parallel block", notebook=NOTEBOOK,
              hand="TensorParallelBlock (20)", torch="parallelize_module Colwise/Rowwise",
              build=lambda ctx: _build(ctx, sequence=False)),
         Pair(name="sequence parallel block", notebook=NOTEBOOK,
              hand="SequenceParallelBlock (20)",
              torch="parallelize_module + SequenceParallel",
              build=lambda ctx: _build(ctx, sequence=True))]
