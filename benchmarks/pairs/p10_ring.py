"""The ring all_reduce by hand against `dist.all_reduce`: one call on one buffer.

Notebook 10 teaches the ring as two top-level loops around its `exchange()`, which reads
the notebook's globals (`right`, `left`) and counts `sent_elements`: no function to call.
Notebook 25 packages the very same schedule, chunk for chunk, as
`ring_all_reduce(x, ranks, log=None)` (helpers.collectives.ring's `send_chunk` /
`recv_chunk`, 25's own `exchange` over `batch_isend_irecv`). The bench runs 25's function,
from 25's `%%px` cells, on the whole world; the row is quoted in notebook 10.

The buffer is zeros, as in notebook 25's sweep: repeated sums stay finite, so every call
does the same arithmetic. `agree()` runs both once on the same random input per rank.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from benchmarks.pairs import Context, Pair, Sides
from helpers.bench.taught import taught

MIB = 1024 * 1024
FULL_BYTES = 64 * MIB        # as nccl-tests' and notebook 11's largest sizes
QUICK_BYTES = 256 * 1024


def buffer_numel(ctx: Context) -> int:
    """Elements of the buffer: its bytes, rounded down to a multiple of the world size."""
    nbytes = QUICK_BYTES if ctx.quick else FULL_BYTES
    per_element = torch.tensor([], dtype=ctx.dtype).element_size()
    return nbytes // per_element // ctx.world_size * ctx.world_size


def build(ctx: Context) -> Sides:
    ns = taught("25_algorithms", needs=["ring_all_reduce"], device=ctx.device)
    ring_all_reduce = ns["ring_all_reduce"]
    ranks = list(range(ctx.world_size))
    numel = buffer_numel(ctx)
    x = torch.zeros(numel, dtype=ctx.dtype, device=ctx.device)

    def agree() -> str:
        g = torch.Generator().manual_seed(1000 + ctx.rank)
        start = torch.randn(numel, generator=g, dtype=ctx.dtype).to(ctx.device)
        ours, theirs = ring_all_reduce(start.clone(), ranks), start.clone()
        dist.all_reduce(theirs)
        if torch.allclose(ours, theirs, rtol=1e-5, atol=1e-5):
            return ""
        return f"max |ring − dist.all_reduce| {(ours - theirs).abs().max().item():.1e}"

    nbytes = numel * x.element_size()
    return Sides(hand=lambda: ring_all_reduce(x, ranks), torch=lambda: dist.all_reduce(x),
                 agree=agree, bytes_per_step=nbytes,
                 about=f"all_reduce(SUM) of {nbytes / MIB:g} MiB of {str(ctx.dtype)[6:]} "
                       f"zeros: 2(n − 1) ring steps of one chunk (notebook 25's function)")


PAIRS = [Pair(name="ring all_reduce", notebook="10_ring_all_reduce",
              hand="ring_all_reduce (10's ring, packaged in 25)", torch="dist.all_reduce",
              build=build, collective="all_reduce", tags=["collective"])]
