"""The pairs of `make bench`'s training table: each hand-built version beside torch's own.

A module of this folder defines `PAIRS`, a list of `Pair`. The bench
(benchmarks/training_bench.py) starts one torchrun job (4 ranks, gloo, one thread per
rank) and, on every rank, calls each pair's `build(ctx)` once: it returns `Sides`, two
callables that each run ONE step on this rank (a training step: forward, backward, the
communication and the optimizer step; for a collective pair, one call), on the same
model, data and world size, in the same process. The hand-built side runs the notebook's
own `%%px` definitions (helpers.bench.taught), never a copy of them.

The bench then times the two sides in interleaved pairs until their ratio settles, and
profiles one step of each (torch.profiler) for the breakdown: compute, communication,
waiting. A pair's `agree()` runs first: the two sides must compute the same thing, or
the ratio would compare two different jobs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

WIDTH = 1024              # hidden width of the bench's models
DTYPE = torch.float32


@dataclass
class Context:
    """What a pair's build gets on each rank."""
    rank: int
    world_size: int
    device: torch.device
    width: int = WIDTH
    dtype: torch.dtype = DTYPE
    quick: bool = False    # tests: small models (the runner sets width 64), a step of ms


@dataclass
class Sides:
    """One step of each side, and the check that they do the same work."""
    hand: Callable[[], object]
    torch: Callable[[], object]
    agree: Callable[[], str]     # "" if both sides compute the same (e.g. the same
                                 # parameters after the same steps), else what differs
    about: str = ""              # one line: the model and data (e.g. "4 × Linear(1024)")
    bytes_per_step: int | None = None   # a collective pair: the buffer size S, for busbw


@dataclass
class Pair:
    name: str                    # the row, and the key in build/bench/training.json
    notebook: str                # where the hand-built version is taught (and quoted)
    hand: str                    # e.g. "bucketed, overlapped (15)"
    torch: str                   # e.g. "DistributedDataParallel"
    build: Callable[[Context], Sides]
    collective: str | None = None       # a collective pair: busbw as nccl-tests counts it
    tags: list[str] = field(default_factory=list)


def training_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                  x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    """One step of the toy's regression: zero_grad, MSE loss, backward, optimizer step."""
    from helpers.training.toy import loss_fn

    def step() -> None:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    return step


def all_pairs() -> list[Pair]:
    """Every pair of every module here, in the order of the table."""
    import importlib
    import pkgutil

    pairs: list[Pair] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        pairs.extend(importlib.import_module(f"{__name__}.{info.name}").PAIRS)
    names = [p.name for p in pairs]
    if len(set(names)) != len(names):
        raise ValueError(f"two pairs share a name: {names}")
    return pairs
