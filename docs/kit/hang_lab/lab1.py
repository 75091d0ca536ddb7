"""Hang lab, script 1: a small regression model trained with DDP for two epochs.

Each rank trains on every world_size-th sample of a 97-sample dataset, in batches of 8;
DDP averages the gradients in `loss.backward()`. Run it with the kit's runner:
`python -m tools.hang_lab 1` (docs/kit/README.md, "Hang lab").
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from dist_utils import log, run

SAMPLES, FEATURES, BATCH, EPOCHS = 97, 8, 8, 2


def dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """The same samples on every rank: y = x·w + noise."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    return x, x @ w + 0.1 * torch.randn(SAMPLES, 1, generator=g)


def train(rank: int, world_size: int) -> None:
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = dataset()
    shard = list(range(rank, SAMPLES, world_size))
    batches = [shard[i:i + BATCH] for i in range(0, len(shard), BATCH)]
    log(f"{len(shard)} samples, {len(batches)} batches an epoch")
    for epoch in range(EPOCHS):
        for batch in batches:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
        log(f"epoch {epoch}: loss {loss.item():.4f}")
    log("done")


if __name__ == "__main__":
    run(train)
