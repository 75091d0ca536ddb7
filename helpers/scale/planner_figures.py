"""Notebook 27's figures: what each rank holds of the stack under each configuration, and
the step time predicted (compute + communication) beside the measured one."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from helpers.training.schemes import rank_colour

# What rank r holds of block b, as (axis, start, end) fractions of the block: ZeRO-3 a band
# of every tensor's rows (drawn across), TP a share of the heads and features (drawn down).
HOLDS = {
    "DP": lambda r, b, n: ("x", 0.0, 1.0),
    "ZeRO-3": lambda r, b, n: ("y", r / n, (r + 1) / n),
    "TP": lambda r, b, n: ("x", r / n, (r + 1) / n),
    "PP": lambda r, b, n: ("x", 0.0, 1.0) if b == r else None,
}
CALLS = {"DP": "1 all_reduce of every gradient",
         "ZeRO-3": "a block: 2 all_gather + 1 reduce_scatter",
         "TP": "a block: 2 all_reduce forward, 4 backward",
         "PP": "send activations on, gradients back"}
SPLIT = {"DP": "the batch", "ZeRO-3": "the batch + rows\nof every tensor",
         "TP": "heads and\nMLP features", "PP": "the blocks"}


def draw_configurations(n: int):
    """One panel per configuration: n ranks (columns) × n blocks (rows); the part of each
    block a rank holds filled in its colour: ZeRO-3 a band of rows, TP a column of heads and
    features."""
    fig, axes = plt.subplots(1, 4, figsize=(8, 3.0))
    for ax, (name, holds) in zip(axes, HOLDS.items()):
        for r in range(n):
            for b in range(n):
                ax.add_patch(Rectangle((r + 0.08, n - b - 0.92), 0.84, 0.84, fill=False,
                                       edgecolor="#999999", lw=0.6))
                part = holds(r, b, n)
                if part is not None:
                    axis, lo, hi = part
                    x, y, w, h = r + 0.08, n - b - 0.92, 0.84, 0.84
                    if axis == "x":
                        x, w = x + w * lo, w * (hi - lo)
                    else:           # rows from the top of the block down
                        y, h = y + h * (1 - hi), h * (hi - lo)
                    ax.add_patch(Rectangle((x, y), w, h, facecolor=rank_colour(r, light=True),
                                           edgecolor=rank_colour(r), lw=0.8))
        ax.set_xlim(0, n)
        ax.set_ylim(-0.1, n)
        ax.set_xticks([r + 0.5 for r in range(n)], [str(r) for r in range(n)], fontsize=8)
        ax.set_yticks([n - b - 0.5 for b in range(n)], [f"block {b}" for b in range(n)],
                      fontsize=7)
        ax.tick_params(length=0)
        for side in ax.spines.values():
            side.set_visible(False)
        ax.set_xlabel("rank", fontsize=8, labelpad=1)
        ax.xaxis.set_label_coords(-0.02, -0.02)
        ax.set_title(f"{name}: splits\n{SPLIT[name]}", fontsize=8)
        ax.text(n / 2, -0.75, CALLS[name].replace(": ", ":\n"), ha="center", va="top",
                fontsize=7, transform=ax.transData)
    fig.suptitle(f"what each rank holds of the stack of {n} blocks (one colour per rank)",
                 fontsize=9)
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that draws it
    return fig


def plot_errors(rows: Sequence[Mapping[str, Any]], title: str):
    """Per configuration: the predicted step (measured compute + α-β communication,
    stacked) beside the measured one, labelled measured / predicted."""
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for i, r in enumerate(rows):
        compute, total = r["compute us"] / 1e3, r["time predicted us"] / 1e3
        measured = r["time measured us"] / 1e3
        ax.bar(i - 0.2, compute, 0.4, color="#9ecae1", label="compute (measured)" if i == 0
               else None)
        ax.bar(i - 0.2, total - compute, 0.4, bottom=compute, color="#bbbbbb",
               label="communication (α-β model)" if i == 0 else None)
        ax.bar(i + 0.2, measured, 0.4, color="#1f77b4",
               label="step, measured (gloo)" if i == 0 else None)
        ax.text(i + 0.2, measured, f"×{r['ratio']:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), [r["config"] for r in rows])
    ax.set_ylabel("step time (ms)")
    ax.set_title(title, fontsize=10)
    ax.margins(y=0.15)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


def plot_per_rank(pulled: Sequence[Mapping[str, Any]], names: Mapping[str, str], title: str,
                  model: Mapping[str, Sequence[Mapping[str, float]]] | None = None):
    """The bytes each rank wrote to the others in one step of each configuration (gloo):
    one bar per rank in its colour, configurations side by side. `model`, per configuration
    one {"bytes": ...} per rank (rank order), draws the planner's as a black tick on each
    bar."""
    fig, ax = plt.subplots(figsize=(8, 2.8))
    _per_rank_bars(ax, pulled, names, lambda run: {"": run["bytes"]},
                   None if model is None else (model, "bytes"))
    ax.set_ylabel("bytes written to the others (MB)", fontsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, fontsize=9)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig


PARTS = {"parameters": 1.0, "gradients": 0.7, "optimizer state": 0.4}   # shade of the colour


def plot_memory_per_rank(pulled: Sequence[Mapping[str, Any]], names: Mapping[str, str],
                         title: str, model: Mapping[str, Sequence[Mapping[str, float]]] | None
                         = None):
    """The bytes each rank holds in each configuration, stacked: parameters, gradients and
    optimizer state (lighter and lighter shades of the rank's colour). `model`, per
    configuration one {"memory": ...} per rank, draws the formula's total as a black tick."""
    fig, ax = plt.subplots(figsize=(8, 2.8))
    _per_rank_bars(ax, pulled, names, lambda run: run["memory"],
                   None if model is None else (model, "memory"))
    ax.set_ylabel("bytes held (MB)", fontsize=9)
    grey = [plt.Rectangle((0, 0), 1, 1, color="#555555", alpha=a) for a in PARTS.values()]
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles + grey, labels + list(PARTS), loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, fontsize=9)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig


def _per_rank_bars(ax, pulled, names, parts, model) -> None:
    """Bars per configuration (x) and rank (in its colour), each stacked from `parts(run)`;
    model = (per configuration a list per rank, key): a black tick at each rank's value."""
    import numpy as np
    n = len(pulled)
    width = 0.8 / n
    for s in sorted(pulled, key=lambda s: s["rank"]):
        r = s["rank"]
        xs = np.arange(len(names)) + (r - (n - 1) / 2) * width
        bottom = np.zeros(len(names))
        stacks = [parts(s[run]) for run in names.values()]
        for part in stacks[0]:
            heights = np.array([stack[part] for stack in stacks]) / 1e6
            ax.bar(xs, heights, width, bottom=bottom, color=rank_colour(r),
                   alpha=PARTS.get(part, 1.0), label=f"rank {r}" if part in ("", "parameters")
                   else None)
            bottom += heights
        if model is not None:
            values, key = model
            ax.hlines([values[name][r][key] / 1e6 for name in names], xs - width / 2,
                      xs + width / 2, color="black", lw=1.5,
                      label="planner (model)" if r == 0 else None)
    ax.set_xticks(range(len(names)), list(names), fontsize=9)
    ax.tick_params(labelsize=9)
