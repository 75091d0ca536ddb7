"""Hang lab, script 3: a small regression model trained with DDP, its best state kept.

When the loss reaches a new low, the model is kept: rank 0 writes it to
`checkpoints/best_<step>.pt`, and the other ranks wait until the file is there before they go
on, so that no rank runs ahead of the checkpoint. Run it with the kit's runner:
`python -m tools.hang_lab 3` (docs/kit/README.md, "Hang lab").
"""
from __future__ import annotations

import time
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from dist_utils import log, run

FEATURES, BATCH, STEPS = 8, 16, 20
CHECKPOINTS = Path("checkpoints")


def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """BATCH samples of y = x·w + noise, the same w for every seed."""
    w = torch.randn(FEATURES, 1, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, FEATURES, generator=g)
    return x, x @ w + torch.randn(BATCH, 1, generator=g)


def wait_for(path: Path) -> None:
    while not path.exists():
        time.sleep(0.2)


def train(rank: int, world_size: int) -> None:
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    CHECKPOINTS.mkdir(exist_ok=True)
    best = float("inf")
    log(f"{STEPS} steps of {BATCH} samples")
    for step in range(STEPS):
        x, y = batch(seed=1 + step * world_size + rank)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if loss.item() < best:
            best = loss.item()
            path = CHECKPOINTS / f"best_{step}.pt"
            if rank == 0:
                torch.save(model.module.state_dict(), path)
            else:
                wait_for(path)
            log(f"step {step}: loss {best:.4f}, the best so far")
    log(f"trained {STEPS} steps")


if __name__ == "__main__":
    run(train)
