"""Tensor parallelism plumbing: sizes that divide, shards, references, checks and plots.

The taught code (the sharded forward, Megatron's f and g, every collective) lives in
the notebooks' `%%px` cells; this module only prepares and checks.

    d_hidden = hidden_size(world_size)          # 4 features per rank: always divides
    model = make_mlp(d_hidden=d_hidden)          # the toy MLP of helpers.training.toy
    W1, b1 = column_shard(model[0], rank, n)     # output features rank·k … (rank+1)·k
    W2 = row_shard(model[2], rank, n)            # input features rank·k … (rank+1)·k
    rows = count_per_layer(layers, X, Y)         # per layer and phase: calls, model, measured
    bytes_table(rows); wire_report(title, [rows of each rank], n)   # shown, then checked
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import nn

from helpers.training.measured import NOT_MEASURED, bytes_text, measured_vs_model
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


def max_diff(got: Any, expected: torch.Tensor) -> float:
    """The largest |got − expected| (got: a pulled tensor, or nested lists); inf when the
    shapes differ, 0 for two empty tensors."""
    got = torch.as_tensor(got).to(expected.dtype)
    if got.shape != expected.shape:
        return float("inf")
    return (got - expected).abs().max().item() if got.numel() else 0.0


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


def log_row(layer: str, phase: str, log) -> dict:
    """One block of `count_collectives` as a row: its calls, the ring model's bytes and the
    block's measured bytes (None on NCCL), for `bytes_table` and `wire_report`."""
    return {"layer": layer, "phase": phase, "collectives": log.by_name(), "calls": log.calls,
            "model": log.model_bytes, "measured": log.measured_bytes}


def count_per_layer(layers: Sequence[tuple[str, nn.Module]], x: torch.Tensor,
                    target: torch.Tensor) -> list[dict]:
    """Forward then backward through `layers`, one layer at a time, counting the
    collectives each layer calls in each direction and measuring what it sends.

    The graph is cut between layers (each gets a detached copy of its input) so that
    each layer's backward runs, and is counted, on its own; gradients still flow
    because each cut is bridged by hand with `backward(grad)`. One row per layer and
    phase (`log_row`).
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
        rows.append(log_row(name, "forward", log))
    grad = None
    for (name, _), inp, out in reversed(list(zip(layers, inputs, outputs))):
        with count_collectives() as log:
            if grad is None:
                loss_fn(out, target).backward()
            else:
                out.backward(grad)
        rows.append(log_row(name, "backward", log))
        grad = inp.grad
    return rows


def bytes_table(rows: Sequence[dict], columns: tuple[str, str] = ("layer", "phase")) -> str:
    """Rows of `count_per_layer` as a text table: calls, S, the model's and the measured bytes.

    "model": what the rank sends when NCCL runs each call as a ring;
    "measured": what its process wrote on gloo (not measured on NCCL). `columns` names
    the rows' "layer" and "phase".
    """
    lines = [f"{columns[0]:<17}{columns[1]:<10}{'collective':<12}{'calls':>6}{'S (B)':>8}"
             f"{'model: ring (B)':>17}{'measured: gloo (B)':>20}"]
    model = measured = 0.0
    for row in rows:
        names = row["collectives"] or {"—": {"calls": 0, "size": 0, "model": 0.0,
                                             "measured": row["measured"]}}
        for name, c in names.items():
            lines.append(f"{row['layer']:<17}{row['phase']:<10}{name:<12}{c['calls']:>6}"
                         f"{c['size']:>8}{bytes_text(c['model']):>17}"
                         f"{bytes_text(c['measured']):>20}")
        model += row["model"]
        measured = None if None in (measured, row["measured"]) else measured + row["measured"]
    lines.append(f"{'total':<53}{bytes_text(model):>17}{bytes_text(measured):>20}")
    return "\n".join(lines)


def wire_report(title: str, rows_by_rank: Sequence[Sequence[dict]], n: int):
    """✓ per rank when every row (a layer and phase, `log_row`) wrote what the model says
    plus gloo's headers (`helpers.bench.wire.agrees`), and a row without a call wrote 0 B.

    n: the group's size, unless a row says its own ("n").
    """
    from helpers.checks import Report

    report = Report(title)
    for rank, rows in enumerate(rows_by_rank):
        if any(row["measured"] is None for row in rows):
            return report.note(NOT_MEASURED)
        verdicts = [(row, *measured_vs_model(row["measured"], row["model"], row["calls"],
                                             row.get("n", n))) for row in rows]
        quiet = [row["measured"] for row in rows if not row["calls"]]
        text = "; ".join(f"{row['layer']} {row['phase']}".strip() + f": {said}"
                         for row, _, said in verdicts if row["calls"])
        if quiet:
            text += f"; {len(quiet)} without a call wrote " + (
                "0 B" if set(quiet) == {0} else ", ".join(f"{q:,} B" for q in quiet))
        report.add(rank, all(ok for _, ok, _ in verdicts), text)
    return report


def against_hand_model(theirs: Sequence[dict], hand: Sequence[dict]) -> list[dict]:
    """torch's rows with the hand-built rows' calls and model: what `wire_report` checks
    torch's measured bytes against (its own calls are invisible to the counter)."""
    return [{**t, "calls": h["calls"], "model": h["model"]} for t, h in zip(theirs, hand)]


def plot_shards(states: Sequence[dict], title: str):
    """The split, from what the ranks hold: W1 put back together from every rank's rows
    and W2 from its columns, each rank's part outlined in its colour (`schemes.rank_colour`);
    Y1 assembled from the output slices; each rank's partial output, and Y2 (rank 0's, after
    the all_reduce) that their sum gives. states: pulled W1_shard, Y1_slice, W2_shard,
    Y2_partial, Y2 per rank."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from helpers.training.schemes import rank_colour

    def whole(name: str, dim: int):
        return torch.cat([torch.as_tensor(s[name]) for s in states], dim=dim).numpy()

    n = len(states)
    w1, y1, w2 = whole("W1_shard", 0), whole("Y1_slice", 1), whole("W2_shard", 1)
    k = w1.shape[0] // n
    fig = plt.figure(figsize=(8, 6.6))
    top = fig.add_gridspec(1, 2, left=0.07, right=0.98, top=0.86, bottom=0.53,
                           width_ratios=[1, 2.2], wspace=0.25)
    low = fig.add_gridspec(1, n + 2, left=0.07, right=0.98, top=0.36, bottom=0.05,
                           width_ratios=[2.4] + [1] * (n + 1), wspace=0.35)
    panels = [(fig.add_subplot(top[0]), w1, f"W1, whole {w1.shape}:\nrank r's rows", 0),
              (fig.add_subplot(top[1]), y1, f"Y1 {y1.shape}: rank r's columns,\nthe "
               "all_gather puts them side by side", 1),
              (fig.add_subplot(low[0]), w2, f"W2, whole {w2.shape}:\nrank r's columns", 1)]
    for ax, values, label, dim in panels:
        limit = float(abs(values).max()) or 1.0
        ax.imshow(values, aspect="auto", cmap="coolwarm", vmin=-limit, vmax=limit)
        ax.set_title(label, fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
        middles, names = [r * k + (k - 1) / 2 for r in range(n)], [f"r{r}" for r in range(n)]
        (ax.set_yticks if dim == 0 else ax.set_xticks)(middles, names)
        for r, label in enumerate(ax.get_yticklabels() if dim == 0 else ax.get_xticklabels()):        # each rank's part: its name, its colour
            label.set_color(rank_colour(r))
            label.set_fontsize(10)
            label.set_fontweight("bold")
        for r in range(n):
            rows, cols = values.shape
            xy, size = (((-0.5, r * k - 0.5), (cols, k)) if dim == 0
                        else ((r * k - 0.5, -0.5), (k, rows)))
            inset = 0.12                          # side by side, not on top of each other
            ax.add_patch(Rectangle((xy[0] + inset, xy[1] + inset), size[0] - 2 * inset,
                                   size[1] - 2 * inset, fill=False, linewidth=2.6,
                                   edgecolor=rank_colour(r), clip_on=False, gid=f"rank:{r}"))
    for r, state in enumerate(states):
        ax = fig.add_subplot(low[r + 1])
        partial = torch.as_tensor(state["Y2_partial"]).numpy()
        ax.imshow(partial, aspect="auto", cmap="coolwarm")
        ax.set_title(f"rank {r}" + ("\n+" if r < n - 1 else "\n"), fontsize=10,
                     color=rank_colour(r))
        ax.set_xticks([])
        ax.set_yticks([])
        for spine in ax.spines.values():
            spine.set_edgecolor(rank_colour(r))
            spine.set_linewidth(2.6)
    ax = fig.add_subplot(low[n + 1])
    ax.imshow(torch.as_tensor(states[0]["Y2"]).numpy(), aspect="auto", cmap="coolwarm")
    ax.set_title("= Σ + b2:\nY2", fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])
    fig.text(0.07, 0.45, "row-parallel: each rank's partial output (batch × d_out); the "
             "all_reduce sums them", fontsize=10, color="#444444")
    fig.suptitle(title, x=0.07, ha="left", fontsize=11)
    fig.text(0.07, 0.935, "column-parallel: each rank holds rows of W1, computes columns "
             "of Y1", fontsize=10, color="#444444")
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig
