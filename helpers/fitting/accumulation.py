"""Notebook 23's plumbing: micro-batches, activation meters and timers, and the tables.

    parts = micro_batches(X, Y, rank, world_size, k)    # this rank's k micro-batches
    ring_all_reduce(nbytes, n)                          # the ring model: 2(n-1)/n · S
    flat_grad(model)                                    # every gradient, one flat tensor
    recompute_cost(model, x, y, loss_fn)                # saved bytes, forward calls, times

The accumulation loops, the hooks and every `dist.<collective>` call stay in the notebook's
`%%px` cells; this module only prepares and measures. Runs on the engines and in the
notebook alike: torch only, no ipyparallel. The compression hooks' runs and table are in
helpers.fitting.compression.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence

import torch
from torch import nn

from helpers.bench.nccl_tests import model_sent
from helpers.transformer.sequence_parallel import ActivationMeter

K_STEPS = 4   # accumulation steps: 48 samples / (4 · n) is a whole micro-batch for n = 1…4


def micro_size(n_samples: int, k: int, world_size: int) -> int:
    """Samples in one micro-batch: the global batch / (k accumulation steps · ranks)."""
    if k < 1 or world_size < 1:
        raise ValueError(f"k ({k}) and world_size ({world_size}) must be at least 1")
    if n_samples % (k * world_size):
        raise ValueError(f"a global batch of {n_samples} does not split into {k} micro-batches "
                         f"× {world_size} ranks; pick k · world_size dividing {n_samples}")
    return n_samples // (k * world_size)


def micro_batches(X: torch.Tensor, Y: torch.Tensor, rank: int, world_size: int,
                  k: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Rank `rank`'s k micro-batches: its contiguous share of the batch, cut in k pieces."""
    m = micro_size(X.shape[0], k, world_size)
    start = rank * k * m
    return [(X[start + i * m:start + (i + 1) * m], Y[start + i * m:start + (i + 1) * m])
            for i in range(k)]


def ring_all_reduce(nbytes: float, n: int) -> float:
    """The ring model of one all_reduce of S = nbytes: 2(n − 1)/n · S sent per rank."""
    return model_sent("all_reduce", nbytes, n, 0)


def flat_grad(model: nn.Module) -> torch.Tensor:
    """Every parameter's gradient, flattened into one tensor (a copy)."""
    return torch.cat([p.grad.detach().flatten() for p in model.parameters()])


def set_flat_grad(model: nn.Module, flat: torch.Tensor) -> None:
    """Write a flat tensor back into the parameters' gradients, in order."""
    offset = 0
    for p in model.parameters():
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()


def state_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of the parameters, by state-dict name (DDP's `module.` prefix removed)."""
    return {name.removeprefix("module."): v.detach().clone()
            for name, v in model.state_dict().items()}


def make_stack(depth: int, seed: int = 0) -> nn.Sequential:
    """`depth` transformer blocks of part 3 (helpers.transformer.block), seeds seed…"""
    from helpers.transformer.block import make_block

    return nn.Sequential(*(make_block(seed=seed + i) for i in range(depth)))


def _count_forwards(model: nn.Module, blocks: Sequence[nn.Module]) -> tuple[list[int], list]:
    calls = [0]

    def count(module: nn.Module, args: Any) -> None:
        calls[0] += 1
    return calls, [b.register_forward_pre_hook(count) for b in blocks]


def recompute_cost(model: nn.Module, blocks: Sequence[nn.Module], x: torch.Tensor,
                   y: torch.Tensor, loss_fn: Callable, repeats: int = 3) -> dict[str, Any]:
    """One training pass of `model`, measured: the bytes autograd saves in forward
    (helpers.transformer.sequence_parallel.ActivationMeter, a saved_tensors_hooks count),
    how many times the blocks' forward ran (forward and backward together), and the
    fastest of `repeats` forward and backward times (this run's, seconds)."""
    forward_s, backward_s = [], []
    for _ in range(repeats):
        model.zero_grad()
        calls, handles = _count_forwards(model, blocks)
        with ActivationMeter(model) as meter:
            start = time.perf_counter()
            loss = loss_fn(model(x), y)
            forward_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        loss.backward()
        backward_s.append(time.perf_counter() - start)
        for handle in handles:
            handle.remove()
    return {"saved_bytes": meter.by_region()["total"], "block_forwards": calls[0],
            "forward_s": min(forward_s), "backward_s": min(backward_s),
            "median_step_s": statistics.median(f + b for f, b in zip(forward_s, backward_s))}


def recompute_text(costs: Sequence[dict[str, dict[str, Any]]]) -> str:
    """Per rank: saved bytes, block forwards and times, without and with checkpointing."""
    rows = [f"{'rank':<6}{'variant':<16}{'saved (B)':>12}{'forwards':>10}{'forward':>10}"
            f"{'backward':>10}"]
    for rank, cost in enumerate(costs):
        for variant, c in cost.items():
            rows.append(f"{rank:<6}{variant:<16}{c['saved_bytes']:>12,}{c['block_forwards']:>10}"
                        f"{c['forward_s'] * 1e3:>8.1f}ms{c['backward_s'] * 1e3:>8.1f}ms")
    return "\n".join(rows)


def bytes_per_step_text(rows: Sequence[dict[str, Any]], n: int) -> str:
    """One rank's rows {"what", "calls", "size", "measured"} as a table, with the ring model
    of the all_reduces (size = S of one call; calls = how many per step)."""
    out = [f"{'one optimizer step':<34}{'calls':>6}{'S (B)':>8}{'model (B)':>11}"
           f"{'measured (B)':>14}"]
    for r in rows:
        model = r["calls_made"] * ring_all_reduce(r["size"], n)
        measured = "not measured" if r["measured"] is None else f"{r['measured']:,}"
        out.append(f"{r['what']:<34}{r['calls']:>6}{r['size']:>8}{model:>11,.0f}{measured:>14}")
    return "\n".join(out)
