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


def plot_per_rank(pulled: Sequence[Mapping[str, Any]], names: Mapping[str, str], title: str):
    """What each rank measured in each configuration: the bytes it wrote to the others
    (gloo) and the bytes of parameters, gradients and optimizer state it holds; one bar per
    rank in its colour, configurations side by side."""
    import numpy as np
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    n = len(pulled)
    width = 0.8 / n
    for ax, (what, value) in zip(axes, (
            ("bytes written to the others", lambda run: run["bytes"]),
            ("bytes held (params, grads, Adam)", lambda run: sum(run["memory"].values())))):
        for s in sorted(pulled, key=lambda s: s["rank"]):
            r = s["rank"]
            heights = [value(s[key]) / 1e6 for key in names.values()]
            ax.bar(np.arange(len(names)) + (r - (n - 1) / 2) * width, heights, width,
                   color=rank_colour(r), label=f"rank {r}")
        ax.set_xticks(range(len(names)), list(names), fontsize=8)
        ax.set_ylabel(f"{what} (MB)", fontsize=8)
        ax.tick_params(labelsize=8)
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    plt.close(fig)
    return fig
