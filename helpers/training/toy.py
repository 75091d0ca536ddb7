"""The toy problem of notebooks 15–19: a small MLP on synthetic regression data.

Everything is deterministic (fixed seeds, float64 by default) so that a model trained
by hand on n ranks and the single-process reference can be compared to ~1e-12:

    X, Y = make_data()                       # the global batch, the same on every rank
    model = make_mlp()                       # the same initial weights everywhere
    ref = reference_train(make_mlp(), X, Y, steps=5, lr=0.1)
    ref.losses, ref.state                    # per-step loss, final parameters

Runs on the engines and in the notebook alike: torch only, no ipyparallel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

D_IN, D_HIDDEN, D_OUT = 8, 16, 4
N_SAMPLES = 48          # divisible by 1, 2, 3, 4, 6, 8: every world size up to 4 shards evenly
DTYPE = torch.float64   # float64 keeps hand-built vs reference differences at rounding level


def make_data(n_samples: int = N_SAMPLES, d_in: int = D_IN, d_out: int = D_OUT,
              seed: int = 0, dtype: torch.dtype = DTYPE) -> tuple[torch.Tensor, torch.Tensor]:
    """A regression batch: Y = tanh(X @ W) + noise, from a fixed seed."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n_samples, d_in, generator=g, dtype=dtype)
    W = torch.randn(d_in, d_out, generator=g, dtype=dtype) / d_in ** 0.5
    Y = torch.tanh(X @ W) + 0.05 * torch.randn(n_samples, d_out, generator=g, dtype=dtype)
    return X, Y


def make_mlp(d_in: int = D_IN, d_hidden: int = D_HIDDEN, d_out: int = D_OUT,
             seed: int = 0, dtype: torch.dtype = DTYPE) -> nn.Sequential:
    """Linear → Tanh → Linear, with the same initial weights for the same seed."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.Tanh(),
                         nn.Linear(d_hidden, d_out)).to(dtype)


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the batch (the mean makes shards average, not sum)."""
    return ((output - target) ** 2).mean()


def shard(batch: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank `rank`'s contiguous slice of the batch (dim 0); the batch must divide evenly."""
    if batch.shape[0] % world_size:
        raise ValueError(f"a batch of {batch.shape[0]} does not split evenly over "
                         f"{world_size} ranks; pick a batch size divisible by {world_size}")
    per_rank = batch.shape[0] // world_size
    return batch[rank * per_rank:(rank + 1) * per_rank]


@dataclass
class Reference:
    losses: list[float]                    # loss before each step, on the whole batch
    state: dict[str, torch.Tensor]         # parameters after the last step


def reference_train(model: nn.Module, X: torch.Tensor, Y: torch.Tensor, steps: int,
                    lr: float = 0.1, optimizer: str = "sgd",
                    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = loss_fn
                    ) -> Reference:
    """Train on the whole batch in one process: what every parallel version must match
    (`loss`: the toy's MSE unless another model's is given)."""
    opt = make_optimizer(model, lr, optimizer)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss_value = loss(model(X), Y)
        loss_value.backward()
        opt.step()
        losses.append(loss_value.item())
    return Reference(losses, {k: v.detach().clone() for k, v in model.state_dict().items()})


def make_optimizer(model: nn.Module, lr: float, optimizer: str = "sgd") -> torch.optim.Optimizer:
    if optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr)
    if optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr)
    raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")


def max_abs_diff(state: dict[str, Any], reference: dict[str, torch.Tensor]) -> float:
    """The largest |a − b| over every parameter of two state dicts with the same keys (the
    first's values: tensors, or the lists a saved record holds), in the reference's dtype."""
    if set(state) != set(reference):
        raise ValueError(f"different parameters: {sorted(state)} vs {sorted(reference)}")
    return max((torch.as_tensor(state[k], dtype=reference[k].dtype) - reference[k]).abs().max()
               .item() for k in state)
