"""Notebook 27's plumbing for the measured runs: the toy stack, torch's tensor-parallel plan
for it, CommDebugMode's counts by kind, a fresh process for the fake process group, the
timing of a step (fastest of k), and the prediction-error table."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch
from torch import nn

from helpers.runtime.disposable import run_disposable
from helpers.scale.algorithms import interleaved_us
from helpers.transformer.block import make_block
from helpers.transformer.sequence_parallel import LocalHeadsAttention

# CommDebugMode's op names → the collective (c10d's own ops and the functional ones).
KIND_OF_OP = {"allreduce_": "all_reduce", "all_reduce": "all_reduce",
              "_allgather_base_": "all_gather", "allgather_": "all_gather",
              "all_gather_into_tensor": "all_gather", "_reduce_scatter_base_": "reduce_scatter",
              "reduce_scatter_": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
              "all_to_all_single": "all_to_all", "alltoall_base_": "all_to_all",
              "broadcast_": "broadcast"}


def make_stack(layers: int, **block: Any) -> nn.Sequential:
    """`layers` toy blocks (seeds 0, 1, ...), attention with local heads (for TP)."""
    blocks = []
    for i in range(layers):
        b = make_block(seed=i, **block)
        b.attn = LocalHeadsAttention(b.attn)
        blocks.append(b)
    return nn.Sequential(*blocks)


def tp_plan(layers: int) -> dict[str, Any]:
    """ColwiseParallel for q, k, v and the first MLP Linear, RowwiseParallel for o and the
    second, in every block (Megatron-LM's split, notebook 20)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    plan: dict[str, Any] = {}
    for i in range(layers):
        plan.update({f"{i}.attn.{p}": ColwiseParallel() for p in "qkv"})
        plan.update({f"{i}.attn.o": RowwiseParallel(), f"{i}.mlp.0": ColwiseParallel(),
                     f"{i}.mlp.2": RowwiseParallel()})
    return plan


def sp_plan(layers: int) -> dict[str, Any]:
    """`tp_plan` with sequence parallelism, as notebook 20 (cell c39) builds it: the norms
    `SequenceParallel`, the attention's input gathered once for q, k and v
    (`PrepareModuleInput`), o and the second MLP Linear back to sequence shards
    (`output_layouts=Shard(1)`)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel)
    plan: dict[str, Any] = {}
    for i in range(layers):
        plan.update({f"{i}.ln1": SequenceParallel(), f"{i}.ln2": SequenceParallel(),
                     f"{i}.attn": PrepareModuleInput(input_layouts=(Shard(1),),
                                                     desired_input_layouts=(Replicate(),)),
                     f"{i}.attn.o": RowwiseParallel(output_layouts=Shard(1)),
                     f"{i}.mlp.0": ColwiseParallel(input_layouts=Shard(1)),
                     f"{i}.mlp.2": RowwiseParallel(output_layouts=Shard(1))})
        plan.update({f"{i}.attn.{p}": ColwiseParallel() for p in "qkv"})
    return plan


def debug_counts(comm: Any) -> dict[str, int]:
    """CommDebugMode's counts by collective kind ({"all_reduce": 6, ...})."""
    out: dict[str, int] = {}
    for op, calls in comm.get_comm_counts().items():
        name = str(op).split(".")[-1].split("'")[0]
        kind = KIND_OF_OP.get(name, name)
        out[kind] = out.get(kind, 0) + calls
    return out


def fresh_process(case: Callable[..., Any], timeout_s: float = 120.0, **kwargs: Any) -> Any:
    """Run `case(**kwargs)` (a function written in a notebook cell) in a process of its own
    and return what it returned (as JSON has it): a fake process group there leaves none
    here. The process is a disposable one that joins no group (helpers.runtime.disposable)."""
    [outcome] = run_disposable(case, world_size=1, args=kwargs, limit_s=timeout_s, group=False)
    if outcome.returncode != 0 or outcome.error is not None:
        raise RuntimeError(f"{case.__name__} failed: {outcome.summary()}\n"
                           f"{outcome.stderr[-2000:]}")
    return outcome.result


def fastest_pair(step: Callable[[], Any], compute: Callable[[], Any], k: int,
                 barrier: Callable[[], Any]) -> tuple[float, float]:
    """(step, compute): the fastest of k runs of each (µs), taken in turns, each after a
    barrier, so that both see the machine's load of the same moments (notebook 25's
    interleaved timer, one call a batch)."""
    times = interleaved_us({"step": step, "compute": compute}, barrier, batches=k)
    return times["step"][0], times["compute"][0]


def error_rows(predicted: Sequence[Mapping[str, Any]], measured: Sequence[Mapping[str, Any]]
               ) -> list[dict[str, Any]]:
    """Per configuration: predicted and measured bytes, memory and step time, and the
    ratio measured / predicted of the time."""
    rows = []
    for p, m in zip(predicted, measured):
        rows.append({"config": p["config"], "bytes model": p["bytes"],
                     "bytes measured": m["bytes"], "memory formula": p["memory"],
                     "memory measured": m["memory"], "time predicted us": p["time_us"],
                     "time measured us": m["time_us"], "compute us": p["compute_us"],
                     "ratio": m["time_us"] / p["time_us"]})
    return rows


def error_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The prediction-error table, one line per configuration."""
    out = [f"{'configuration':<16}{'bytes: model':>13}{'measured':>11}{'memory: formula':>17}"
           f"{'measured':>11}{'time: predicted':>17}{'measured':>11}{'meas/pred':>10}"]
    for r in rows:
        out.append(f"{r['config']:<16}{r['bytes model']:>13,.0f}{r['bytes measured']:>11,}"
                   f"{r['memory formula']:>17,.0f}{r['memory measured']:>11,}"
                   f"{r['time predicted us'] / 1e3:>14.2f} ms"
                   f"{r['time measured us'] / 1e3:>8.2f} ms{r['ratio']:>10.2f}")
    return "\n".join(out)


def held(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes this rank holds: parameters, gradients and optimizer state (its local shards;
    each storage once; Adam's scalar step counters left out, as the formulas do)."""
    from helpers.training.zero import held_bytes
    params = list(model.parameters())
    state = [] if optimizer is None else [
        t for s in optimizer.state.values() for t in s.values()
        if torch.is_tensor(t) and t.dim() > 0]
    return {"parameters": held_bytes(params), "gradients": held_bytes(p.grad for p in params),
            "optimizer state": held_bytes(state)}


def full_grad(model: nn.Module) -> torch.Tensor:
    """Every parameter's whole gradient, flattened in order (DTensors gathered back)."""
    return torch.cat([(g.full_tensor() if hasattr(g, "full_tensor") else g).flatten()
                      for g in (p.grad for p in model.parameters())])


def local_shards(stack: nn.Sequential, rank: int, n: int) -> nn.Sequential:
    """The stack cut to what tensor-parallel rank `rank` of n computes (its heads and MLP
    features, as `tp_plan` splits them; `helpers.transformer.sequence_parallel`'s shards):
    plain Linears of the local widths, to time the computation without the network."""
    from helpers.transformer.sequence_parallel import column_shard, row_shard
    for block in stack:
        for name in ("q", "k", "v"):
            weight, bias = column_shard(getattr(block.attn, name), rank, n)
            setattr(block.attn, name, _linear(weight, bias))
        block.attn.o = _linear(row_shard(block.attn.o, rank, n), block.attn.o.bias.detach())
        weight, bias = column_shard(block.mlp[0], rank, n)
        block.mlp[0] = _linear(weight, bias)
        block.mlp[2] = _linear(row_shard(block.mlp[2], rank, n), block.mlp[2].bias.detach())
    return stack


def _linear(weight: torch.Tensor, bias: torch.Tensor) -> nn.Linear:
    layer = nn.Linear(weight.shape[1], weight.shape[0], dtype=weight.dtype,
                      device=weight.device)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
    return layer


def sweep_fits_rows(cluster: Any, collectives: Sequence[str], sizes: Sequence[int],
                    tries: int = 3, **sweep: Any) -> tuple[Any, list[dict]]:
    """`helpers.bench.sweep.sweep_fits`, also returning the rows of the sweep it fitted (for
    `helpers.bench.figures.plot_fit`): a sweep refused because its time does not grow with
    the size is measured again, up to `tries` sweeps, each retry printed."""
    from helpers.bench.alpha_beta import NO_GROWTH, fit_all
    from helpers.bench.sweep import rank0_rows, run_sweep
    if tries < 1:
        raise ValueError(f"tries must be at least 1, not {tries}")
    for sweep_number in range(1, tries + 1):
        rows = rank0_rows(run_sweep(cluster, collectives, sizes, **sweep))
        fits = fit_all(rows)
        if not fits.refused:
            return fits, rows
        reasons = "; ".join(fits.refused.values())
        disturbed = all(NO_GROWTH in reason for reason in fits.refused.values())
        if not disturbed or sweep_number == tries:
            raise ValueError(f"sweep {sweep_number} of at most {tries} refused: {reasons}")
        print(f"sweep {sweep_number} of at most {tries} refused ({reasons}): measured again")
    raise AssertionError("unreachable")
