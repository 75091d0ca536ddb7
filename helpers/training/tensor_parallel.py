"""Tensor parallelism plumbing: sizes that divide, shards, references, checks and plots.

The taught code (the sharded forward, Megatron's f and g, every collective) lives in
the notebooks' `%%px` cells; this module only prepares and checks. Used by notebooks
17 (tensor parallelism by hand) and 19 (a 2-D data × tensor parallel step).

    d_hidden = hidden_size(world_size)          # 4 features per rank: always divides
    model = make_mlp(d_hidden=d_hidden)          # the toy MLP of helpers.training.toy
    W1, b1 = column_shard(model[0], rank, n)     # output features rank·k … (rank+1)·k
    W2 = row_shard(model[2], rank, n)            # input features rank·k … (rank+1)·k
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import nn

from helpers.training.toy import loss_fn, make_data, make_mlp

FEATURES_PER_RANK = 4


def hidden_size(tp_size: int, per_rank: int = FEATURES_PER_RANK) -> int:
    """A hidden width that splits evenly over `tp_size` ranks."""
    if tp_size < 1:
        raise ValueError(f"tensor-parallel size must be at least 1, got {tp_size}")
    return per_rank * tp_size


def _span(features: int, rank: int, n: int) -> slice:
    if features % n:
        raise ValueError(f"{features} features do not split evenly over {n} ranks")
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} is not in 0..{n - 1}")
    k = features // n
    return slice(rank * k, (rank + 1) * k)


def column_shard(layer: nn.Linear, rank: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s rows of the weight (its output features) and of the bias, as copies."""
    rows = _span(layer.out_features, rank, n)
    return (layer.weight.detach()[rows].clone(), layer.bias.detach()[rows].clone())


def row_shard(layer: nn.Linear, rank: int, n: int) -> torch.Tensor:
    """Rank `rank`'s columns of the weight (its input features), as a copy."""
    return layer.weight.detach()[:, _span(layer.in_features, rank, n)].clone()


def feature_slice(tensor: torch.Tensor, rank: int, n: int) -> torch.Tensor:
    """Rank `rank`'s slice of the last dimension (the features)."""
    return tensor[..., _span(tensor.shape[-1], rank, n)]


@dataclass
class Reference:
    """The unsharded model's forward and backward on the whole batch, in one process."""
    hidden: torch.Tensor            # tanh(X W1ᵀ + b1)
    output: torch.Tensor
    loss: float
    grads: dict[str, torch.Tensor]  # parameter name → gradient
    input_grad: torch.Tensor        # d loss / d X


def reference(d_hidden: int, X: torch.Tensor | None = None,
              Y: torch.Tensor | None = None) -> Reference:
    """Forward and backward of `make_mlp(d_hidden=d_hidden)` on (X, Y) (the toy batch)."""
    if X is None or Y is None:
        X, Y = make_data()
    model = make_mlp(d_hidden=d_hidden)
    X = X.detach().clone().requires_grad_(True)
    hidden = model[1](model[0](X))
    output = model[2](hidden)
    loss = loss_fn(output, Y)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    return Reference(hidden.detach(), output.detach(), loss.item(), grads, X.grad.detach())


def tensor(value: Any) -> torch.Tensor:
    """A tensor back from `cluster.pull` ({"values", "dtype", ...}) or a plain list."""
    if isinstance(value, dict):
        return torch.tensor(value["values"], dtype=getattr(torch, value["dtype"]))
    return torch.as_tensor(value)


def max_diff(got: Any, expected: torch.Tensor) -> float:
    got = tensor(got).to(expected.dtype)
    if got.shape != expected.shape:
        return float("inf")
    return (got - expected).abs().max().item()


def shard_diffs(state: dict, ref: Reference, rank: int, n: int) -> dict[str, float]:
    """|pulled gradient − the reference's slice| for each sharded gradient of one rank."""
    g = ref.grads
    mine = _span(g["0.weight"].shape[0], rank, n)       # this rank's hidden features
    return {
        "W1 grad": max_diff(state["W1_grad"], g["0.weight"][mine]),
        "b1 grad": max_diff(state["b1_grad"], g["0.bias"][mine]),
        "W2 grad": max_diff(state["W2_grad"], g["2.weight"][:, mine]),
        "b2 grad": max_diff(state["b2_grad"], g["2.bias"]),
        "X grad": max_diff(state["X_grad"], ref.input_grad),
        "output": max_diff(state["output"], ref.output),
    }


def count_per_layer(layers: Sequence[tuple[str, nn.Module]], x: torch.Tensor,
                    target: torch.Tensor) -> list[tuple[str, str, dict]]:
    """Forward then backward through `layers`, one layer at a time, counting the
    collectives each layer calls in each direction.

    The graph is cut between layers (each gets a detached copy of its input) so that
    each layer's backward runs, and is counted, on its own; gradients still flow
    because each cut is bridged by hand with `backward(grad)`.
    """
    from helpers.training.comm import count_collectives

    inputs, outputs, rows = [], [], []
    current = x
    for name, layer in layers:
        current = current.detach().requires_grad_(True)
        inputs.append(current)
        with count_collectives() as log:
            current = layer(current)
        outputs.append(current)
        rows.append((name, "forward", log.by_name()))
    grad = None
    for (name, _), inp, out in reversed(list(zip(layers, inputs, outputs))):
        with count_collectives() as log:
            if grad is None:
                loss_fn(out, target).backward()
            else:
                out.backward(grad)
        rows.append((name, "backward", log.by_name()))
        grad = inp.grad
    return rows


def bytes_table(rows: Sequence[tuple[str, str, dict]]) -> str:
    """Rows (layer, phase, CommLog.by_name()) as a text table of calls and bytes sent."""
    lines = [f"{'layer':<18}{'phase':<10}{'collective':<12}{'calls':>6}{'S (bytes)':>11}"
             f"{'sent/rank':>11}"]
    total = 0.0
    for layer, phase, by_name in rows:
        if not by_name:
            lines.append(f"{layer:<18}{phase:<10}{'—':<12}{0:>6}{0:>11}{0:>11}")
        for name, row in by_name.items():
            lines.append(f"{layer:<18}{phase:<10}{name:<12}{int(row['calls']):>6}"
                         f"{int(row['size']):>11}{row['sent']:>11.0f}")
            total += row["sent"]
    lines.append(f"{'total':<40}{'':>17}{total:>11.0f}")
    return "\n".join(lines)


def plot_shards(states: Sequence[dict], title: str):
    """Per rank: the column-parallel weight shard and output slice, the row-parallel
    weight shard and partial output (heat maps, one column of panels per rank)."""
    import matplotlib.pyplot as plt

    panels = [("W1_shard", "column-parallel W1 shard\n(its output features × d_in)"),
              ("Y1_slice", "its output slice\n(batch × its features)"),
              ("W2_shard", "row-parallel W2 shard\n(d_out × its input features)"),
              ("Y2_partial", "its partial output\n(batch × d_out), before all_reduce")]
    n = len(states)
    fig, axes = plt.subplots(len(panels), n, figsize=(2.6 * n + 1, 8.5), squeeze=False)
    for col, state in enumerate(states):
        for row, (name, label) in enumerate(panels):
            ax = axes[row][col]
            values = tensor(state[name]).numpy()
            ax.imshow(values, aspect="auto", cmap="coolwarm")
            ax.set_title(f"rank {state['rank']}: {tuple(values.shape)}", fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
            if col == 0:
                ax.set_ylabel(label, fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig
