"""Figures of notebook 16 (ZeRO and FSDP by hand) drawn from the values the ranks return:
the collectives each rank entered when one skipped a call, gloo's reduce_scatter beside an
all_reduce of the same input, and rows that do not divide, padded for the all_gather.
Each returns a closed Figure, shown once as the value of the notebook cell that calls it.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from helpers.figures.column import COLUMN_IN
from helpers.training.schemes import rank_colour

SHORT = {"all_gather_single": "gather", "reduce_scatter_single": "scatter",
         "all_gather": "gather", "reduce_scatter": "scatter", "all_reduce": "reduce"}


def _box(ax: Any, x: float, y: float, w: float, h: float, text: str, face: str,
         gid: str, dashed: bool = False) -> None:
    from matplotlib.patches import Rectangle

    ax.add_patch(Rectangle((x, y), w, h, facecolor=face, edgecolor="#333333",
                           linestyle="--" if dashed else "-", linewidth=1, gid=gid))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9)


def plot_skipped(entered: Sequence[Sequence[str]], outcomes: Sequence[str],
                 title: str) -> Any:
    """One row per rank: a box per collective it entered, in order; a dashed box where it
    entered fewer than the others (the call it skipped); its outcome under the row."""
    import matplotlib.pyplot as plt

    n, most = len(entered), max(len(e) for e in entered)
    fig, ax = plt.subplots(figsize=(COLUMN_IN, 0.78 * n + 0.9))
    for r, calls in enumerate(entered):
        y = (n - 1 - r) * 1.6
        for i, name in enumerate(calls):
            _box(ax, i + 0.04, y, 0.92, 0.8, SHORT.get(name, name),
                 rank_colour(r, light=True), f"call:{r}:{i}")
        for i in range(len(calls), most):
            _box(ax, i + 0.04, y, 0.92, 0.8, "skipped", "white", f"skipped:{r}:{i}",
                 dashed=True)
        ax.text(0.04, y - 0.12, outcomes[r], ha="left", va="top", fontsize=9,
                color="#444444")
    ax.set_xlim(-0.05, most + 0.05)
    ax.set_ylim(-0.75, (n - 1) * 1.6 + 0.9)
    ax.set_yticks([(n - 1 - r) * 1.6 + 0.4 for r in range(n)],
                  [f"rank {r}" for r in range(n)])
    for r, label in enumerate(ax.get_yticklabels()):
        label.set_color(rank_colour(r))
    ax.set_xticks([i + 0.5 for i in range(most)], [str(i + 1) for i in range(most)],
                  fontsize=9)
    ax.set_xlabel("collectives entered, in order (gather: all_gather_single, "
                  "scatter: reduce_scatter_single)", fontsize=9)
    ax.spines[["top", "right", "left"]].set_visible(False)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig


def plot_scatter_bytes(per_rank: Sequence[dict[str, dict[str, float | None]]],
                       title: str) -> Any:
    """Per gradient: the ring model of its reduce_scatter (hatched), then per rank what
    gloo's reduce_scatter wrote (solid) beside an all_reduce of the same input (light)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    names = list(per_rank[0])
    n = len(per_rank)
    width = 0.8 / (2 * n + 1)
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(COLUMN_IN, 3.6))
    ax.bar(x, [per_rank[0][k]["ring model"] for k in names], width, color="none",
           edgecolor="k", hatch="//", gid="model")
    for r, sent in enumerate(per_rank):
        if any(sent[k]["reduce_scatter"] is None for k in names):
            continue
        at = x + (2 * r + 1) * width
        ax.bar(at, [sent[k]["reduce_scatter"] for k in names], width,
               color=rank_colour(r), gid=f"reduce_scatter:{r}")
        ax.bar(at + width, [sent[k]["all_reduce"] for k in names], width,
               color=rank_colour(r, light=True), gid=f"all_reduce:{r}")
    ax.set_xticks(x + 0.4 - width / 2, names)
    ax.set_ylabel("bytes this rank wrote")
    ax.set_title(title, fontsize=10)
    key = [Patch(facecolor="none", edgecolor="k", hatch="//",
                 label="ring model of the reduce_scatter")]
    key += [Patch(color=rank_colour(r), label=f"rank {r}: reduce_scatter") for r in range(n)]
    key += [Patch(color=rank_colour(0, light=True),
                  label="lighter: all_reduce, same input")]
    ax.legend(handles=key, fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.1),
              ncol=3, frameon=False)                  # below the axes: off the bars
    fig.tight_layout()
    plt.close(fig)
    return fig


def plot_odd_rows(held: Sequence[int], fsdp_rows: Sequence[int], rows: int,
                  title: str) -> Any:
    """`rows` rows over len(held) ranks: above, the all_gather's buffer, each rank's
    ⌈rows/n⌉ slots (its real rows, then padding); below, the tensor cut back to `rows`
    rows. held: the real rows each rank holds; fsdp_rows: FSDP2's piece on each rank."""
    import matplotlib.pyplot as plt

    n = len(held)
    per = math.ceil(rows / n)
    fig, ax = plt.subplots(figsize=(COLUMN_IN, 2.7))
    first = 0
    for r in range(n):
        for k in range(per):
            real = k < held[r]
            _box(ax, r * per + k + 0.04, 1.5, 0.92, 0.8,
                 f"row {first + k}" if real else "pad",
                 rank_colour(r, light=True) if real else "#eeeeee", f"slot:{r}:{k}",
                 dashed=not real)
        ax.text(r * per + per / 2, 2.4, f"rank {r}\nFSDP2: {fsdp_rows[r]} rows",
                ha="center", va="bottom", fontsize=9, color=rank_colour(r))
        first += held[r]
    for i in range(rows):
        owner = next(r for r in range(n) if i < sum(held[:r + 1]))
        _box(ax, i + 0.04, 0.0, 0.92, 0.8, f"row {i}", rank_colour(owner, light=True),
             f"row:{i}")
    ax.text(rows + 0.1, 0.4, f"cut back to {rows} rows", va="center", fontsize=9)
    ax.text(n * per + 0.1, 1.9, f"gathered: {n} × {per} rows", va="center", fontsize=9)
    ax.set_xlim(-0.05, n * per + 2.4)
    ax.set_ylim(-0.1, 3.1)
    ax.axis("off")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig
