"""Notebook 25's peer maps: who sends to whom, measured on the wire of each rank's sockets
(helpers.bench.wire.peer_matrix), one panel per collective, so the algorithm a library
runs shows as its shape (a ring is one diagonal, a tree a few cells)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from helpers.figures.animation import CONTENT_WIDTH_IN


def plot_peer_maps(maps: Mapping[str, Sequence[Sequence[float]]], size: int):
    """A heat map per collective: row i, column j = bytes rank i wrote to rank j, / size;
    each cell labelled with its value. The panels' order is the mapping's."""
    import matplotlib.pyplot as plt

    names = list(maps)
    n = len(next(iter(maps.values())))
    fig, axes = plt.subplots(1, len(names), figsize=(CONTENT_WIDTH_IN, 3.1),
                             squeeze=False)
    top = max(max(max(row) for row in m) for m in maps.values()) / size or 1.0
    for ax, name in zip(axes[0], names):
        values = np.asarray(maps[name], dtype=float) / size
        ax.imshow(values, cmap="Blues", vmin=0, vmax=top * 1.15, gid=f"map:{name}")
        for i in range(n):
            for j in range(n):
                ax.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if values[i, j] > 0.6 * top else "black",
                        gid=f"cell:{name}:{i}:{j}")
        ax.set_xticks(range(n), [str(j) for j in range(n)], fontsize=8.5)
        ax.set_yticks(range(n), [str(i) for i in range(n)], fontsize=8.5)
        ax.set_xlabel("to rank", fontsize=9)
        ax.set_title(f"gloo's {name}", fontsize=10)
    axes[0][0].set_ylabel("from rank", fontsize=9)
    fig.suptitle(f"bytes each rank wrote to each peer, / S (S = {size // 1024} KiB, {n} ranks,"
                 " measured on gloo)", fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig


def plot_tree_loads(loads: Mapping[str, Sequence[Sequence[float]]], ns: Sequence[int]):
    """The model's bytes per rank, / S, for each world size in `ns` (a row each) and each
    algorithm in `loads` (a panel each); cells past a row's world size are left blank and
    each row's busiest rank is outlined."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    ns = list(ns)
    width = max(ns)
    fig, axes = plt.subplots(1, len(loads), figsize=(CONTENT_WIDTH_IN, 3.3), squeeze=False)
    top = max(max(max(row) for row in rows) for rows in loads.values())
    for ax, (name, rows) in zip(axes[0], loads.items()):
        grid = np.full((len(ns), width), np.nan)
        for k, row in enumerate(rows):
            grid[k, :len(row)] = row
        ax.imshow(grid, cmap="Oranges", vmin=0, vmax=top * 1.3, aspect="auto",
                  gid=f"loads:{name}")
        for k, row in enumerate(rows):
            busiest = max(row)
            for r, v in enumerate(row):
                ax.text(r, k, f"{v:g}", ha="center", va="center", fontsize=8,
                        gid=f"load:{name}:{ns[k]}:{r}")
                if v == busiest:
                    ax.add_patch(Rectangle((r - 0.46, k - 0.46), 0.92, 0.92, fill=False,
                                           lw=1.2, edgecolor="black"))
        ax.set_xticks(range(width), [str(r) for r in range(width)], fontsize=8.5)
        ax.set_yticks(range(len(ns)), [f"n = {n}" for n in ns], fontsize=8.5)
        ax.set_xlabel("rank", fontsize=9)
        ax.set_title({"tree": "one binary tree", "double_tree": "our double tree"}.get(
            name, name), fontsize=10)
    fig.suptitle("the model: bytes each rank writes in one all_reduce, / S "
                 "(outlined: the busiest rank)", fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig
