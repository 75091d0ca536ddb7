"""Hang lab, script 2: a small regression model, its gradients averaged by hand.

Every rank trains on its own batches; after `loss.backward()` each gradient is summed over
the ranks with `all_reduce` and divided by the world size. Rank 0 also holds a validation
set, and every few steps the validation loss is logged. Run it with the kit's runner:
`python -m tools.hang_lab 2` (docs/kit/README.md, "Hang lab").
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from dist_utils import log, run

FEATURES, BATCH, STEPS, LOG_EVERY = 8, 16, 12, 4


def batch(seed: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`size` samples of y = x·w + noise, the same w for every seed."""
    w = torch.randn(FEATURES, 1, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(size, FEATURES, generator=g)
    return x, x @ w + 0.1 * torch.randn(size, 1, generator=g)


def average_gradients(model: nn.Module, world_size: int) -> None:
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world_size


def validation_loss(model: nn.Module, held_out: tuple[torch.Tensor, torch.Tensor]) -> float:
    """The loss on rank 0's validation set, sent to every rank (for the LR schedule)."""
    value = torch.zeros(1)
    if dist.get_rank() == 0:
        with torch.no_grad():
            value[0] = nn.functional.mse_loss(model(held_out[0]), held_out[1])
    dist.broadcast(value, src=0)
    return value.item()


def train(rank: int, world_size: int) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    held_out = batch(seed=10_000, size=64)
    log(f"{STEPS} steps of {BATCH} samples")
    for step in range(STEPS):
        x, y = batch(seed=1 + step * world_size + rank, size=BATCH)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        average_gradients(model, world_size)
        optimizer.step()
        if rank == 0 and step % LOG_EVERY == LOG_EVERY - 1:
            log(f"step {step}: loss {loss.item():.4f}, "
                f"validation {validation_loss(model, held_out):.4f}")
    log(f"trained {STEPS} steps")


if __name__ == "__main__":
    run(train)
